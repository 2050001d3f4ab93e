package kubetarget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/go-logr/logr"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

func init() { log.SetLogger(logr.Discard()) }

func pod(ns, name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "train"}}},
	}
}

// TestInventory reads nodes and the pods of each training operator from
// a real API server.
func TestInventory(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	ctx := context.Background()
	gpus, _ := json.Marshal([]v1alpha1.GPUReport{{Index: 1, UUID: "GPU-b", BusID: "00000000:19:00.0", Model: "NVIDIA H200"}, {Index: 0, UUID: "GPU-a", BusID: "00000000:18:00.0", Model: "NVIDIA H200"}})
	reported := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"pool": "h200"}, Annotations: map[string]string{v1alpha1.AnnotationGPUs: string(gpus)}}}
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}
	for _, n := range []*corev1.Node{reported, plain} {
		if err := env.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	plain.Status.Capacity = corev1.ResourceList{ResourceGPU: resource.MustParse("3")}
	if err := env.Client.Status().Update(ctx, plain); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"train", "other"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	kf := func(typ, idx string) map[string]string {
		return map[string]string{labelKubeflowJob: "llm", labelKubeflowType: typ, labelKubeflowIndex: idx}
	}
	js := func(job, ci string) map[string]string {
		return map[string]string{labelJobSetName: "js", labelJobSetIndex: job, labelCompletionIndex: ci}
	}
	pods := []*corev1.Pod{
		pod("train", "llm-master-0", "n1", kf("master", "0")),
		pod("train", "llm-worker-0", "n1", kf("worker", "0")),
		pod("train", "llm-worker-1", "n2", kf("worker", "1")),
		pod("train", "js-0-0", "n1", js("0", "0")),
		pod("train", "js-0-1", "n1", js("0", "1")),
		pod("train", "js-1-0", "n2", js("1", "0")),
		pod("train", "js-1-1", "n2", js("1", "1")),
		pod("other", "idx-2", "n2", map[string]string{labelJobName: "idx", labelCompletionIndex: "2"}),
		pod("other", "old-0", "n2", map[string]string{labelJobNameLegacy: "old", labelCompletionIndex: "0"}),
		pod("train", "unscheduled", "", kf("worker", "5")),
		pod("train", "web", "n1", map[string]string{"app": "web"}),
	}
	for _, p := range pods {
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	inv, refs, err := readInventory(ctx, env.Client, "train")
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Nodes) != 2 || inv.Nodes[0].Name != "n1" || inv.Nodes[0].Labels["pool"] != "h200" {
		t.Fatalf("nodes %+v", inv.Nodes)
	}
	if g := inv.Nodes[0].GPUs; len(g) != 2 || g[0] != (inventory.GPU{Index: 0, UUID: "GPU-a", PCI: "00000000:18:00.0", Model: "NVIDIA H200"}) || g[1].UUID != "GPU-b" {
		t.Errorf("n1 GPUs from the agent's report: %+v", g)
	}
	if g := inv.Nodes[1].GPUs; len(g) != 3 || g[2].Index != 2 || g[2].UUID != "" {
		t.Errorf("n2 GPUs from the capacity: %+v", g)
	}
	got := map[string]string{}
	for _, j := range inv.Jobs {
		var rs []string
		for _, r := range j.Ranks {
			if r.GPU != inventory.NoGPU {
				t.Errorf("%s rank %d: GPU %d, want NoGPU (the API does not say)", j.Name, r.Rank, r.GPU)
			}
			rs = append(rs, fmt.Sprintf("%d@%s", r.Rank, r.Node))
		}
		got[j.Name] = strings.Join(rs, " ")
	}
	want := map[string]string{
		"llm":       "0@n1 1@n1 2@n2",
		"js":        "0@n1 1@n1 2@n2 3@n2",
		"other/idx": "2@n2",
		"other/old": "0@n2",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("jobs %v, want %v", got, want)
	}
	if p := refs[rankKey("llm", 2)]; p.Name != "llm-worker-1" || p.Namespace != "train" || p.UID == "" {
		t.Errorf("pod of llm rank 2: %+v", p)
	}
}

// TestInjectRecover holds the injector to the fault.Injector contract
// through a real API server, acknowledging NodeFaults by hand as an agent
// would.
func TestInjectRecover(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
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
	exp := &v1alpha1.Experiment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "chaos", UID: types.UID("0123-4567-89ab-cdef")}}
	exp.Spec.Duration.Duration = time.Minute
	tgt, err := New(Options{Client: env.Client, Watcher: w, Experiment: exp})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := catalog.Lookup("hardware.xid")
	inj, err := tgt.Injector(f, f.Mechanism("kernel-log"))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := f.Resolve(map[string]string{"code": "79"})
	if err != nil {
		t.Fatal(err)
	}
	ref := inventory.Ref{Kind: catalog.ScopeGPU, Node: "n1", GPU: 3, UUID: "GPU-3"}

	// ack waits for the NodeFault of key and sets its phase, as an agent.
	ack := func(key string, phase v1alpha1.NodeFaultPhase, msg string) {
		name := NodeFaultName(exp.UID, key)
		deadline := time.Now().Add(60 * time.Second)
		for {
			var nf v1alpha1.NodeFault
			err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &nf)
			if err == nil && (phase != v1alpha1.NodeFaultRecovered || nf.Spec.Action == v1alpha1.ActionRecover) {
				nf.Status.Phase, nf.Status.Message, nf.Status.ObservedGeneration = phase, msg, nf.Generation
				if err := env.Client.Status().Update(ctx, &nf); err == nil {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Errorf("NodeFault %s never came to ack %s: %v", name, phase, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	t.Run("recover of a key never injected", func(t *testing.T) {
		if err := inj.Recover(ctx, "e/0/n1/gpu7"); err != nil {
			t.Fatalf("Recover: %v, want nil", err)
		}
	})
	t.Run("inject, repeat, recover, repeat", func(t *testing.T) {
		key := "e/0/n1/gpu3"
		go ack(key, v1alpha1.NodeFaultApplied, "")
		hold := fault.WithHoldUntil(ctx, time.Now().Add(time.Minute))
		if err := inj.Inject(hold, key, ref, vals); err != nil {
			t.Fatalf("Inject: %v", err)
		}
		var nf v1alpha1.NodeFault
		if err := env.Client.Get(ctx, client.ObjectKey{Name: NodeFaultName(exp.UID, key)}, &nf); err != nil {
			t.Fatal(err)
		}
		if nf.Labels[v1alpha1.LabelNode] != "n1" || nf.Labels[v1alpha1.LabelExperiment] != "e" || nf.Labels[v1alpha1.LabelExperimentNamespace] != "chaos" ||
			nf.Spec.Params["code"] != "79" || nf.Spec.Target.GPU == nil || *nf.Spec.Target.GPU != 3 || nf.Spec.Target.UUID != "GPU-3" || nf.Spec.Target.Key != "n1/gpu3" ||
			nf.Spec.ExpiresAt.Time.Before(time.Now().Add(time.Minute+DefaultGrace-5*time.Second)) {
			t.Errorf("NodeFault %+v", nf)
		}
		if err := inj.Inject(hold, key, ref, vals); err != nil {
			t.Fatalf("second Inject: %v", err)
		}
		go ack(key, v1alpha1.NodeFaultRecovered, "")
		if err := inj.Recover(ctx, key); err != nil {
			t.Fatalf("Recover: %v", err)
		}
		if err := inj.Recover(ctx, key); err != nil {
			t.Fatalf("second Recover: %v", err)
		}
		// Deleted after it recovered: still recovered.
		if err := env.Client.Delete(ctx, &nf); err != nil {
			t.Fatal(err)
		}
		waitGone(t, w, nf.Name)
		if err := inj.Recover(ctx, key); err != nil {
			t.Fatalf("Recover after deletion of a recovered NodeFault: %v", err)
		}
	})
	t.Run("agent fails", func(t *testing.T) {
		key := "e/0/n1/gpu4"
		go ack(key, v1alpha1.NodeFaultFailed, "write /dev/kmsg: permission denied")
		err := inj.Inject(ctx, key, inventory.Ref{Kind: catalog.ScopeGPU, Node: "n1", GPU: 4}, vals)
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("Inject: %v, want the agent's message", err)
		}
	})
	t.Run("deleted while applied", func(t *testing.T) {
		key := "e/0/n1/gpu5"
		go ack(key, v1alpha1.NodeFaultApplied, "")
		if err := inj.Inject(ctx, key, inventory.Ref{Kind: catalog.ScopeGPU, Node: "n1", GPU: 5}, vals); err != nil {
			t.Fatal(err)
		}
		name := NodeFaultName(exp.UID, key)
		if err := env.Client.Delete(ctx, &v1alpha1.NodeFault{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, w, name)
		err := inj.Recover(ctx, key)
		if !errors.Is(err, fault.ErrUnproven) {
			t.Fatalf("Recover: %v, want ErrUnproven", err)
		}
	})
	t.Run("k8s probes see the touched nodes", func(t *testing.T) {
		if _, err := tgt.Probe("p", v1alpha1.ProbeSpec{Kubernetes: &v1alpha1.KubernetesProbe{Check: v1alpha1.KubeTaint, Key: "x", Selector: "a=("}}); err == nil {
			t.Error("a bad selector was accepted")
		}
		for _, n := range []string{"n1", "n2"} {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"quarantine": "yes"}}}
			if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		p, err := tgt.Probe("p", v1alpha1.ProbeSpec{Kubernetes: &v1alpha1.KubernetesProbe{Check: v1alpha1.KubeLabel, Key: "quarantine"}})
		if err != nil {
			t.Fatal(err)
		}
		obs, err := p.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Both nodes carry the label, but only n1 had a NodeFault of this
		// target (above): the probe is about n1 alone.
		if !obs.Holds || len(obs.Subjects) != 1 || obs.Subjects[0].Node != "n1" {
			t.Errorf("label probe over the touched nodes: %+v, want it to hold for n1 alone", obs)
		}
	})
	t.Run("rank fault names its pod", func(t *testing.T) {
		// The agent finds a rank's process through its pod's uid, so the
		// NodeFault must carry it.
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: exp.Namespace}}); err != nil {
			t.Fatal(err)
		}
		p := pod(exp.Namespace, "llm-master-0", "n1", map[string]string{labelKubeflowJob: "llm", labelKubeflowType: "master", labelKubeflowIndex: "0"})
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		inv, err := tgt.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(inv.Jobs) != 1 || len(inv.Jobs[0].Ranks) != 1 {
			t.Fatalf("jobs %+v, want llm with one rank", inv.Jobs)
		}
		j, r := inv.Jobs[0], inv.Jobs[0].Ranks[0]
		kf, _ := catalog.Lookup("workload.kill-rank")
		kinj, err := tgt.Injector(kf, kf.Mechanism("signal"))
		if err != nil {
			t.Fatalf("kill-rank via signal on k8s: %v", err)
		}
		kv, err := kf.Resolve(nil)
		if err != nil {
			t.Fatal(err)
		}
		key := "e/0/" + j.Name + "/" + fmt.Sprint(r.Rank)
		go ack(key, v1alpha1.NodeFaultApplied, "")
		ref := inventory.Ref{Kind: catalog.ScopeRank, Node: r.Node, Job: j.Name, Rank: r.Rank, GPU: r.GPU}
		if err := kinj.Inject(ctx, key, ref, kv); err != nil {
			t.Fatalf("Inject: %v", err)
		}
		var nf v1alpha1.NodeFault
		if err := env.Client.Get(ctx, client.ObjectKey{Name: NodeFaultName(exp.UID, key)}, &nf); err != nil {
			t.Fatal(err)
		}
		got := nf.Spec.Target
		if got.Kind != "rank" || got.Rank == nil || *got.Rank != r.Rank || got.Job != j.Name ||
			got.Pod != exp.Namespace+"/llm-master-0" || got.PodUID == "" || got.PodUID != string(p.UID) || nf.Spec.NodeName != "n1" {
			t.Errorf("rank NodeFault target %+v on node %s, want rank %d of %s in pod %s/llm-master-0 (%s) on n1", got, nf.Spec.NodeName, r.Rank, j.Name, exp.Namespace, p.UID)
		}
		go ack(key, v1alpha1.NodeFaultRecovered, "")
		if err := kinj.Recover(ctx, key); err != nil {
			t.Fatalf("Recover: %v", err)
		}
	})
}

func waitGone(t *testing.T, w *Watcher, name string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, ok := w.lastPhase(name); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher never saw %s deleted", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FuzzNodeOf: any annotation either parses into GPUs or fails naming the
// node and the annotation, never panics.
func FuzzNodeOf(f *testing.F) {
	f.Add(`[{"index":0,"uuid":"GPU-a","busId":"00000000:18:00.0","model":"NVIDIA H200"}]`)
	f.Add(`[]`)
	f.Add(`{"index":0}`)
	f.Add(`[{"index":-1}]`)
	f.Fuzz(func(t *testing.T, raw string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{v1alpha1.AnnotationGPUs: raw}}}
		node, err := nodeOf(n)
		if err != nil {
			if !strings.Contains(err.Error(), "node n: annotation "+v1alpha1.AnnotationGPUs) {
				t.Fatalf("error %q does not name the node and annotation", err)
			}
			return
		}
		for i := 1; i < len(node.GPUs); i++ {
			if node.GPUs[i-1].Index > node.GPUs[i].Index {
				t.Fatalf("GPUs not sorted by index: %+v", node.GPUs)
			}
		}
	})
}
