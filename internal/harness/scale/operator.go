package scale

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
)

// Namespace is where the operator driver creates its Experiments,
// labelled so the controller admits them.
const Namespace = "scale"

// Operator is the Driver that leaves the NodeFaults to the controller:
// Inject creates an Experiment selecting the nodes labelled
// [LabelTarget] (GPU 3 of each, so one NodeFault per node) with an xid
// fault, and Recover aborts it. prom is the Prometheus server the
// controller was started with (see [Cluster.Prometheus]): the
// Experiment's expectation asks it, as the controller admits only probes
// it can run in the cluster.
func Operator(targets int) Driver {
	return Driver{
		Name: "operator",
		Inject: func(ctx context.Context, c client.Client, run string, _ []string) error {
			if err := ensureNamespace(ctx, c); err != nil {
				return err
			}
			zero := 0.0
			exp := &v1alpha1.Experiment{
				ObjectMeta: metav1.ObjectMeta{Name: run, Namespace: Namespace},
				Spec: v1alpha1.ExperimentSpec{
					Selector: v1alpha1.Selector{NodeSelector: map[string]string{LabelTarget: "true"}, GPUs: []string{"3"}, Mode: v1alpha1.ModeAll},
					Faults:   []v1alpha1.FaultSpec{{ID: "hardware.xid", Params: map[string]v1alpha1.ParamValue{"code": "79"}}},
					// Long enough that only the abort ends it.
					Duration:    v1alpha1.Duration{Duration: time.Hour},
					BlastRadius: v1alpha1.BlastRadius{MaxNodes: targets, MaxGPUs: targets},
					Expectations: []v1alpha1.Expectation{{Name: "xid-seen", Within: v1alpha1.Duration{Duration: 10 * time.Minute},
						Probe: &v1alpha1.ProbeSpec{Prometheus: &v1alpha1.PrometheusProbe{Query: "xid", Op: ">", Value: &zero}}}},
				},
			}
			if err := c.Create(ctx, exp); err != nil {
				return fmt.Errorf("create Experiment %s: %w", run, err)
			}
			// A refused Experiment would leave the harness waiting for
			// NodeFaults that never come: wait until the controller
			// admitted it and started, and say why not otherwise.
			return pollExperiment(ctx, c, run, 5*time.Minute, func(e *v1alpha1.Experiment) (bool, error) {
				switch {
				case e.Status.Phase.Final():
					return false, fmt.Errorf("experiment %s ended %s before injecting: %+v", run, e.Status.Phase, e.Status.Conditions)
				case e.Status.Phase == v1alpha1.PhaseRunning:
					return true, nil
				}
				return false, nil
			})
		},
		Recover: func(ctx context.Context, c client.Client, run string) error {
			exp := &v1alpha1.Experiment{ObjectMeta: metav1.ObjectMeta{Name: run, Namespace: Namespace}}
			patch := client.RawPatch("application/merge-patch+json",
				[]byte(`{"metadata":{"annotations":{"`+v1alpha1.AnnotationAbort+`":"true"}}}`))
			if err := c.Patch(ctx, exp, patch); err != nil {
				return fmt.Errorf("abort Experiment %s: %w", run, err)
			}
			return nil
		},
		Cleanup: func(ctx context.Context, c client.Client, run string) error {
			// Wait for the Aborted phase first: deleting a run mid-way
			// would end it Failed rather than as an abort.
			if err := pollExperiment(ctx, c, run, 5*time.Minute, func(e *v1alpha1.Experiment) (bool, error) {
				return e.Status.Phase.Final(), nil
			}); err != nil {
				return err
			}
			exp := &v1alpha1.Experiment{ObjectMeta: metav1.ObjectMeta{Name: run, Namespace: Namespace}}
			if err := c.Delete(ctx, exp); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete Experiment %s: %w", run, err)
			}
			return nil
		},
	}
}

func ensureNamespace(ctx context.Context, c client.Client) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: map[string]string{v1alpha1.LabelChaos: v1alpha1.ChaosEnabled}}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", Namespace, err)
	}
	return nil
}

// pollExperiment gets the Experiment until done says so, fails, or within
// passes.
func pollExperiment(ctx context.Context, c client.Client, name string, within time.Duration, done func(*v1alpha1.Experiment) (bool, error)) error {
	deadline := time.Now().Add(within)
	var e v1alpha1.Experiment
	for {
		err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, &e)
		if err == nil {
			ok, err := done(&e)
			if err != nil || ok {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("experiment %s: phase %q after %s (get: %v); conditions %+v", name, e.Status.Phase, within, err, e.Status.Conditions)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Prometheus serves, for any query, one sample: how many NodeFaults the
// harness has seen Applied. It stands in for the cluster's Prometheus so
// the Experiment's expectation has something true to find once the
// fault is in.
func (c *Cluster) Prometheus(tb testing.TB) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := c.phases.count(v1alpha1.NodeFaultApplied)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"xid"},"value":[%d,"%d"]}]}}`, time.Now().Unix(), n)
	}))
	tb.Cleanup(srv.Close)
	return srv.URL
}

// Controller is `gpuchaos controller` running as a process of its own, so
// its memory is its own and not the harness's.
type Controller struct {
	cmd *exec.Cmd
	Log string // its stderr, kept in a file
}

// ControllerLogEnv names a file to keep the controller's log in (its
// JSON lines, for looking at where a run's time went); by default it goes
// to a temporary folder removed with the benchmark.
const ControllerLogEnv = "GPUCHAOS_SCALE_CONTROLLER_LOG"

// StartController runs bin's controller against c's API server, asking
// prom for prometheus probes, and stops it when tb ends.
func (c *Cluster) StartController(tb testing.TB, bin, prom string) *Controller {
	tb.Helper()
	logPath := os.Getenv(ControllerLogEnv)
	if logPath == "" {
		logPath = filepath.Join(tb.TempDir(), "controller.log")
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "controller", "--kubeconfig", c.Env.Kubeconfig, "--leader-elect=false",
		"--health-probe-bind-address=0", "--metrics-bind-address=0", "--prometheus", prom)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start controller: %v", err)
	}
	ctl := &Controller{cmd: cmd, Log: logPath}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
	})
	return ctl
}

// PeakRSS is the controller's peak resident memory so far, in bytes.
func (ctl *Controller) PeakRSS() (int64, error) {
	return PeakRSSOf(ctl.cmd.Process.Pid)
}

// PeakRSSOf returns process pid's peak resident memory (VmHWM) in bytes.
func PeakRSSOf(pid int) (int64, error) {
	return vmHWM(filepath.Join("/proc", strconv.Itoa(pid), "status"))
}
