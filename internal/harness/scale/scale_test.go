package scale

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/kube/controller"
)

func init() { log.SetLogger(logr.Discard()) }

// The harness end to end on a small cluster, so the test suite proves
// what the benchmark measures: kwok readies the nodes, the direct driver
// creates one NodeFault per target, the simulated agents acknowledge
// each, and the waits see every one Applied and then Recovered.
func TestHarness(t *testing.T) {
	c := NewCluster(t, 30)
	targets := c.Targets()
	if len(targets) != 3 {
		t.Fatalf("targets of 30 nodes = %v, want every tenth", targets)
	}
	for i := range 2 { // a second run on the same cluster starts clean
		tm := c.Run(t, Direct, fmt.Sprintf("run-%d", i), targets, 2*time.Minute)
		if tm.Applied <= 0 || tm.Recovered <= 0 {
			t.Errorf("run %d timing = %+v", i, tm)
		}
	}
	if s := c.Agents.Stats(); s.Applied != 6 || s.Recovered != 6 {
		t.Errorf("agents wrote %+v, want 6 applied and 6 recovered", s)
	}
	rss, err := PeakRSS()
	if err != nil || rss <= 0 {
		t.Errorf("PeakRSS() = %d, %v", rss, err)
	}
}

// The operator driver end to end on a small cluster, with the operator
// in this process (the benchmark runs the built command instead; the
// Experiment and what it leads to are the same): the controller admits
// the Experiment, selects the labelled tenth of the nodes, its NodeFaults
// carry the run's label the tracker counts by, and the abort recovers
// every one.
func TestOperatorDriver(t *testing.T) {
	c := NewCluster(t, 30)
	mgr, err := controller.New(controller.Options{Config: c.Env.Config, Prometheus: c.Prometheus(t), SkipNameValidation: true})
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
	targets := c.Targets()
	d := Operator(len(targets))
	for i := range 2 {
		run := fmt.Sprintf("op-%d", i)
		tm := c.Run(t, d, run, targets, 2*time.Minute)
		if tm.Applied <= 0 || tm.Recovered <= 0 {
			t.Errorf("run %d timing = %+v", i, tm)
		}
		var e v1alpha1.Experiment
		err := c.Env.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: run}, &e)
		if err == nil && e.Status.Phase != v1alpha1.PhaseAborted {
			t.Errorf("Experiment %s ended %s, want %s", run, e.Status.Phase, v1alpha1.PhaseAborted)
		}
	}
	// Every NodeFault went to a target node: the agents of the other
	// nodes wrote nothing.
	if s := c.Agents.Stats(); s.Applied != 6 || s.Recovered != 6 {
		t.Errorf("agents wrote %+v, want 6 applied and 6 recovered", s)
	}
	rss, err := PeakRSSOf(os.Getpid())
	if err != nil || rss <= 0 {
		t.Errorf("PeakRSSOf(self) = %d, %v", rss, err)
	}
}

func TestVmHWM(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, status string
		want         int64
		wantErr      bool
	}{
		{name: "kernel format", status: "Name:\tgo\nVmPeak:\t  812345 kB\nVmHWM:\t   52340 kB\nVmRSS:\t   51000 kB\n", want: 52340 * 1024},
		{name: "missing", status: "Name:\tgo\nVmRSS:\t 1 kB\n", wantErr: true},
		{name: "not kB", status: "VmHWM:\t 1 MB\n", wantErr: true},
		{name: "not a number", status: "VmHWM:\t x kB\n", wantErr: true},
		{name: "negative", status: "VmHWM:\t -1 kB\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "status")
			if err := os.WriteFile(path, []byte(tc.status), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := vmHWM(path)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("vmHWM = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func FuzzVmHWM(f *testing.F) {
	f.Add("VmHWM:\t   52340 kB\n")
	f.Add("VmHWM: -1 kB")
	f.Add("VmHWM:")
	f.Fuzz(func(t *testing.T, status string) {
		path := filepath.Join(t.TempDir(), "status")
		if err := os.WriteFile(path, []byte(status), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := vmHWM(path)
		if err != nil {
			return
		}
		if !strings.Contains(status, "VmHWM:") {
			t.Errorf("vmHWM = %d with no VmHWM line", got)
		}
		if got < 0 || got%1024 != 0 {
			t.Errorf("vmHWM = %d, not a whole number of kB", got)
		}
	})
}

// largeEnv asks for the node counts that are skipped unless named: a
// comma-separated list, or "all".
const largeEnv = "GPUCHAOS_SCALE_NODES"

// defaultSizes run on any -bench that matches BenchmarkScale; larger ones
// run only when asked, since creating and readying 5,000 nodes on two
// cores takes minutes before the first run.
var (
	defaultSizes = []int{500, 1000, 2000}
	largeSizes   = []int{5000}
)

// asked says whether size was named: in GPUCHAOS_SCALE_NODES, or
// anywhere in -test.bench (Scale/5000, Scale/(2000|5000)).
func asked(size int) bool {
	s := strconv.Itoa(size)
	if v := os.Getenv(largeEnv); v == "all" || slices.Contains(strings.Split(v, ","), s) {
		return true
	}
	f := flag.Lookup("test.bench")
	return f != nil && strings.Contains(f.Value.String(), s)
}

// BenchmarkScale measures one fault run touching 10 % of the nodes of a
// kwok cluster: how long until every NodeFault is Applied, and after
// recovery is asked how long until every one is Recovered. Setup (control
// plane, nodes, agents) is outside the timed loop and reported once as
// nodes-create-s and nodes-ready-s. Each iteration is a fresh run on the
// same cluster; -benchtime=Nx runs N of them. See doc.go for results.
func BenchmarkScale(b *testing.B) {
	for _, n := range append(slices.Clone(defaultSizes), largeSizes...) {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			if slices.Contains(largeSizes, n) && !asked(n) {
				b.Skipf("%d nodes only when asked: -bench=Scale/%d or %s=%d", n, n, largeEnv, n)
			}
			c := NewCluster(b, n)
			benchmarkScale(b, c, Direct)
		})
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveGPUChaos()
	os.Exit(code)
}

// BenchmarkScaleOperator is BenchmarkScale with the controller making
// the NodeFaults: `gpuchaos controller`, built from this tree and run as
// a process of its own, admits one Experiment selecting the labelled
// tenth of the nodes, creates a NodeFault per node, and after the abort
// annotation recovers them; the simulated agents, in this process,
// acknowledge each through the API server. applied-s runs from the
// Experiment's create until every NodeFault is Applied, recovered-s from
// the abort until every one is Recovered; controller-peak-MiB is the
// controller process's VmHWM at the end.
func BenchmarkScaleOperator(b *testing.B) {
	for _, n := range append(slices.Clone(defaultSizes), largeSizes...) {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			if slices.Contains(largeSizes, n) && !asked(n) {
				b.Skipf("%d nodes only when asked: -bench=ScaleOperator/%d or %s=%d", n, n, largeEnv, n)
			}
			bin := testutil.GPUChaos(b)
			c := NewCluster(b, n)
			ctl := c.StartController(b, bin, c.Prometheus(b))
			benchmarkScale(b, c, Operator(len(c.Targets())))
			rss, err := ctl.PeakRSS()
			if err != nil {
				b.Fatalf("controller peak memory: %v (log %s)", err, ctl.Log)
			}
			b.ReportMetric(float64(rss)/(1<<20), "controller-peak-MiB")
			if l, err := os.ReadFile("/proc/loadavg"); err == nil {
				b.Logf("load average at the end: %s", strings.TrimSpace(string(l)))
			}
		})
	}
}

func benchmarkScale(b *testing.B, c *Cluster, d Driver) {
	n := len(c.Nodes)
	targets := c.Targets()
	b.Logf("%d nodes created in %s, Ready in %s; %d targets", n, c.CreateNodes.Round(time.Millisecond), c.ReadyNodes.Round(time.Millisecond), len(targets))
	var applied, recovered time.Duration
	runs := 0
	for b.Loop() {
		tm := c.Run(b, d, fmt.Sprintf("run-%d", runs), targets, 10*time.Minute)
		applied += tm.Applied
		recovered += tm.Recovered
		runs++
		b.Logf("run %d: %d applied in %s, recovered in %s", runs, len(targets), tm.Applied.Round(time.Millisecond), tm.Recovered.Round(time.Millisecond))
	}
	b.ReportMetric(applied.Seconds()/float64(runs), "applied-s")
	b.ReportMetric(recovered.Seconds()/float64(runs), "recovered-s")
	b.ReportMetric(c.CreateNodes.Seconds(), "nodes-create-s")
	b.ReportMetric(c.ReadyNodes.Seconds(), "nodes-ready-s")
	rss, err := PeakRSS()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(rss)/(1<<20), "harness-peak-MiB")
}
