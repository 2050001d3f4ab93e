package kubee2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/kube/controller"
	xidfmt "github.com/gpuchaos/gpuchaos/internal/model/xid"
	nf "github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
	nt "github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
)

// xidExperiment's expectation holds while the agent's counter of the XID
// is new (absent 15 s before), so it clears after recovery as the
// engine's recovery check wants; a plain counter > 0 never clears.
const xidExperiment = `apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata: {name: %s}
spec:
  selector: {nodes: [` + node + `], gpus: ["1"], mode: one}
  faults: [{id: hardware.xid, mechanism: kernel-log, params: {code: %d, pid: 4242, process: %s}}]
  duration: 20s
  expectations:
    - name: xid-counted
      within: 60s
      probe: {prometheus: {query: 'gpuchaos_xid_events_total{job="` + scrapeJob + `",gpu="1",code="%d"} unless gpuchaos_xid_events_total offset 15s', op: ">", value: 0}}
`

// netExperiment is network.loss on the fixture's veth for long enough
// that a test interrupts it mid-run.
const netExperiment = `apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata: {name: %s}
spec:
  selector: {nodes: [` + node + `], mode: one}
  faults: [{id: network.loss, mechanism: cls-bpf, params: {probability: 0.5, pid: %d, interface: %s}}]
  duration: 10m
`

func xidFile(t *testing.T, name, process string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	writeFile(t, path, fmt.Sprintf(xidExperiment, name, xidCode, process, xidCode))
	return path
}

func netFile(t *testing.T, name string, fx *nt.Fixture) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	writeFile(t, path, fmt.Sprintf(netExperiment, name, fx.PID, nt.IfA))
	return path
}

// create loads an experiment file and creates it in the opted-in
// namespace through the API, as kubectl apply would.
func create(t *testing.T, c *cluster, path string) *v1alpha1.Experiment {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := v1alpha1.Load(data, path)
	if err != nil {
		t.Fatal(err)
	}
	exp.Namespace = chaosNS
	if err := c.env.Client.Create(t.Context(), exp); err != nil {
		t.Fatalf("create experiment %s: %v", exp.Name, err)
	}
	return exp
}

func runCLI(t *testing.T, c *cluster, path, ns string) *proc {
	t.Helper()
	return start(t, "gpuchaos run", "run", path, "--target", "k8s", "--kubeconfig", c.env.Kubeconfig, "-n", ns)
}

func getExp(t *testing.T, c *cluster, name string) (*v1alpha1.Experiment, bool) {
	t.Helper()
	var e v1alpha1.Experiment
	err := c.env.Client.Get(t.Context(), client.ObjectKey{Namespace: chaosNS, Name: name}, &e)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("get experiment %s: %v", name, err)
	}
	return &e, true
}

func waitExpPhase(t *testing.T, c *cluster, name string, phase v1alpha1.ExperimentPhase) *v1alpha1.Experiment {
	t.Helper()
	var e *v1alpha1.Experiment
	testutil.Eventually(t, within, fmt.Sprintf("experiment %s to reach %s", name, phase), func() bool {
		var ok bool
		e, ok = getExp(t, c, name)
		if !ok {
			t.Fatalf("experiment %s is gone while waiting for %s", name, phase)
		}
		if e.Status.Phase.Final() && e.Status.Phase != phase {
			t.Fatalf("experiment %s ended %s, want %s: %+v", name, e.Status.Phase, phase, e.Status.Conditions)
		}
		return e.Status.Phase == phase
	})
	return e
}

func faultsOf(t *testing.T, c *cluster, exp string) []v1alpha1.NodeFault {
	t.Helper()
	var l v1alpha1.NodeFaultList
	if err := c.env.Client.List(t.Context(), &l, client.MatchingLabels{v1alpha1.LabelExperiment: exp}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// waitApplied waits until the experiment's one NodeFault reports Applied.
func waitApplied(t *testing.T, c *cluster, exp string) v1alpha1.NodeFault {
	t.Helper()
	var f v1alpha1.NodeFault
	testutil.Eventually(t, within, "the NodeFault of "+exp+" to be applied", func() bool {
		l := faultsOf(t, c, exp)
		if len(l) > 1 {
			t.Fatalf("experiment %s made %d NodeFaults, want 1", exp, len(l))
		}
		if len(l) == 1 && l[0].Status.Phase == v1alpha1.NodeFaultFailed {
			t.Fatalf("NodeFault %s failed: %s", l[0].Name, l[0].Status.Message)
		}
		if len(l) == 1 && l[0].Status.Phase == v1alpha1.NodeFaultApplied {
			f = l[0]
			return true
		}
		return false
	})
	return f
}

func waitNoFaults(t *testing.T, c *cluster, exp string) {
	t.Helper()
	testutil.Eventually(t, within, "the NodeFaults of "+exp+" to be deleted", func() bool { return len(faultsOf(t, c, exp)) == 0 })
}

func snapshot(t *testing.T, fx *nt.Fixture) nf.Snapshot {
	t.Helper()
	s, err := nf.Take(context.Background(), nf.Target{PID: fx.PID, Interface: nt.IfA})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return s
}

// faultWatch records every change the API server reports of an
// experiment's NodeFaults, so a phase held only briefly is not missed.
type faultWatch struct {
	mu     sync.Mutex
	phases map[string][]v1alpha1.NodeFaultPhase
	gone   map[string]bool
}

func watchFaults(t *testing.T, c *cluster, exp string) *faultWatch {
	t.Helper()
	w, err := c.watch.Watch(t.Context(), &v1alpha1.NodeFaultList{}, client.MatchingLabels{v1alpha1.LabelExperiment: exp})
	if err != nil {
		t.Fatalf("watch NodeFaults: %v", err)
	}
	fw := &faultWatch{phases: map[string][]v1alpha1.NodeFaultPhase{}, gone: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			f, ok := ev.Object.(*v1alpha1.NodeFault)
			if !ok {
				continue
			}
			fw.mu.Lock()
			if ph := fw.phases[f.Name]; f.Status.Phase != "" && (len(ph) == 0 || ph[len(ph)-1] != f.Status.Phase) {
				fw.phases[f.Name] = append(ph, f.Status.Phase)
			}
			if ev.Type == watch.Deleted {
				fw.gone[f.Name] = true
			}
			fw.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return fw
}

func (fw *faultWatch) get() (map[string][]v1alpha1.NodeFaultPhase, map[string]bool) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	p := map[string][]v1alpha1.NodeFaultPhase{}
	for k, v := range fw.phases {
		p[k] = slices.Clone(v)
	}
	g := map[string]bool{}
	for k, v := range fw.gone {
		g[k] = v
	}
	return p, g
}

// 1. The happy path: an XID on GPU 1 of n1 through 'gpuchaos run
// --target k8s', judged by a Prometheus query on the agent's XID counter.
// testDryRun: --dry-run plans against the live cluster (the node, and the
// GPU with the UUID and bus id its agent reported) and creates nothing.
func testDryRun(t *testing.T, c *cluster) {
	name := "e2e-dry"
	run := start(t, "gpuchaos run --dry-run", "run", xidFile(t, name, "gc"+tag(t)), "--target", "k8s", "--dry-run", "--kubeconfig", c.env.Kubeconfig, "-n", chaosNS)
	if code := run.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("gpuchaos run --dry-run exited %d; stdout:\n%s\nstderr:\n%s", code, run.stdout.String(), run.out.String())
	}
	out := run.stdout.String()
	var n corev1.Node
	if err := c.env.Client.Get(t.Context(), client.ObjectKey{Name: node}, &n); err != nil {
		t.Fatal(err)
	}
	var gpus []v1alpha1.GPUReport
	if err := json.Unmarshal([]byte(n.Annotations[v1alpha1.AnnotationGPUs]), &gpus); err != nil || len(gpus) < 2 {
		t.Fatalf("GPUs reported on %s: %v (%v)", node, gpus, err)
	}
	want := fmt.Sprintf("%s gpu 1 (%s, %s)", node, gpus[1].UUID, gpus[1].BusID)
	if !strings.Contains(out, "Nothing was injected") || !strings.Contains(out, want) {
		t.Errorf("dry run output does not name %q:\n%s", want, out)
	}
	if _, ok := getExp(t, c, name); ok {
		t.Errorf("a dry run created experiment %s", name)
	}
	if nfs := faultsOf(t, c, name); len(nfs) != 0 {
		t.Errorf("a dry run created %d NodeFaults", len(nfs))
	}
}

func testHappyPath(t *testing.T, c *cluster) {
	name := "e2e-xid"
	process := "gc" + tag(t)
	lines := followKmsg(t, "name="+process+",")
	fw := watchFaults(t, c, name)

	run := runCLI(t, c, xidFile(t, name, process), chaosNS)
	code := run.wait(t, 5*time.Minute)
	if code != 0 {
		t.Fatalf("gpuchaos run exited %d, want 0; stdout:\n%s\nstderr:\n%s", code, run.stdout.String(), run.out.String())
	}
	out := run.stdout.String()
	t.Logf("gpuchaos run stdout:\n%s", out)
	for _, want := range []string{"inject", "recover", "xid-counted", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if l := lineWith(out, "\nxid-counted "); !strings.Contains(l, "PASS") {
		t.Errorf("the verdict line of xid-counted %q does not say PASS", l)
	}

	e, _ := getExp(t, c, name)
	if e == nil || e.Status.Phase != v1alpha1.PhaseSucceeded {
		t.Fatalf("experiment after exit 0: %+v, want phase Succeeded", e)
	}
	if len(e.Status.Targets) != 1 {
		t.Errorf("planned targets %+v, want GPU 1 of n1", e.Status.Targets)
	}

	waitNoFaults(t, c, name)
	testutil.Eventually(t, within, "the watch to see the NodeFault deleted", func() bool {
		_, gone := fw.get()
		return len(gone) == 1
	})
	phases, _ := fw.get()
	if len(phases) != 1 {
		t.Fatalf("NodeFaults seen: %v, want one", phases)
	}
	for n, ph := range phases {
		if !slices.Equal(ph, []v1alpha1.NodeFaultPhase{v1alpha1.NodeFaultApplied, v1alpha1.NodeFaultRecovered}) {
			t.Errorf("NodeFault %s went %v, want [Applied Recovered]", n, ph)
		}
	}
	testutil.Eventually(t, within, "the experiment's finalizer to go", func() bool {
		e, ok := getExp(t, c, name)
		return ok && !controllerutil.ContainsFinalizer(e, v1alpha1.FinalizerRecover)
	})

	// The kernel log got the line, naming GPU 1 by the bus id its agent
	// reported on the Node.
	testutil.Eventually(t, within, "the XID line in /dev/kmsg", func() bool { return len(lines.Lines()) > 0 })
	bus := busID(t, c, 1)
	if l := lines.Lines(); len(l) != 1 || !strings.Contains(l[0], fmt.Sprintf("Xid (PCI:%s): %d,", bus, xidCode)) {
		t.Errorf("kernel log lines %q: want one XID %d on GPU 1's bus id %s", l, xidCode, bus)
	}
}

// 2. The leader is SIGKILLed mid-run: the standby takes the Lease over,
// recovers the NodeFault on the real interface and fails the experiment
// saying the controller restarted.
func testLeaderKilled(t *testing.T, c *cluster) {
	fx := nt.New(t, nt.Options{})
	before := snapshot(t, fx)
	name := "e2e-leader"
	create(t, c, netFile(t, name, fx))
	waitApplied(t, c, name)
	if snapshot(t, fx).Equal(before) {
		t.Fatal("the NodeFault reports Applied, but the veth's filters are unchanged")
	}
	lead, holder := c.leader(t, "")
	if e, _ := getExp(t, c, name); e == nil || e.Status.Phase != v1alpha1.PhaseRunning {
		t.Fatalf("experiment before the kill: %+v, want Running", e)
	}
	lead.stop(t, syscall.SIGKILL)
	killed := time.Now()

	next, nextHolder := c.leader(t, holder)
	t.Logf("%s (%s) took over from %s (%s) %.1fs after the kill", next.name, nextHolder, lead.name, holder, time.Since(killed).Seconds())
	e := waitExpPhase(t, c, name, v1alpha1.PhaseFailed)
	cond := meta.FindStatusCondition(e.Status.Conditions, v1alpha1.ConditionRecovered)
	if cond == nil || cond.Reason != controller.ReasonControllerRestart || cond.Status != "True" {
		t.Errorf("condition Recovered %+v, want True with reason %s", cond, controller.ReasonControllerRestart)
	}
	if !snapshot(t, fx).Equal(before) {
		t.Error("the experiment failed as recovered, but the veth's filters are not back")
	}
	waitNoFaults(t, c, name)
	testutil.Eventually(t, within, "the experiment's finalizer to go", func() bool {
		e, ok := getExp(t, c, name)
		return ok && !controllerutil.ContainsFinalizer(e, v1alpha1.FinalizerRecover)
	})
}

// 3. An Experiment deleted mid-run stays until its fault is recovered on
// the real interface, then goes.
func testDeleteMidRun(t *testing.T, c *cluster) {
	fx := nt.New(t, nt.Options{})
	before := snapshot(t, fx)
	name := "e2e-delete"
	exp := create(t, c, netFile(t, name, fx))
	waitApplied(t, c, name)
	if snapshot(t, fx).Equal(before) {
		t.Fatal("the NodeFault reports Applied, but the veth's filters are unchanged")
	}
	if err := c.env.Client.Delete(t.Context(), exp); err != nil {
		t.Fatal(err)
	}
	// The snapshot is taken before each read, so a read that finds the
	// experiment gone follows a look at the interface.
	held := false
	var goneClean bool
	testutil.Eventually(t, within, "the deleted experiment to go", func() bool {
		s := snapshot(t, fx)
		e, ok := getExp(t, c, name)
		if !ok {
			goneClean = s.Equal(before)
			return true
		}
		// Seen at all after the delete: the finalizer holds it. Whether
		// the interface is still dirty then depends on how fast the
		// agent is, so that is not asked.
		if e.DeletionTimestamp != nil {
			held = true
		}
		return false
	})
	if !goneClean {
		t.Error("the experiment was gone while the veth still had the fault's filters")
	}
	if !held {
		t.Error("the deleted experiment was never seen held by its finalizer")
	}
	if !snapshot(t, fx).Equal(before) {
		t.Error("the veth's filters are not back after the experiment went")
	}
	waitNoFaults(t, c, name)
}

// 4. SIGINT to 'gpuchaos run --target k8s' aborts through the API; the
// command exits 130 only once the fault is recovered.
func testInterrupt(t *testing.T, c *cluster) {
	fx := nt.New(t, nt.Options{})
	before := snapshot(t, fx)
	name := "e2e-sigint"
	run := runCLI(t, c, netFile(t, name, fx), chaosNS)
	waitApplied(t, c, name)
	if snapshot(t, fx).Equal(before) {
		t.Fatal("the NodeFault reports Applied, but the veth's filters are unchanged")
	}
	if err := run.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := run.wait(t, 3*time.Minute)
	clean := snapshot(t, fx).Equal(before)
	if code != 130 {
		t.Errorf("gpuchaos run exited %d on SIGINT, want 130; stderr:\n%s", code, run.out.String())
	}
	if !clean {
		t.Error("gpuchaos run exited before the veth's filters were back")
	}
	if !strings.Contains(run.stdout.String(), "Aborting experiment") || !strings.Contains(run.stdout.String(), "every NodeFault recovered") {
		t.Errorf("stdout does not say it aborts and recovered:\n%s", run.stdout.String())
	}
	e, _ := getExp(t, c, name)
	if e == nil || e.Status.Phase != v1alpha1.PhaseAborted {
		t.Errorf("experiment after the interrupt: %+v, want Aborted", e)
	}
	if e != nil && e.Annotations[v1alpha1.AnnotationAbort] != "true" {
		t.Errorf("experiment annotations %v, want %s=true", e.Annotations, v1alpha1.AnnotationAbort)
	}
	waitNoFaults(t, c, name)
}

// 5. A namespace without the opt-in: exit 2 with the refusal in one
// line, and nothing reaches the node.
func testRefused(t *testing.T, c *cluster) {
	name := "e2e-refused"
	process := "gc" + tag(t)
	lines := followKmsg(t, "name="+process+",")
	fw := watchFaults(t, c, name)
	run := runCLI(t, c, xidFile(t, name, process), plainNS)
	code := run.wait(t, 3*time.Minute)
	if code != 2 {
		t.Fatalf("gpuchaos run exited %d, want 2", code)
	}
	want := fmt.Sprintf("namespace %s is not labelled %s=%s", plainNS, v1alpha1.LabelChaos, v1alpha1.ChaosEnabled)
	errLine := lineWith(run.out.String(), "refused")
	if !strings.Contains(errLine, want) || !strings.Contains(errLine, name) {
		t.Errorf("error line %q: want the experiment and %q", errLine, want)
	}
	if n := strings.Count(run.out.String(), want); n != 1 {
		t.Errorf("the refusal is printed %d times:\n%s", n, run.out.String())
	}
	var e v1alpha1.Experiment
	if err := c.env.Client.Get(t.Context(), client.ObjectKey{Namespace: plainNS, Name: name}, &e); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(e.Status.Conditions, v1alpha1.ConditionAdmitted); e.Status.Phase != v1alpha1.PhaseFailed ||
		cond == nil || cond.Reason != controller.ReasonNotOptedIn {
		t.Errorf("refused experiment: phase %s, condition %+v; want Failed with reason %s", e.Status.Phase, cond, controller.ReasonNotOptedIn)
	}
	var all v1alpha1.NodeFaultList
	if err := c.env.Client.List(t.Context(), &all); err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != 0 {
		t.Errorf("%d NodeFaults exist after a refusal, want none", len(all.Items))
	}
	if p, _ := fw.get(); len(p) != 0 {
		t.Errorf("NodeFaults seen for the refused experiment: %v", p)
	}
	if l := lines.Lines(); len(l) != 0 {
		t.Errorf("kernel log lines of the refused experiment: %q", l)
	}
}

// lineWith returns the first line of s containing sub; a sub starting
// with a newline matches at a line's start.
func lineWith(s, sub string) string {
	if strings.HasPrefix(sub, "\n") {
		s, sub = "\n"+s, sub[1:]
		for l := range strings.Lines(s) {
			if strings.HasPrefix(l, sub) {
				return strings.TrimRight(l, "\n")
			}
		}
		return ""
	}
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			return strings.TrimRight(l, "\n")
		}
	}
	return ""
}

// busID is the normalised bus id the agent reported on n1 for GPU i.
func busID(t *testing.T, c *cluster, i int) string {
	t.Helper()
	var n corev1.Node
	if err := c.env.Client.Get(t.Context(), client.ObjectKey{Name: node}, &n); err != nil {
		t.Fatal(err)
	}
	var gpus []v1alpha1.GPUReport
	if err := json.Unmarshal([]byte(n.Annotations[v1alpha1.AnnotationGPUs]), &gpus); err != nil {
		t.Fatal(err)
	}
	for _, g := range gpus {
		if g.Index == i {
			bus, ok := xidfmt.NormalizePCI(g.BusID)
			if !ok {
				t.Fatalf("reported bus id %q is not one", g.BusID)
			}
			return bus
		}
	}
	t.Fatalf("n1 reports no GPU %d: %+v", i, gpus)
	return ""
}

func tag(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func followKmsg(t *testing.T, needle string) *testutil.KmsgLines {
	return testutil.FollowKmsg(t, needle)
}

// promQuery returns how many series an instant query answers.
func promQuery(t *testing.T, base, q string) int {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0
	}
	return len(body.Data.Result)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
