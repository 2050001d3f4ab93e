package nodeagent_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/ckptpodtest"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/kube/nodeagent"
	xidfmt "github.com/gpuchaos/gpuchaos/internal/model/xid"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
	nf "github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
	nt "github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
)

// within bounds every wait for state the API server or the agent reaches:
// generous, for a busy two-core machine.
const within = 60 * time.Second

const node = "n1"

func TestMain(m *testing.M) {
	ckptpodtest.Main()
	if os.Getenv(nt.SleeperEnv) != "" {
		nt.Sleep()
	}
	// The test's own client logs through controller-runtime's global
	// logger, which warns after 30 s when nobody set it.
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	testutil.RemoveGPUChaos()
	os.Exit(code)
}

// binary is the gpuchaos command, built once: every part under test is
// the real command in a process of its own.
func binary(t *testing.T) string { return testutil.GPUChaos(t) }

// agentProc is a running 'gpuchaos agent --node-name'.
type agentProc struct {
	cmd  *exec.Cmd
	out  *testutil.LockedBuffer
	done chan struct{}
}

// startAgent runs the agent for node n1 against env with the ledger at
// path; it is stopped with SIGTERM when t ends, and its output logged
// when t fails.
func startAgent(t *testing.T, env *kubetest.Env, ledgerPath string, extra ...string) *agentProc {
	t.Helper()
	args := append([]string{"agent", "--node-name", node, "--kubeconfig", env.Kubeconfig, "--ledger", ledgerPath,
		"--resync", "2s", "--listen", "127.0.0.1:0", "--no-xid-watch", "--log-level", "info"}, extra...)
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), "NODE_NAME=")
	p := &agentProc{cmd: cmd, out: &testutil.LockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the agent: %v", err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t, syscall.SIGTERM)
		if t.Failed() {
			t.Logf("agent (pid %d) output:\n%s", cmd.Process.Pid, p.out.String())
		}
	})
	return p
}

// stop sends sig and waits for the agent to exit.
func (p *agentProc) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(within):
		_ = p.cmd.Process.Kill()
		t.Errorf("the agent did not exit within %s of %s", within, sig)
	}
}

func createNode(t *testing.T, env *kubetest.Env) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{"example.com/keep": "me"}}}
	if err := env.Client.Create(t.Context(), n); err != nil {
		t.Fatalf("create node: %v", err)
	}
}

func newFault(name, faultID, mechanism string, params map[string]string, tgt v1alpha1.NodeFaultTarget, expires time.Time) *v1alpha1.NodeFault {
	return &v1alpha1.NodeFault{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNode: node}},
		Spec: v1alpha1.NodeFaultSpec{
			NodeName: node, Fault: faultID, Mechanism: mechanism, Params: params, Target: tgt,
			Action: v1alpha1.ActionApply, ExpiresAt: metav1.NewTime(expires),
		},
	}
}

func create(t *testing.T, env *kubetest.Env, f *v1alpha1.NodeFault) {
	t.Helper()
	if err := env.Client.Create(t.Context(), f); err != nil {
		t.Fatalf("create NodeFault %s: %v", f.Name, err)
	}
}

func get(t *testing.T, env *kubetest.Env, name string) *v1alpha1.NodeFault {
	t.Helper()
	var f v1alpha1.NodeFault
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, &f); err != nil {
		t.Fatalf("get NodeFault %s: %v", name, err)
	}
	return &f
}

// waitPhase waits until the NodeFault reports phase and returns it.
func waitPhase(t *testing.T, env *kubetest.Env, name string, phase v1alpha1.NodeFaultPhase) *v1alpha1.NodeFault {
	t.Helper()
	var f *v1alpha1.NodeFault
	testutil.Eventually(t, within, fmt.Sprintf("NodeFault %s to report %s", name, phase), func() bool {
		f = get(t, env, name)
		return f.Status.Phase == phase
	})
	return f
}

func setRecover(t *testing.T, env *kubetest.Env, name string) {
	t.Helper()
	f := get(t, env, name)
	orig := f.DeepCopy()
	f.Spec.Action = v1alpha1.ActionRecover
	if err := env.Client.Patch(t.Context(), f, client.MergeFrom(orig)); err != nil {
		t.Fatalf("set %s to Recover: %v", name, err)
	}
}

// journal reads the ledger file as the agent wrote it: how often each key
// was recorded and marked done. It only reads, so the running agent's
// appends are never disturbed.
func journal(t *testing.T, path string) (records, dones map[string]int) {
	t.Helper()
	records, dones = map[string]int{}, map[string]int{}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("read ledger: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var op struct {
			Op    string `json:"op"`
			Entry *struct {
				Key     string    `json:"key"`
				Expires time.Time `json:"expires"`
			} `json:"entry"`
			Key string `json:"key"`
		}
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			continue // a line being written
		}
		switch {
		case op.Op == "record" && op.Entry != nil:
			records[op.Entry.Key]++
		case op.Op == "done":
			dones[op.Key]++
		}
	}
	return records, dones
}

func pendingKeys(t *testing.T, path string) []string {
	t.Helper()
	rec, done := journal(t, path)
	var out []string
	for k := range rec {
		if done[k] == 0 {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
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
	t.Helper()
	if os.Geteuid() != 0 {
		kubetest.Missing(t, "not root: the kernel-log mechanism writes /dev/kmsg, which needs root")
	}
	if _, err := os.Stat(kmsg.DefaultPath); err != nil {
		kubetest.Missing(t, fmt.Sprintf("no kernel log device: %v", err))
	}
	return testutil.FollowKmsg(t, needle)
}

// An XID NodeFault through the real agent process and the real kernel
// log: applied with a finalizer and status, its line in /dev/kmsg naming
// the GPU's bus id as the agent reported it on the Node, recovered on
// Recover and on delete; a NodeFault of an API mechanism is left to the
// controller, and one of a mechanism the node does not run fails.
func TestXIDThroughNodeFault(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	ctx := t.Context()
	createNode(t, env)
	proc := "gc" + tag(t)
	lines := followKmsg(t, "name="+proc+",")
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	startAgent(t, env, ledgerPath, "--twin", "--twin-gpus", "2")

	// The GPU report, beside the annotation that was there.
	var gpus []v1alpha1.GPUReport
	testutil.Eventually(t, within, "the agent to report its GPUs on node n1", func() bool {
		var n corev1.Node
		if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			t.Fatal(err)
		}
		raw, ok := n.Annotations[v1alpha1.AnnotationGPUs]
		if !ok {
			return false
		}
		if n.Annotations["example.com/keep"] != "me" {
			t.Fatalf("the GPU report overwrote the node's other annotations: %v", n.Annotations)
		}
		if err := json.Unmarshal([]byte(raw), &gpus); err != nil {
			t.Fatalf("annotation %s = %q: %v", v1alpha1.AnnotationGPUs, raw, err)
		}
		return true
	})
	if len(gpus) != 2 || gpus[1].Index != 1 || gpus[1].BusID == "" || gpus[1].UUID == "" || gpus[1].Model == "" {
		t.Fatalf("reported GPUs %+v, want the twin's two with index, uuid, bus id and model", gpus)
	}

	// Created first, so the pass that applies the XID has seen it.
	cordon := newFault("cordon", "workload.cordon-drain", "node-cordon", nil, v1alpha1.NodeFaultTarget{Kind: "node", Key: node}, time.Now().Add(10*time.Minute))
	create(t, env, cordon)
	refused := newFault("refused", "hardware.xid", "twin", map[string]string{"code": "13"}, v1alpha1.NodeFaultTarget{Kind: "node", Key: node}, time.Now().Add(10*time.Minute))
	create(t, env, refused)

	one := 1
	xid := newFault("xid", "hardware.xid", "kernel-log", map[string]string{"code": "79", "pid": "4242", "process": proc},
		v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &one, Key: node + "/1"}, time.Now().Add(10*time.Minute))
	create(t, env, xid)
	got := waitPhase(t, env, "xid", v1alpha1.NodeFaultApplied)
	if got.Status.AppliedAt == nil || got.Status.Agent == "" || got.Status.ObservedGeneration != got.Generation {
		t.Errorf("applied status %+v: want appliedAt, agent and observedGeneration %d", got.Status, got.Generation)
	}
	if !controllerutil.ContainsFinalizer(got, v1alpha1.FinalizerRecover) {
		t.Errorf("applied NodeFault has finalizers %v, want %s", got.Finalizers, v1alpha1.FinalizerRecover)
	}
	testutil.Eventually(t, within, "the XID line in /dev/kmsg", func() bool { return len(lines.Lines()) > 0 })
	bus, ok := xidfmt.NormalizePCI(gpus[1].BusID)
	if !ok {
		t.Fatalf("reported bus id %q is not one", gpus[1].BusID)
	}
	if l := lines.Lines()[0]; !strings.Contains(l, "Xid (PCI:"+bus+"): 79,") {
		t.Errorf("kernel log line %q: want XID 79 on GPU 1's bus id %s", l, gpus[1].BusID)
	}

	if c := get(t, env, "cordon"); c.Status.Phase != "" || len(c.Finalizers) != 0 {
		t.Errorf("NodeFault of API mechanism node-cordon: status %+v, finalizers %v; the agent must leave it to the controller", c.Status, c.Finalizers)
	}
	r := waitPhase(t, env, "refused", v1alpha1.NodeFaultFailed)
	if !strings.Contains(r.Status.Message, "spec.mechanism") || len(r.Finalizers) != 0 {
		t.Errorf("refused NodeFault: message %q, finalizers %v; want spec.mechanism named and no finalizer", r.Status.Message, r.Finalizers)
	}

	setRecover(t, env, "xid")
	got = waitPhase(t, env, "xid", v1alpha1.NodeFaultRecovered)
	if got.Status.RecoveredAt == nil || !strings.Contains(got.Status.Message, "Recover") {
		t.Errorf("recovered status %+v: want recoveredAt and the reason", got.Status)
	}
	testutil.Eventually(t, within, "the finalizer to go after recovery", func() bool {
		return !controllerutil.ContainsFinalizer(get(t, env, "xid"), v1alpha1.FinalizerRecover)
	})

	// One past its ExpiresAt is never applied. Created before xid2, so
	// had it been injected its line would come before xid2's.
	stale := newFault("stale", "hardware.xid", "kernel-log", map[string]string{"code": "79", "pid": "4244", "process": proc},
		v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &one, Key: node + "/1"}, time.Now().Add(-time.Minute))
	create(t, env, stale)
	if s := waitPhase(t, env, "stale", v1alpha1.NodeFaultFailed); !strings.Contains(s.Status.Message, "expired") || len(s.Finalizers) != 0 {
		t.Errorf("expired NodeFault: message %q, finalizers %v; want it to say expired, and no finalizer", s.Status.Message, s.Finalizers)
	}

	// A delete recovers first: the finalizer holds the object until then.
	xid2 := newFault("xid2", "hardware.xid", "kernel-log", map[string]string{"code": "79", "pid": "4243", "process": proc},
		v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &one, Key: node + "/1"}, time.Now().Add(10*time.Minute))
	create(t, env, xid2)
	key2 := nodeagent.Key(waitPhase(t, env, "xid2", v1alpha1.NodeFaultApplied))
	if p := pendingKeys(t, ledgerPath); !slices.Contains(p, key2) {
		t.Fatalf("ledger pending %v while xid2 is applied, want %s", p, key2)
	}
	if err := env.Client.Delete(ctx, get(t, env, "xid2")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "deleted xid2 to go", func() bool {
		err := env.Client.Get(ctx, client.ObjectKey{Name: "xid2"}, &v1alpha1.NodeFault{})
		return apierrors.IsNotFound(err)
	})
	if p := pendingKeys(t, ledgerPath); len(p) != 0 {
		t.Errorf("ledger pending %v after recovery and delete, want none", p)
	}
	rec, _ := journal(t, ledgerPath)
	for k, n := range rec {
		if n != 1 {
			t.Errorf("ledger recorded %s %d times, want once", k, n)
		}
	}
	testutil.Eventually(t, within, "two XID lines, one per NodeFault", func() bool { return len(lines.Lines()) >= 2 })
	if n := len(lines.Lines()); n != 2 {
		t.Errorf("%d XID lines for two NodeFaults: %q", n, lines.Lines())
	}
}

// netFault is a network.loss NodeFault on the fixture's veth.
func netFault(name string, fx *nt.Fixture, expires time.Time) *v1alpha1.NodeFault {
	return newFault(name, "network.loss", "cls-bpf",
		map[string]string{"probability": "0.5", "pid": strconv.Itoa(fx.PID), "interface": nt.IfA},
		v1alpha1.NodeFaultTarget{Kind: "node", Key: node}, expires)
}

func snapshot(t *testing.T, fx *nt.Fixture) nf.Snapshot {
	t.Helper()
	s, err := nf.Take(context.Background(), nf.Target{PID: fx.PID, Interface: nt.IfA})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return s
}

// With the API server stopped while network.loss is applied, the agent
// still recovers at ExpiresAt (the veth's filters are back as they were,
// the ledger says done); once the API server is back the status catches
// up to Recovered, with the time it was recovered, and nothing is applied
// twice.
func TestExpiryWhileAPIServerDown(t *testing.T) {
	fx := nt.New(t, nt.Options{})
	before := snapshot(t, fx)
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	createNode(t, env)
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	startAgent(t, env, ledgerPath)

	expires := time.Now().Add(25 * time.Second).Truncate(time.Second)
	create(t, env, netFault("loss", fx, expires))
	applied := waitPhase(t, env, "loss", v1alpha1.NodeFaultApplied)
	key := nodeagent.Key(applied)
	if snapshot(t, fx).Equal(before) {
		t.Fatal("NodeFault reports Applied, but the veth's filters are unchanged")
	}

	env.StopAPIServer(t)
	if !time.Now().Before(expires) {
		t.Fatalf("the API server stopped only after ExpiresAt %s; the test proves nothing on a machine this slow", expires)
	}
	testutil.Eventually(t, within+time.Until(expires), "the agent to recover network.loss at ExpiresAt with the API server down", func() bool {
		return snapshot(t, fx).Equal(before)
	})
	// The injector undoes the change before the ledger says so.
	testutil.Eventually(t, within, "the ledger to mark the recovery done", func() bool { return len(pendingKeys(t, ledgerPath)) == 0 })
	if now := time.Now(); now.Before(expires) {
		t.Errorf("recovered at %s, before ExpiresAt %s", now, expires)
	}
	back := time.Now()
	env.StartAPIServer(t)

	got := waitPhase(t, env, "loss", v1alpha1.NodeFaultRecovered)
	if got.Status.RecoveredAt == nil || got.Status.RecoveredAt.After(back) || got.Status.RecoveredAt.Time.Before(expires.Add(-time.Second)) {
		t.Errorf("recoveredAt %v: want the recovery's own time, between ExpiresAt %s and the API server's return %s", got.Status.RecoveredAt, expires, back)
	}
	if !strings.Contains(got.Status.Message, "expiry") {
		t.Errorf("message %q: want it to say the fault expired", got.Status.Message)
	}
	testutil.Eventually(t, within, "the finalizer to go", func() bool {
		return !controllerutil.ContainsFinalizer(get(t, env, "loss"), v1alpha1.FinalizerRecover)
	})
	if !snapshot(t, fx).Equal(before) {
		t.Error("the veth's filters changed again after the API server returned")
	}
	if rec, _ := journal(t, ledgerPath); rec[key] != 1 || len(rec) != 1 {
		t.Errorf("ledger records %v, want %s once", rec, key)
	}
}

// A SIGKILLed agent leaves its faults in effect; the next agent recovers
// from its ledger the one that expired meanwhile and the one set to
// Recover, and leaves the one still wanted applied.
func TestRestartAfterSIGKILL(t *testing.T) {
	short, long, recov := nt.New(t, nt.Options{}), nt.New(t, nt.Options{}), nt.New(t, nt.Options{})
	before := map[*nt.Fixture]nf.Snapshot{short: snapshot(t, short), long: snapshot(t, long), recov: snapshot(t, recov)}
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	createNode(t, env)
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	first := startAgent(t, env, ledgerPath)

	expires := time.Now().Add(20 * time.Second)
	create(t, env, netFault("short", short, expires))
	create(t, env, netFault("long", long, time.Now().Add(10*time.Minute)))
	create(t, env, netFault("recov", recov, time.Now().Add(10*time.Minute)))
	for _, n := range []string{"short", "long", "recov"} {
		waitPhase(t, env, n, v1alpha1.NodeFaultApplied)
	}
	first.stop(t, syscall.SIGKILL)
	if !time.Now().Before(expires) {
		t.Fatalf("the agent was killed only after ExpiresAt %s; the test proves nothing on a machine this slow", expires)
	}
	setRecover(t, env, "recov")
	testutil.Eventually(t, within+time.Until(expires), "ExpiresAt of short to pass", func() bool { return time.Now().After(expires) })
	for fx, name := range map[*nt.Fixture]string{short: "short", long: "long", recov: "recov"} {
		if snapshot(t, fx).Equal(before[fx]) {
			t.Fatalf("%s was undone with no agent running", name)
		}
	}

	startAgent(t, env, ledgerPath)
	for fx, name := range map[*nt.Fixture]string{short: "short", recov: "recov"} {
		testutil.Eventually(t, within, "the restarted agent to recover "+name, func() bool { return snapshot(t, fx).Equal(before[fx]) })
		got := waitPhase(t, env, name, v1alpha1.NodeFaultRecovered)
		if got.Status.RecoveredAt == nil {
			t.Errorf("%s: recovered without recoveredAt", name)
		}
	}
	longKey := nodeagent.Key(get(t, env, "long"))
	if p := pendingKeys(t, ledgerPath); !slices.Equal(p, []string{longKey}) {
		t.Errorf("ledger pending %v, want only %s", p, longKey)
	}
	if snapshot(t, long).Equal(before[long]) {
		t.Error("the still-wanted fault was undone by the restart")
	}
	if g := get(t, env, "long"); g.Status.Phase != v1alpha1.NodeFaultApplied {
		t.Errorf("long: phase %s, want Applied", g.Status.Phase)
	}
	rec, _ := journal(t, ledgerPath)
	for k, n := range rec {
		if n != 1 {
			t.Errorf("ledger recorded %s %d times, want once", k, n)
		}
	}

	setRecover(t, env, "long")
	testutil.Eventually(t, within, "long to be recovered", func() bool { return snapshot(t, long).Equal(before[long]) })
	waitPhase(t, env, "long", v1alpha1.NodeFaultRecovered)
}
