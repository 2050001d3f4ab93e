package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/metrics"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/kube/controller"
)

// The cluster every test builds: two nodes of two GPUs as agents report
// them, a namespace that opted in and one that did not.
const (
	nsChaos = "chaos"
	nsPlain = "plain"
)

func cluster(t testing.TB) *kubetest.Env {
	t.Helper()
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	ctx := context.Background()
	for _, n := range []string{"node-a", "node-b"} {
		gpus, _ := json.Marshal([]v1alpha1.GPUReport{{Index: 0, UUID: "GPU-" + n + "-0"}, {Index: 1, UUID: "GPU-" + n + "-1"}})
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"pool": "h200"},
			Annotations: map[string]string{v1alpha1.AnnotationGPUs: string(gpus)}}}
		if err := env.Client.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	for ns, labels := range map[string]map[string]string{nsChaos: {v1alpha1.LabelChaos: v1alpha1.ChaosEnabled}, nsPlain: nil} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}); err != nil {
			t.Fatal(err)
		}
	}
	return env
}

// prometheus stands in for a Prometheus scraping the nodes' exporters:
// every instant query is answered with the number of NodeFaults the agents
// report applied, so an expectation "xid > 0" holds once a fault is in
// effect and not before; a range query (a detector's rule, evaluated on
// the server) is answered, while one is applied, with node-a's GPU 0
// reporting XID 79 at every step, else with nothing. (The detectors'
// evaluation on a real server is internal/kube/kubetarget's test.)
func prometheus(t testing.TB, env *kubetest.Env) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var l v1alpha1.NodeFaultList
		if err := env.Client.List(r.Context(), &l); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		n := 0
		for _, nf := range l.Items {
			if nf.Status.Phase == v1alpha1.NodeFaultApplied {
				n++
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/query_range") {
			start, _ := strconv.ParseFloat(r.FormValue("start"), 64)
			end, _ := strconv.ParseFloat(r.FormValue("end"), 64)
			step, _ := strconv.ParseFloat(r.FormValue("step"), 64)
			var values []string
			for ts := start; n > 0 && step > 0 && ts <= end; ts += step {
				values = append(values, fmt.Sprintf(`[%.3f,"79"]`, ts))
			}
			result := ""
			if len(values) > 0 {
				result = `{"metric":{"__name__":"DCGM_FI_DEV_XID_ERRORS","Hostname":"node-a","gpu":"0","UUID":"GPU-node-a-0"},"values":[` + strings.Join(values, ",") + `]}`
			}
			fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":[%s]}}`, result)
			return
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"xid"},"value":[%d,"%d"]}]}}`, time.Now().Unix(), n)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// agent stands in for the node agents in this package's tests: it
// acknowledges NodeFaults through the real API server, Applied for Apply
// and Recovered for Recover, unless holdRecover is set.
type agent struct {
	c           client.WithWatch
	holdRecover atomic.Bool
	failApply   atomic.Bool // on node-b
	kick        chan struct{}
}

func startAgent(t testing.TB, env *kubetest.Env) *agent {
	a := &agent{c: env.Client, kick: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

// release lets held recoveries through.
func (a *agent) release() {
	a.holdRecover.Store(false)
	a.kick <- struct{}{}
}

func (a *agent) run(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := a.c.Watch(ctx, &v1alpha1.NodeFaultList{})
		if err != nil {
			continue
		}
		a.all(ctx) // what changed before the watch began
		func() {
			defer w.Stop()
			for {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					if nf, ok := ev.Object.(*v1alpha1.NodeFault); ok && ev.Type != watch.Deleted {
						a.handle(ctx, nf)
					}
				case <-a.kick:
					a.all(ctx)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
}

func (a *agent) all(ctx context.Context) {
	var l v1alpha1.NodeFaultList
	if a.c.List(ctx, &l) == nil {
		for i := range l.Items {
			a.handle(ctx, &l.Items[i])
		}
	}
}

func (a *agent) handle(ctx context.Context, nf *v1alpha1.NodeFault) {
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur v1alpha1.NodeFault
		if err := a.c.Get(ctx, client.ObjectKeyFromObject(nf), &cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		now := metav1.Now()
		switch {
		case cur.Spec.Action == v1alpha1.ActionApply && cur.Status.Phase == "" && a.failApply.Load() && cur.Spec.NodeName == "node-b":
			cur.Status.Phase, cur.Status.Message = v1alpha1.NodeFaultFailed, "write /dev/kmsg: permission denied"
		case cur.Spec.Action == v1alpha1.ActionApply && cur.Status.Phase == "":
			cur.Status.Phase, cur.Status.AppliedAt = v1alpha1.NodeFaultApplied, &now
		case cur.Spec.Action == v1alpha1.ActionRecover && cur.Status.Phase != v1alpha1.NodeFaultRecovered && !a.holdRecover.Load():
			cur.Status.Phase, cur.Status.RecoveredAt = v1alpha1.NodeFaultRecovered, &now
		default:
			return nil
		}
		cur.Status.Agent = "sim-agent/" + cur.Spec.NodeName
		if os.Getenv("GPUCHAOS_TEST_LOG") != "" {
			fmt.Fprintf(os.Stderr, "agent: %s %s -> %s (hold %v)\n", cur.Name, cur.Spec.Action, cur.Status.Phase, a.holdRecover.Load())
		}
		cur.Status.ObservedGeneration = cur.Generation
		return a.c.Status().Update(ctx, &cur)
	})
}

func startController(t testing.TB, env *kubetest.Env, prom string) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("GPUCHAOS_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	mgr, err := controller.New(controller.Options{
		Config: env.Config, Prometheus: prom, Logger: log,
		PollInterval: 100 * time.Millisecond, RecoveryWindow: -1, StatusInterval: 100 * time.Millisecond,
		SkipNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

func experiment(ns, name string, duration time.Duration, nodes ...string) *v1alpha1.Experiment {
	zero := 0.0
	return &v1alpha1.Experiment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.ExperimentSpec{
			Selector: v1alpha1.Selector{Nodes: nodes, Mode: v1alpha1.ModeAll},
			Faults:   []v1alpha1.FaultSpec{{ID: "hardware.xid", Params: map[string]v1alpha1.ParamValue{"code": "79"}}},
			Duration: v1alpha1.Duration{Duration: duration},
			Expectations: []v1alpha1.Expectation{{Name: "up", Within: v1alpha1.Duration{Duration: time.Minute},
				Probe: &v1alpha1.ProbeSpec{Prometheus: &v1alpha1.PrometheusProbe{Query: "xid", Op: ">", Value: &zero}}}},
		},
	}
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not reached in 60 s; last state: %s", what, last)
}

func get(t *testing.T, env *kubetest.Env, ns, name string) (*v1alpha1.Experiment, error) {
	var e v1alpha1.Experiment
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &e)
	return &e, err
}

func nodeFaults(t *testing.T, env *kubetest.Env, ns, name string) []v1alpha1.NodeFault {
	t.Helper()
	var l v1alpha1.NodeFaultList
	if err := env.Client.List(context.Background(), &l, client.MatchingLabels{v1alpha1.LabelExperiment: name, v1alpha1.LabelExperimentNamespace: ns}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func phaseIs(t *testing.T, env *kubetest.Env, ns, name string, want v1alpha1.ExperimentPhase) func() (bool, string) {
	return func() (bool, string) {
		e, err := get(t, env, ns, name)
		if err != nil {
			return false, err.Error()
		}
		return e.Status.Phase == want, fmt.Sprintf("phase %q, conditions %v, events %+v, verdicts %+v", e.Status.Phase, e.Status.Conditions, e.Status.Events, e.Status.Verdicts)
	}
}

func testAdmissionRefusals(t *testing.T, env *kubetest.Env, a *agent) {
	unknown := experiment(nsChaos, "unknown-fault", 3*time.Second, "node-a")
	unknown.Spec.Faults[0].ID = "hardware.no-such-fault"
	nothing := experiment(nsChaos, "matches-nothing", 3*time.Second)
	nothing.Spec.Selector.NodeSelector = map[string]string{"pool": "a100"}
	logProbe := experiment(nsChaos, "log-probe", 3*time.Second, "node-a")
	logProbe.Spec.Expectations = []v1alpha1.Expectation{{Name: "xid-line", Within: v1alpha1.Duration{Duration: time.Minute},
		Probe: &v1alpha1.ProbeSpec{Log: &v1alpha1.LogProbe{Pattern: "NVRM: Xid"}}}}
	tests := []struct {
		exp    *v1alpha1.Experiment
		reason string
	}{
		{logProbe, controller.ReasonProbe},
		{experiment(nsPlain, "no-opt-in", 3*time.Second, "node-a"), controller.ReasonNotOptedIn},
		{experiment(nsChaos, "over-blast-radius", 3*time.Second, "node-a", "node-b"), controller.ReasonBlastRadius},
		{unknown, controller.ReasonInvalidSpec},
		{nothing, controller.ReasonSelector},
	}
	for _, tt := range tests {
		t.Run(tt.exp.Name, func(t *testing.T) {
			if err := env.Client.Create(context.Background(), tt.exp); err != nil {
				t.Fatal(err)
			}
			eventually(t, "refused", phaseIs(t, env, tt.exp.Namespace, tt.exp.Name, v1alpha1.PhaseFailed))
			e, _ := get(t, env, tt.exp.Namespace, tt.exp.Name)
			c := meta.FindStatusCondition(e.Status.Conditions, v1alpha1.ConditionAdmitted)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tt.reason || c.Message == "" {
				t.Fatalf("Admitted condition = %+v, want False with reason %s and a message", c, tt.reason)
			}
			t.Logf("refused: %s: %s", c.Reason, c.Message)
			if nfs := nodeFaults(t, env, tt.exp.Namespace, tt.exp.Name); len(nfs) != 0 {
				t.Errorf("%d NodeFaults created for a refused experiment", len(nfs))
			}
			if len(e.Finalizers) != 0 {
				t.Errorf("finalizers %v on a refused experiment", e.Finalizers)
			}
			eventually(t, "a Warning Event "+tt.reason, hasEvent(t, env, e, corev1.EventTypeWarning, tt.reason, c.Message))
		})
	}
}

// hasEvent holds once an events.k8s.io Event about exp has the type,
// reason and a note containing note, written by the controller.
func hasEvent(t *testing.T, env *kubetest.Env, exp *v1alpha1.Experiment, typ, reason, note string) func() (bool, string) {
	return func() (bool, string) {
		var l eventsv1.EventList
		if err := env.Client.List(context.Background(), &l, client.InNamespace(exp.Namespace)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range l.Items {
			if ev.Regarding.UID != exp.UID {
				continue
			}
			seen = append(seen, ev.Type+" "+ev.Reason+" "+ev.Action+": "+ev.Note)
			if ev.Type == typ && ev.Reason == reason && strings.Contains(ev.Note, note) && ev.ReportingController == controller.EventSource {
				return true, ""
			}
		}
		return false, fmt.Sprintf("events about %s: %q", exp.Name, seen)
	}
}

func testRunToVerdicts(t *testing.T, env *kubetest.Env, a *agent) {
	exp := experiment(nsChaos, "xid-79", 2*time.Second, "node-a")
	if err := env.Client.Create(context.Background(), exp); err != nil {
		t.Fatal(err)
	}
	// The NodeFaults exist, labelled, while the run goes.
	eventually(t, "two NodeFaults applied", func() (bool, string) {
		nfs := nodeFaults(t, env, nsChaos, exp.Name)
		n := 0
		for _, nf := range nfs {
			if nf.Status.Phase == v1alpha1.NodeFaultApplied && nf.Labels[v1alpha1.LabelNode] == "node-a" && nf.Spec.Target.GPU != nil {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%d applied of %d", n, len(nfs))
	})
	eventually(t, "succeeded", phaseIs(t, env, nsChaos, exp.Name, v1alpha1.PhaseSucceeded))
	e, _ := get(t, env, nsChaos, exp.Name)
	s := e.Status
	if s.Passed != "1/1" || len(s.Verdicts) != 1 || !s.Verdicts[0].Passed || s.Verdicts[0].Result != "pass" || s.Verdicts[0].TimeToDetect == nil {
		t.Errorf("verdicts %+v, passed %q; want one pass with a time to detect, 1/1", s.Verdicts, s.Passed)
	}
	v := s.Verdicts[0]
	det := v.Detector
	if det == "" {
		det = v.Name
	}
	if n := counterValue(t, "gpuchaos_experiment_verdicts_total", map[string]string{
		"namespace": nsChaos, "experiment": exp.Name, "expectation": v.Name, "detector": det, "result": "pass", "passed": "true"}); n != 1 {
		t.Errorf("gpuchaos_experiment_verdicts_total of the pass = %v, want 1", n)
	}
	if s.EventsTotal < len(s.Events) || len(s.Events) == 0 {
		t.Errorf("eventsTotal %d for %d events", s.EventsTotal, len(s.Events))
	}
	if len(s.Targets) != 2 || s.PlannedNodes != 1 {
		t.Fatalf("targets %+v, planned nodes %d; want 2 on 1 node", s.Targets, s.PlannedNodes)
	}
	for _, tg := range s.Targets {
		if tg.Phase != v1alpha1.NodeFaultRecovered || tg.NodeFault == "" || tg.Node != "node-a" {
			t.Errorf("target %+v, want recovered on node-a with its NodeFault", tg)
		}
	}
	eventually(t, "a Started Event", hasEvent(t, env, e, corev1.EventTypeNormal, "Started", "2 injections on 1 nodes"))
	eventually(t, "a Succeeded Event", hasEvent(t, env, e, corev1.EventTypeNormal, "Succeeded", "1/1 expectations passed"))
	for _, ct := range []string{v1alpha1.ConditionAdmitted, v1alpha1.ConditionInjected, v1alpha1.ConditionRecovered} {
		if !meta.IsStatusConditionTrue(s.Conditions, ct) {
			t.Errorf("condition %s not True: %+v", ct, s.Conditions)
		}
	}
	kinds := map[string]int{}
	for _, ev := range s.Events {
		kinds[ev.Kind]++
	}
	if kinds["inject"] != 2 || kinds["recover"] != 2 || kinds["detect"] != 1 {
		t.Errorf("events by kind %v, want 2 inject, 1 detect, 2 recover", kinds)
	}
	// Cleaned up: NodeFaults deleted, then the finalizer removed.
	eventually(t, "clean-up", func() (bool, string) {
		e, _ := get(t, env, nsChaos, exp.Name)
		nfs := nodeFaults(t, env, nsChaos, exp.Name)
		return len(nfs) == 0 && len(e.Finalizers) == 0, fmt.Sprintf("%d NodeFaults, finalizers %v", len(nfs), e.Finalizers)
	})
}

// TestFailedApply: an agent reporting Failed fails the run with its
// message, and what was created is recovered all the same.
// testDetector: a built-in detector is admitted when the controller has
// a Prometheus server, and its rule, evaluated there, detects the fault
// on the injected GPU.
func testDetector(t *testing.T, env *kubetest.Env, a *agent) {
	// Evaluations are every 15 s: a fault held 20 s spans one.
	exp := experiment(nsChaos, "xid-detector", 20*time.Second, "node-a")
	exp.Spec.Expectations = []v1alpha1.Expectation{{Detector: "dcgm-xid-errors", Within: v1alpha1.Duration{Duration: time.Minute}}}
	if err := env.Client.Create(context.Background(), exp); err != nil {
		t.Fatal(err)
	}
	eventually(t, "succeeded", phaseIs(t, env, nsChaos, exp.Name, v1alpha1.PhaseSucceeded))
	e, _ := get(t, env, nsChaos, exp.Name)
	if c := meta.FindStatusCondition(e.Status.Conditions, v1alpha1.ConditionAdmitted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Admitted condition %+v, want True", c)
	}
	if s := e.Status; s.Passed != "1/1" || len(s.Verdicts) != 1 || s.Verdicts[0].Detector != "dcgm-xid-errors" || !s.Verdicts[0].Passed {
		t.Errorf("verdicts %+v, passed %q; want dcgm-xid-errors passed, 1/1", s.Verdicts, s.Passed)
	}
	eventually(t, "clean-up", func() (bool, string) {
		nfs := nodeFaults(t, env, nsChaos, exp.Name)
		return len(nfs) == 0 || allRecovered(nfs), fmt.Sprintf("%d NodeFaults", len(nfs))
	})
}

func allRecovered(nfs []v1alpha1.NodeFault) bool {
	for _, nf := range nfs {
		if nf.Status.Phase != v1alpha1.NodeFaultRecovered {
			return false
		}
	}
	return true
}

// TestAdmissionWithoutPrometheus: a controller given no --prometheus
// refuses detector and threshold probes, saying how to give it one.
func TestAdmissionWithoutPrometheus(t *testing.T) {
	env := cluster(t)
	startAgent(t, env)
	startController(t, env, "")
	exp := experiment(nsChaos, "no-server", 3*time.Second, "node-a")
	exp.Spec.Expectations = []v1alpha1.Expectation{{Detector: "dcgm-xid-errors", Within: v1alpha1.Duration{Duration: time.Minute}}}
	if err := env.Client.Create(context.Background(), exp); err != nil {
		t.Fatal(err)
	}
	eventually(t, "refused", phaseIs(t, env, nsChaos, exp.Name, v1alpha1.PhaseFailed))
	e, _ := get(t, env, nsChaos, exp.Name)
	c := meta.FindStatusCondition(e.Status.Conditions, v1alpha1.ConditionAdmitted)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != controller.ReasonProbe ||
		!strings.Contains(c.Message, "none is configured") || !strings.Contains(c.Message, "controller.prometheus") {
		t.Fatalf("Admitted condition %+v, want False, %s, saying to configure the controller's Prometheus", c, controller.ReasonProbe)
	}
	if nfs := nodeFaults(t, env, nsChaos, exp.Name); len(nfs) != 0 {
		t.Errorf("%d NodeFaults created for a refused experiment", len(nfs))
	}
}

func testFailedApply(t *testing.T, env *kubetest.Env, a *agent) {
	a.failApply.Store(true)
	defer a.failApply.Store(false)
	exp := experiment(nsChaos, "denied", time.Minute, "node-b")
	if err := env.Client.Create(context.Background(), exp); err != nil {
		t.Fatal(err)
	}
	eventually(t, "failed", phaseIs(t, env, nsChaos, exp.Name, v1alpha1.PhaseFailed))
	e, _ := get(t, env, nsChaos, exp.Name)
	found := false
	for _, ev := range e.Status.Events {
		found = found || ev.Kind == "error" && contains(ev.Detail, "permission denied")
	}
	if !found {
		t.Errorf("no error event carrying the agent's message: %+v", e.Status.Events)
	}
	eventually(t, "clean-up", func() (bool, string) {
		e, _ := get(t, env, nsChaos, exp.Name)
		nfs := nodeFaults(t, env, nsChaos, exp.Name)
		return len(nfs) == 0 && len(e.Finalizers) == 0, fmt.Sprintf("%d NodeFaults, finalizers %v", len(nfs), e.Finalizers)
	})
}

func contains(s, sub string) bool {
	return len(sub) == 0 || len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func appliedAll(t *testing.T, env *kubetest.Env, ns, name string, want int) func() (bool, string) {
	return func() (bool, string) {
		nfs := nodeFaults(t, env, ns, name)
		n := 0
		for _, nf := range nfs {
			if nf.Status.Phase == v1alpha1.NodeFaultApplied {
				n++
			}
		}
		return n == want, fmt.Sprintf("%d of %d applied", n, len(nfs))
	}
}

func testAbortAnnotation(t *testing.T, env *kubetest.Env, a *agent) {
	exp := experiment(nsChaos, "long", 10*time.Minute, "node-a")
	if err := env.Client.Create(context.Background(), exp); err != nil {
		t.Fatal(err)
	}
	eventually(t, "applied", appliedAll(t, env, nsChaos, exp.Name, 2))
	e, _ := get(t, env, nsChaos, exp.Name)
	patch := client.MergeFrom(e.DeepCopy())
	e.Annotations = map[string]string{v1alpha1.AnnotationAbort: "true"}
	if err := env.Client.Patch(context.Background(), e, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "aborted", phaseIs(t, env, nsChaos, exp.Name, v1alpha1.PhaseAborted))
	eventually(t, "clean-up", func() (bool, string) {
		e, _ := get(t, env, nsChaos, exp.Name)
		nfs := nodeFaults(t, env, nsChaos, exp.Name)
		return len(nfs) == 0 && len(e.Finalizers) == 0, fmt.Sprintf("%d NodeFaults, finalizers %v", len(nfs), e.Finalizers)
	})
	e, _ = get(t, env, nsChaos, exp.Name)
	if c := meta.FindStatusCondition(e.Status.Conditions, v1alpha1.ConditionRecovered); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Recovered condition %+v, want True", c)
	}
}

// TestDeleteMidRun: a deleted Experiment stays until its NodeFaults are
// recovered, then goes with them.
func testDeleteMidRun(t *testing.T, env *kubetest.Env, a *agent) {
	exp := experiment(nsChaos, "deleted", 10*time.Minute, "node-a")
	if err := env.Client.Create(context.Background(), exp); err != nil {
		t.Fatal(err)
	}
	eventually(t, "applied", appliedAll(t, env, nsChaos, exp.Name, 2))
	a.holdRecover.Store(true)
	if err := env.Client.Delete(context.Background(), exp); err != nil {
		t.Fatal(err)
	}
	eventually(t, "recovery asked", func() (bool, string) {
		nfs := nodeFaults(t, env, nsChaos, exp.Name)
		n := 0
		for _, nf := range nfs {
			if nf.Spec.Action == v1alpha1.ActionRecover {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%d of %d set to Recover", n, len(nfs))
	})
	e, err := get(t, env, nsChaos, exp.Name)
	if err != nil || e.DeletionTimestamp == nil {
		t.Fatalf("the experiment went before its NodeFaults recovered (err %v)", err)
	}
	a.release()
	eventually(t, "deleted with its NodeFaults", func() (bool, string) {
		_, err := get(t, env, nsChaos, exp.Name)
		nfs := nodeFaults(t, env, nsChaos, exp.Name)
		return apierrors.IsNotFound(err) && len(nfs) == 0, fmt.Sprintf("get: %v, %d NodeFaults", err, len(nfs))
	})
}

// testPodFanOut: a network fault narrowed to a job makes a NodeFault per
// pod of the job, and the status follows each injection through all of
// its NodeFaults.
func testPodFanOut(t *testing.T, env *kubetest.Env, a *agent) {
	ctx := context.Background()
	uids := map[string]bool{}
	for i, node := range []string{"node-a", "node-a", "node-b"} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: nsChaos, Name: fmt.Sprintf("net-worker-%d", i), Labels: map[string]string{
				"training.kubeflow.org/job-name": "net", "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": fmt.Sprint(i)}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "train"}}},
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		uids[string(p.UID)] = true
	}
	exp := experiment(nsChaos, "net-pods", 2*time.Second)
	exp.Spec.Selector = v1alpha1.Selector{Mode: v1alpha1.ModeAll, Jobs: []string{"net"}}
	exp.Spec.BlastRadius.MaxNodes = 2
	exp.Spec.Faults = []v1alpha1.FaultSpec{{ID: "network.delay", Mechanism: "netem", Params: map[string]v1alpha1.ParamValue{"delay": "10ms"}}}
	if err := env.Client.Create(ctx, exp); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a NodeFault per pod applied", func() (bool, string) {
		nfs := nodeFaults(t, env, nsChaos, exp.Name)
		n := 0
		for _, nf := range nfs {
			if nf.Status.Phase == v1alpha1.NodeFaultApplied && uids[nf.Spec.Target.PodUID] && nf.Spec.Target.Kind == "node" && nf.Spec.Target.Job == "net" {
				n++
			}
		}
		e, _ := get(t, env, nsChaos, exp.Name)
		return n == 3, fmt.Sprintf("%d of %d applied in a pod of net; phase %s, conditions %+v", n, len(nfs), e.Status.Phase, e.Status.Conditions)
	})
	eventually(t, "succeeded", phaseIs(t, env, nsChaos, exp.Name, v1alpha1.PhaseSucceeded))
	e, _ := get(t, env, nsChaos, exp.Name)
	s := e.Status
	if len(s.Targets) != 2 || s.PlannedNodes != 2 {
		t.Fatalf("targets %+v, planned nodes %d; want one per node on 2 nodes", s.Targets, s.PlannedNodes)
	}
	for _, tg := range s.Targets {
		if tg.Phase != v1alpha1.NodeFaultRecovered {
			t.Errorf("target %+v, want recovered through all its NodeFaults", tg)
		}
	}
	for _, ct := range []string{v1alpha1.ConditionInjected, v1alpha1.ConditionRecovered} {
		if !meta.IsStatusConditionTrue(s.Conditions, ct) {
			t.Errorf("condition %s not True: %+v", ct, s.Conditions)
		}
	}
	eventually(t, "clean-up", func() (bool, string) {
		e, _ := get(t, env, nsChaos, exp.Name)
		nfs := nodeFaults(t, env, nsChaos, exp.Name)
		return len(nfs) == 0 && len(e.Finalizers) == 0, fmt.Sprintf("%d NodeFaults, finalizers %v", len(nfs), e.Finalizers)
	})
}

// testCheckpointFanOut: a checkpoint fault (job scope) on a job of three
// pods reaches the pods its mechanism acts from, as NodeFaults of kind
// job naming each pod: corrupt-newest only the lowest rank's (it acts on
// shared files), kill-writer every pod's processes.
func testCheckpointFanOut(t *testing.T, env *kubetest.Env, a *agent) {
	ctx := context.Background()
	var pods []*corev1.Pod
	for i, node := range []string{"node-b", "node-a", "node-a"} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: nsChaos, Name: fmt.Sprintf("ck-worker-%d", i), Labels: map[string]string{
				"training.kubeflow.org/job-name": "ck", "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": fmt.Sprint(i)}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "train"}}},
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	for _, tt := range []struct {
		fault, mech string
		want        []*corev1.Pod
	}{
		{"checkpoint.corrupt-newest", "byte-flip", pods[:1]},
		{"checkpoint.kill-writer", "signal", pods},
	} {
		t.Run(tt.fault, func(t *testing.T) {
			exp := experiment(nsChaos, "ck-"+strings.TrimPrefix(tt.fault, "checkpoint."), 2*time.Second)
			exp.Spec.Selector = v1alpha1.Selector{Mode: v1alpha1.ModeAll, Jobs: []string{"ck"}}
			exp.Spec.BlastRadius.MaxNodes = 2
			exp.Spec.Faults = []v1alpha1.FaultSpec{{ID: tt.fault, Mechanism: tt.mech}}
			if err := env.Client.Create(ctx, exp); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a NodeFault per pod it acts from, applied", func() (bool, string) {
				var got []string
				for _, nf := range nodeFaults(t, env, nsChaos, exp.Name) {
					if nf.Status.Phase == v1alpha1.NodeFaultApplied && nf.Spec.Target.Kind == "job" && nf.Spec.Target.Job == "ck" {
						got = append(got, nf.Spec.NodeName+"/"+nf.Spec.Target.Pod+"/"+nf.Spec.Target.PodUID)
					}
				}
				var want []string
				for _, p := range tt.want {
					want = append(want, p.Spec.NodeName+"/"+p.Namespace+"/"+p.Name+"/"+string(p.UID))
				}
				slices.Sort(got)
				slices.Sort(want)
				e, _ := get(t, env, nsChaos, exp.Name)
				return slices.Equal(got, want), fmt.Sprintf("applied %q, want %q; phase %s, conditions %+v", got, want, e.Status.Phase, e.Status.Conditions)
			})
			eventually(t, "succeeded", phaseIs(t, env, nsChaos, exp.Name, v1alpha1.PhaseSucceeded))
			eventually(t, "clean-up", func() (bool, string) {
				e, _ := get(t, env, nsChaos, exp.Name)
				nfs := nodeFaults(t, env, nsChaos, exp.Name)
				return len(nfs) == 0 && len(e.Finalizers) == 0, fmt.Sprintf("%d NodeFaults, finalizers %v", len(nfs), e.Finalizers)
			})
		})
	}
}

// TestExperiments runs experiments through one controller and one
// simulated agent on one API server.
func TestExperiments(t *testing.T) {
	env := cluster(t)
	a := startAgent(t, env)
	startController(t, env, prometheus(t, env))
	for _, tt := range []struct {
		name string
		test func(*testing.T, *kubetest.Env, *agent)
	}{
		{"admission refusals", testAdmissionRefusals},
		{"run to verdicts", testRunToVerdicts},
		{"detector on the cluster's Prometheus", testDetector},
		{"checkpoint faults fan out to pods", testCheckpointFanOut},
		{"failed apply", testFailedApply},
		{"abort annotation", testAbortAnnotation},
		{"delete mid-run", testDeleteMidRun},
		{"network fault on a job's pods", testPodFanOut},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.test(t, env, a) })
	}
}

// TestTakeover: an Experiment left Running by a controller that died,
// with its NodeFaults applied, is recovered and failed by the next one.
func TestTakeover(t *testing.T) {
	env := cluster(t)
	startAgent(t, env)
	ctx := context.Background()
	exp := experiment(nsChaos, "orphan", 10*time.Minute, "node-a")
	exp.Finalizers = []string{v1alpha1.FinalizerRecover}
	if err := env.Client.Create(ctx, exp); err != nil {
		t.Fatal(err)
	}
	// What the dead controller left: phase Running and two NodeFaults.
	exp.Status.Phase = v1alpha1.PhaseRunning
	if err := env.Client.Status().Update(ctx, exp); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		gpu := i
		nf := &v1alpha1.NodeFault{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("orphan-%d", i), Labels: map[string]string{
				v1alpha1.LabelNode: "node-a", v1alpha1.LabelExperiment: exp.Name, v1alpha1.LabelExperimentNamespace: nsChaos}},
			Spec: v1alpha1.NodeFaultSpec{NodeName: "node-a", Fault: "hardware.xid", Mechanism: "kernel-log", Action: v1alpha1.ActionApply,
				Target: v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &gpu, Key: fmt.Sprintf("node-a/gpu%d", i)}, ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour))},
		}
		if err := env.Client.Create(ctx, nf); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "applied", appliedAll(t, env, nsChaos, exp.Name, 2))
	startController(t, env, prometheus(t, env))
	eventually(t, "failed", phaseIs(t, env, nsChaos, exp.Name, v1alpha1.PhaseFailed))
	e, _ := get(t, env, nsChaos, exp.Name)
	c := meta.FindStatusCondition(e.Status.Conditions, v1alpha1.ConditionRecovered)
	if c == nil || c.Reason != controller.ReasonControllerRestart || c.Status != metav1.ConditionTrue {
		t.Fatalf("Recovered condition %+v, want True with reason %s", c, controller.ReasonControllerRestart)
	}
	eventually(t, "a Warning Event "+controller.ReasonControllerRestart, hasEvent(t, env, e, corev1.EventTypeWarning, controller.ReasonControllerRestart, "not judged"))
	eventually(t, "clean-up", func() (bool, string) {
		e, _ := get(t, env, nsChaos, exp.Name)
		nfs := nodeFaults(t, env, nsChaos, exp.Name)
		return len(nfs) == 0 && len(e.Finalizers) == 0, fmt.Sprintf("%d NodeFaults, finalizers %v", len(nfs), e.Finalizers)
	})
}

var _ = io.Discard

// counterValue reads a counter the controller serves on its /metrics, from
// controller-runtime's registry, by its exact labels; 0 when absent.
func counterValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue samples
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
