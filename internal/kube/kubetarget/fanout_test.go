package kubetarget

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// simAgent acknowledges every NodeFault through the API server as the
// node agents would: Apply becomes Applied (or Failed, for a pod named in
// fail), Recover becomes Recovered.
type simAgent struct {
	c    client.Client
	mu   sync.Mutex
	fail map[string]string // pod uid → the message its apply fails with
}

func startSimAgent(t *testing.T, c client.Client) *simAgent {
	a := &simAgent{c: c, fail: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var l v1alpha1.NodeFaultList
			if err := c.List(ctx, &l); err == nil {
				for i := range l.Items {
					a.handle(ctx, &l.Items[i])
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

func (a *simAgent) failPod(uid types.UID, msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if msg == "" {
		delete(a.fail, string(uid))
	} else {
		a.fail[string(uid)] = msg
	}
}

func (a *simAgent) handle(ctx context.Context, nf *v1alpha1.NodeFault) {
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur v1alpha1.NodeFault
		if err := a.c.Get(ctx, client.ObjectKeyFromObject(nf), &cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		a.mu.Lock()
		msg, fails := a.fail[cur.Spec.Target.PodUID]
		a.mu.Unlock()
		switch {
		case cur.Spec.Action == v1alpha1.ActionApply && cur.Status.Phase == "" && fails:
			cur.Status.Phase, cur.Status.Message = v1alpha1.NodeFaultFailed, msg
		case cur.Spec.Action == v1alpha1.ActionApply && cur.Status.Phase == "":
			cur.Status.Phase = v1alpha1.NodeFaultApplied
		case cur.Spec.Action == v1alpha1.ActionRecover && cur.Status.Phase != v1alpha1.NodeFaultRecovered:
			cur.Status.Phase, cur.Status.Message = v1alpha1.NodeFaultRecovered, ""
		default:
			return nil
		}
		cur.Status.Agent, cur.Status.ObservedGeneration = "sim/"+cur.Spec.NodeName, cur.Generation
		return a.c.Status().Update(ctx, &cur)
	})
}

// fanoutCluster is three nodes; job llm of three PyTorchJob pods, rank 0
// on n2 and ranks 1 and 2 on n1; and an indexed Job "other" with a pod on
// n1 that no selector of llm may reach.
type fanoutCluster struct {
	env   *kubetest.Env
	w     *Watcher
	agent *simAgent
	uid   map[string]types.UID // pod name → uid
}

func startFanoutCluster(t *testing.T) *fanoutCluster {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ca, err := cache.New(env.Config, cache.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWatcher(ctx, ca)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "chaos"}}); err != nil {
		t.Fatal(err)
	}
	kf := func(typ, idx string) map[string]string {
		return map[string]string{labelKubeflowJob: "llm", labelKubeflowType: typ, labelKubeflowIndex: idx}
	}
	c := &fanoutCluster{env: env, w: w, uid: map[string]types.UID{}}
	for _, p := range []*corev1.Pod{
		pod("chaos", "llm-master-0", "n2", kf("master", "0")),
		pod("chaos", "llm-worker-0", "n1", kf("worker", "0")),
		pod("chaos", "llm-worker-1", "n1", kf("worker", "1")),
		pod("chaos", "other-0", "n1", map[string]string{labelJobName: "other", labelCompletionIndex: "0"}),
	} {
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		c.uid[p.Name] = p.UID
	}
	c.agent = startSimAgent(t, env.Client)
	return c
}

// target is a fresh Target of an Experiment with this uid and selector,
// its inventory read.
func (c *fanoutCluster) target(t *testing.T, uid string, sel v1alpha1.Selector) *Target {
	t.Helper()
	exp := &v1alpha1.Experiment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "chaos", UID: types.UID(uid)}}
	exp.Spec.Duration.Duration = time.Minute
	exp.Spec.Selector = sel
	tgt, err := New(Options{Client: c.env.Client, Watcher: c.w, Experiment: exp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tgt.Inventory(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tgt
}

// injection is one planned injection: its key, ref and injector.
type injection struct {
	key string
	ref inventory.Ref
	inj fault.Injector
	v   catalog.Values
}

// plan selects the refs of fault id under the target's selector, as the
// engine does, with the injector of mechanism mech. The checkpoint
// mechanisms are still planned for k8s in the catalogue (their agent side
// is being built), so Injector refuses them; the injector is then built
// directly, to test the planning that will carry them.
func plan(t *testing.T, tgt *Target, id, mech string, params map[string]string) []injection {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("no fault %s", id)
	}
	m := f.Mechanism(mech)
	inj, err := tgt.Injector(f, m)
	if err != nil {
		inj = &injector{t: tgt, f: f, m: m}
	}
	v, err := f.Resolve(params)
	if err != nil {
		t.Fatal(err)
	}
	tgt.mu.Lock()
	inv := inventory.Inventory{Jobs: tgt.jobs}
	tgt.mu.Unlock()
	for _, n := range []string{"n1", "n2", "n3"} {
		inv.Nodes = append(inv.Nodes, inventory.Node{Name: n})
	}
	refs, err := inventory.Select(inv, tgt.opts.Experiment.Spec.Selector, f.Scope, 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []injection
	for _, r := range refs {
		out = append(out, injection{key: "e/0/" + r.Key(), ref: r, inj: inj, v: v})
	}
	return out
}

// of lists the NodeFaults of an injection by its label, sorted by name.
func (c *fanoutCluster) of(t *testing.T, tgt *Target, key string) []v1alpha1.NodeFault {
	t.Helper()
	var l v1alpha1.NodeFaultList
	if err := c.env.Client.List(context.Background(), &l, client.MatchingLabels{v1alpha1.LabelInjection: NodeFaultName(tgt.opts.Experiment.UID, key)}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// where renders NodeFaults as node:kind:job:pod:uid, sorted.
func (c *fanoutCluster) where(nfs []v1alpha1.NodeFault) string {
	byUID := map[string]string{}
	for n, u := range c.uid {
		byUID[string(u)] = n
	}
	var out []string
	for _, nf := range nfs {
		tg := nf.Spec.Target
		uid := ""
		if tg.PodUID != "" {
			uid = "uid(" + byUID[tg.PodUID] + ")"
		}
		out = append(out, fmt.Sprintf("%s:%s:%s:%s:%s", nf.Spec.NodeName, tg.Kind, tg.Job, tg.Pod, uid))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func touched(tgt *Target) string {
	tgt.mu.Lock()
	defer tgt.mu.Unlock()
	return strings.Join(slices.Sorted(maps.Keys(tgt.touched)), " ")
}

// TestFanOut holds the injections that reach several pods to the
// fault.Injector contract through a real API server.
func TestFanOut(t *testing.T) {
	c := startFanoutCluster(t)
	ctx := context.Background()
	jobs := v1alpha1.Selector{Mode: v1alpha1.ModeAll, Jobs: []string{"llm"}}
	recoverAll := func(t *testing.T, ins []injection) {
		t.Helper()
		for _, in := range ins {
			if err := in.inj.Recover(ctx, in.key); err != nil {
				t.Errorf("Recover %s: %v", in.key, err)
			}
		}
	}
	allRecovered := func(t *testing.T, tgt *Target, key string, want int) {
		t.Helper()
		nfs := c.of(t, tgt, key)
		n := 0
		for _, nf := range nfs {
			if nf.Spec.Action == v1alpha1.ActionRecover && nf.Status.Phase == v1alpha1.NodeFaultRecovered {
				n++
			}
		}
		if n != want || len(nfs) != want {
			t.Errorf("%d of %d NodeFaults of %s recovered, want all %d", n, len(nfs), key, want)
		}
	}

	t.Run("network fault on a job: a NodeFault per pod", func(t *testing.T) {
		tgt := c.target(t, "net-jobs-0000", jobs)
		ins := plan(t, tgt, "network.delay", "netem", map[string]string{"delay": "10ms"})
		if len(ins) != 2 || ins[0].ref.Node != "n1" || ins[1].ref.Node != "n2" {
			t.Fatalf("refs %+v, want nodes n1 and n2", ins)
		}
		for _, in := range ins {
			if err := in.inj.Inject(ctx, in.key, in.ref, in.v); err != nil {
				t.Fatalf("Inject %s: %v", in.key, err)
			}
		}
		want := map[string]string{
			"n1": "n1:node:llm:chaos/llm-worker-0:uid(llm-worker-0) n1:node:llm:chaos/llm-worker-1:uid(llm-worker-1)",
			"n2": "n2:node:llm:chaos/llm-master-0:uid(llm-master-0)",
		}
		names := map[string]bool{}
		for _, in := range ins {
			nfs := c.of(t, tgt, in.key)
			if got := c.where(nfs); got != want[in.ref.Node] {
				t.Errorf("NodeFaults of %s:\n got %s\nwant %s", in.key, got, want[in.ref.Node])
			}
			for _, nf := range nfs {
				names[nf.Name] = true
				if nf.Labels[v1alpha1.LabelNode] != nf.Spec.NodeName || nf.Labels[v1alpha1.LabelExperiment] != "e" || nf.Spec.Params["delay"] != "10ms" || nf.Spec.Target.Key != in.ref.Node {
					t.Errorf("NodeFault %s: labels %v, params %v, key %q", nf.Name, nf.Labels, nf.Spec.Params, nf.Spec.Target.Key)
				}
			}
			aims, err := tgt.Aims(jobs, "network.delay", "netem", in.ref)
			if err != nil || len(aims) != len(nfs) {
				t.Errorf("Aims of %s: %+v, %v; want the %d pods of its NodeFaults", in.key, aims, err, len(nfs))
			}
		}
		if len(names) != 3 {
			t.Errorf("%d distinct NodeFault names, want 3", len(names))
		}
		if got := touched(tgt); got != "n1 n2" {
			t.Errorf("probe scope %q, want n1 n2", got)
		}
		// Idempotent: a repeated Inject finds the same NodeFaults.
		if err := ins[0].inj.Inject(ctx, ins[0].key, ins[0].ref, ins[0].v); err != nil || len(c.of(t, tgt, ins[0].key)) != 2 {
			t.Errorf("second Inject: %v, %d NodeFaults", err, len(c.of(t, tgt, ins[0].key)))
		}
		recoverAll(t, ins)
		allRecovered(t, tgt, ins[0].key, 2)
		allRecovered(t, tgt, ins[1].key, 1)
	})

	t.Run("network fault on a rank: its pod alone", func(t *testing.T) {
		sel := jobs
		sel.Ranks = []int{2}
		tgt := c.target(t, "net-rank-0000", sel)
		ins := plan(t, tgt, "network.loss", "netem", map[string]string{"probability": "0.1"})
		if len(ins) != 1 {
			t.Fatalf("refs %+v, want node n1", ins)
		}
		if err := ins[0].inj.Inject(ctx, ins[0].key, ins[0].ref, ins[0].v); err != nil {
			t.Fatal(err)
		}
		if got, want := c.where(c.of(t, tgt, ins[0].key)), "n1:node:llm:chaos/llm-worker-1:uid(llm-worker-1)"; got != want {
			t.Errorf("NodeFaults %s, want %s", got, want)
		}
		recoverAll(t, ins)
	})

	t.Run("network fault on nodes: the node's namespace", func(t *testing.T) {
		tgt := c.target(t, "net-nodes-000", v1alpha1.Selector{Mode: v1alpha1.ModeAll, Nodes: []string{"n1", "n2"}})
		ins := plan(t, tgt, "network.delay", "netem", nil)
		if len(ins) != 2 {
			t.Fatalf("refs %+v, want n1 and n2", ins)
		}
		for _, in := range ins {
			if err := in.inj.Inject(ctx, in.key, in.ref, in.v); err != nil {
				t.Fatalf("Inject %s: %v", in.key, err)
			}
			nfs := c.of(t, tgt, in.key)
			if got, want := c.where(nfs), in.ref.Node+":node:::"; got != want {
				t.Errorf("NodeFaults of %s: %s, want %s (no pod)", in.key, got, want)
			}
			if len(nfs) == 1 && nfs[0].Name != NodeFaultName(tgt.opts.Experiment.UID, in.key) {
				t.Errorf("NodeFault %s, want the injection's own name", nfs[0].Name)
			}
		}
		recoverAll(t, ins)
	})

	t.Run("job corrupt-newest: the lowest rank's pod", func(t *testing.T) {
		tgt := c.target(t, "job-corrupt-0", jobs)
		ins := plan(t, tgt, "checkpoint.corrupt-newest", "byte-flip", map[string]string{"path": "/ckpt"})
		if len(ins) != 1 || ins[0].ref.Kind != catalog.ScopeJob {
			t.Fatalf("refs %+v, want job llm", ins)
		}
		in := ins[0]
		if err := in.inj.Inject(ctx, in.key, in.ref, in.v); err != nil {
			t.Fatal(err)
		}
		nfs := c.of(t, tgt, in.key)
		if got, want := c.where(nfs), "n2:job:llm:chaos/llm-master-0:uid(llm-master-0)"; got != want {
			t.Errorf("NodeFaults %s, want %s", got, want)
		}
		if len(nfs) == 1 && (nfs[0].Spec.Target.Key != "llm" || nfs[0].Spec.Target.Rank != nil) {
			t.Errorf("target %+v, want key llm and no rank", nfs[0].Spec.Target)
		}
		if got := touched(tgt); got != "n2" {
			t.Errorf("probe scope %q, want n2", got)
		}
		recoverAll(t, ins)
		allRecovered(t, tgt, in.key, 1)
	})

	t.Run("job slow-storage: every pod", func(t *testing.T) {
		tgt := c.target(t, "job-slow-000", jobs)
		ins := plan(t, tgt, "checkpoint.slow-storage", "cgroup-io", map[string]string{"path": "/ckpt"})
		in := ins[0]
		if err := in.inj.Inject(ctx, in.key, in.ref, in.v); err != nil {
			t.Fatal(err)
		}
		want := "n1:job:llm:chaos/llm-worker-0:uid(llm-worker-0) n1:job:llm:chaos/llm-worker-1:uid(llm-worker-1) n2:job:llm:chaos/llm-master-0:uid(llm-master-0)"
		if got := c.where(c.of(t, tgt, in.key)); got != want {
			t.Errorf("NodeFaults\n got %s\nwant %s", got, want)
		}
		if got := touched(tgt); got != "n1 n2" {
			t.Errorf("probe scope %q, want n1 n2", got)
		}
		// The blast radius counts every node the NodeFaults reach.
		inv, err := tgt.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := inventory.CheckBlastRadius(inventory.Footprint(inv, []inventory.Ref{in.ref}), v1alpha1.BlastRadius{MaxNodes: 1}); err == nil || !strings.Contains(err.Error(), "2 nodes") {
			t.Errorf("blast radius of a job on 2 nodes under maxNodes=1: %v", err)
		}
		recoverAll(t, ins)
		allRecovered(t, tgt, in.key, 3)
	})

	t.Run("a job mechanism without a pod rule is refused", func(t *testing.T) {
		tgt := c.target(t, "job-nccl-000", jobs)
		ins := plan(t, tgt, "nccl.p2p-off", "env", nil)
		err := ins[0].inj.Inject(ctx, ins[0].key, ins[0].ref, ins[0].v)
		if err == nil || !strings.Contains(err.Error(), "which pods") {
			t.Errorf("Inject: %v, want a refusal naming the missing pod rule", err)
		}
		if n := len(c.of(t, tgt, ins[0].key)); n != 0 {
			t.Errorf("%d NodeFaults created", n)
		}
	})

	t.Run("one of three fails: the injection fails, recovery undoes the rest", func(t *testing.T) {
		c.agent.failPod(c.uid["llm-worker-1"], "write io.max: no such device 259:0")
		defer c.agent.failPod(c.uid["llm-worker-1"], "")
		tgt := c.target(t, "job-fail-000", jobs)
		in := plan(t, tgt, "checkpoint.slow-storage", "cgroup-io", map[string]string{"path": "/ckpt"})[0]
		err := in.inj.Inject(ctx, in.key, in.ref, in.v)
		if err == nil || !strings.Contains(err.Error(), "no such device 259:0") || !strings.Contains(err.Error(), "chaos/llm-worker-1") {
			t.Fatalf("Inject: %v, want the failed pod's message", err)
		}
		if err := in.inj.Recover(ctx, in.key); err != nil {
			t.Fatalf("Recover: %v", err)
		}
		allRecovered(t, tgt, in.key, 3)
	})

	t.Run("takeover: a fresh target recovers every NodeFault of the injection", func(t *testing.T) {
		tgt := c.target(t, "takeover-000", jobs)
		in := plan(t, tgt, "checkpoint.slow-storage", "cgroup-io", map[string]string{"path": "/ckpt"})[0]
		if err := in.inj.Inject(ctx, in.key, in.ref, in.v); err != nil {
			t.Fatal(err)
		}
		// The controller that injected died; the next one builds its
		// own target, which made none of them.
		fresh := c.target(t, "takeover-000", jobs)
		inj := &injector{t: fresh, f: in.inj.(*injector).f, m: in.inj.(*injector).m}
		if err := inj.Recover(ctx, in.key); err != nil {
			t.Fatalf("Recover: %v", err)
		}
		allRecovered(t, tgt, in.key, 3)
	})

	t.Run("takeover of a NodeFault made before the injection label", func(t *testing.T) {
		tgt := c.target(t, "legacy-00000", v1alpha1.Selector{Mode: v1alpha1.ModeAll, Nodes: []string{"n3"}})
		key := "e/0/n3"
		name := NodeFaultName(tgt.opts.Experiment.UID, key)
		nf := &v1alpha1.NodeFault{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNode: "n3"}},
			Spec: v1alpha1.NodeFaultSpec{NodeName: "n3", Fault: "network.delay", Mechanism: "netem", Action: v1alpha1.ActionApply,
				Target: v1alpha1.NodeFaultTarget{Kind: "node", Key: "n3"}, ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour))},
		}
		if err := c.env.Client.Create(ctx, nf); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, time.Minute, "the agent applies it", func() bool {
			var cur v1alpha1.NodeFault
			return c.env.Client.Get(ctx, client.ObjectKeyFromObject(nf), &cur) == nil && cur.Status.Phase == v1alpha1.NodeFaultApplied
		})
		f, _ := catalog.Lookup("network.delay")
		inj, err := tgt.Injector(f, f.Mechanism("netem"))
		if err != nil {
			t.Fatal(err)
		}
		if err := inj.Recover(ctx, key); err != nil {
			t.Fatalf("Recover: %v", err)
		}
		var cur v1alpha1.NodeFault
		if err := c.env.Client.Get(ctx, client.ObjectKeyFromObject(nf), &cur); err != nil || cur.Status.Phase != v1alpha1.NodeFaultRecovered {
			t.Errorf("legacy NodeFault: %v, phase %s; want Recovered", err, cur.Status.Phase)
		}
	})

	t.Run("one of three deleted while applied: unproven", func(t *testing.T) {
		tgt := c.target(t, "deleted-0000", jobs)
		in := plan(t, tgt, "checkpoint.slow-storage", "cgroup-io", map[string]string{"path": "/ckpt"})[0]
		if err := in.inj.Inject(ctx, in.key, in.ref, in.v); err != nil {
			t.Fatal(err)
		}
		nfs := c.of(t, tgt, in.key)
		if len(nfs) != 3 {
			t.Fatalf("%d NodeFaults, want 3", len(nfs))
		}
		gone := nfs[1].Name
		if err := c.env.Client.Delete(ctx, &nfs[1]); err != nil {
			t.Fatal(err)
		}
		waitGone(t, c.w, gone)
		err := in.inj.Recover(ctx, in.key)
		if !errors.Is(err, fault.ErrUnproven) || !strings.Contains(err.Error(), gone) {
			t.Fatalf("Recover: %v, want ErrUnproven naming %s", err, gone)
		}
		// The other two were still recovered.
		allRecovered(t, tgt, in.key, 2)
	})
}
