package kubefault_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/fault/kubefault"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

func init() { log.SetLogger(logr.Discard()) }

// wait is the deadline for state the API server or a controller reaches;
// generous, for a busy two-core machine.
const wait = 60 * time.Second

var seq atomic.Int64

// unique names one test's object, so subtests share a control plane.
func unique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }

// cluster is a control plane shared by one test's subtests.
type cluster struct {
	*kubetest.Env
}

func start(t *testing.T, controllers ...string) cluster {
	t.Helper()
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	if len(controllers) > 0 {
		env.StartControllerManager(t, controllers...)
	}
	return cluster{env}
}

func (c cluster) node(t *testing.T, name string, mutate ...func(*corev1.Node)) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, m := range mutate {
		m(n)
	}
	if err := c.Client.Create(context.Background(), n); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
}

func (c cluster) getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	var n corev1.Node
	if err := c.Client.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatalf("get node %s: %v", name, err)
	}
	return &n
}

func (c cluster) namespace(t *testing.T) string {
	t.Helper()
	ns := unique("ns")
	if err := c.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

type podOpt func(*corev1.Pod)

func labelled(k, v string) podOpt { return func(p *corev1.Pod) { p.Labels[k] = v } }

func gpu(p *corev1.Pod) {
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
}

func daemonSet(p *corev1.Pod) {
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: types.UID("ds-uid"), Controller: &yes}}
}

func mirror(p *corev1.Pod) { p.Annotations = map[string]string{"kubernetes.io/config.mirror": "hash"} }

// pod creates a pod bound to node and, as a kubelet would, reports it
// Running and Ready.
func (c cluster) pod(t *testing.T, ns, name, node string, opts ...podOpt) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	for _, o := range opts {
		o(p)
	}
	if err := c.Client.Create(ctx, p); err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := c.Client.Status().Update(ctx, p); err != nil {
		t.Fatalf("report pod %s/%s ready: %v", ns, name, err)
	}
	return p
}

// alive reports whether the pod of that uid exists and is not being
// deleted: evictions of a pod with a grace period leave it terminating,
// as no kubelet runs here to finish it.
func (c cluster) alive(t *testing.T, p *corev1.Pod) bool {
	t.Helper()
	var got corev1.Pod
	err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(p), &got)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return got.UID == p.UID && got.DeletionTimestamp == nil
}

func lookup(t testing.TB, id string) (*catalog.Fault, *catalog.Mechanism) {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("%s not in the catalogue", id)
	}
	built := fault.Built(f, kubefault.Mechanisms())
	if len(built) != 1 {
		t.Fatalf("%s: built kube mechanisms %v, want one", id, built)
	}
	return f, f.Mechanism(built[0])
}

func (c cluster) injector(t testing.TB, id string, retry time.Duration) fault.Injector {
	t.Helper()
	f, m := lookup(t, id)
	in, err := kubefault.New(f, m, kubefault.Options{Client: c.Client, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func nodeRef(n string) inventory.Ref { return inventory.Ref{Kind: catalog.ScopeNode, Node: n} }

// TestAPI runs every injector against a real API server, and the drains
// against the disruption controller that keeps PodDisruptionBudgets.
func TestAPI(t *testing.T) {
	c := start(t, "disruption-controller")
	t.Run("conformance", func(t *testing.T) { t.Parallel(); testConformance(t, c) })
	t.Run("pod kill", func(t *testing.T) { t.Parallel(); testPodKill(t, c) })
	t.Run("device plugin kill", func(t *testing.T) { t.Parallel(); testDevicePlugin(t, c) })
	t.Run("cordon someone else's", func(t *testing.T) { t.Parallel(); testForeignCordon(t, c) })
	t.Run("drain waits for the budget", func(t *testing.T) { t.Parallel(); testDrainBudget(t, c) })
	t.Run("taints", func(t *testing.T) { t.Parallel(); testTaints(t, c) })
}

// testConformance holds cordon, taint and pod delete to the injector
// contract, judging by the Node and pods the API server holds.
func testConformance(t *testing.T, c cluster) {
	ctx := context.Background()
	t.Run("cordon", func(t *testing.T) {
		faulttest.Run(t, func(t *testing.T) faulttest.Env {
			n := unique("conf-cordon")
			c.node(t, n)
			return faulttest.Env{
				Injector: c.injector(t, "workload.cordon-drain", 0),
				Ref:      nodeRef(n),
				Values:   faulttest.Values(t, "workload.cordon-drain", map[string]string{"drain": "false"}),
				Applied: func(key string) bool {
					got := c.getNode(t, n)
					return got.Spec.Unschedulable && got.Annotations[v1alpha1.AnnotationCordoned] == key
				},
				Vanish: func() {
					if err := c.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
						t.Fatal(err)
					}
				},
			}
		})
	})
	t.Run("taint", func(t *testing.T) {
		faulttest.Run(t, func(t *testing.T) faulttest.Env {
			n := unique("conf-taint")
			c.node(t, n)
			return faulttest.Env{
				Injector: c.injector(t, "workload.node-taint", 0),
				Ref:      nodeRef(n),
				Values:   faulttest.Values(t, "workload.node-taint", map[string]string{"key": "example.com/quarantine", "effect": "NoExecute"}),
				Applied: func(string) bool {
					return slices.ContainsFunc(c.getNode(t, n).Spec.Taints, func(x corev1.Taint) bool { return x.Key == "example.com/quarantine" })
				},
				Vanish: func() {
					if err := c.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
						t.Fatal(err)
					}
				},
			}
		})
	})
	t.Run("pod delete", func(t *testing.T) {
		faulttest.Run(t, func(t *testing.T) faulttest.Env {
			n, ns := unique("conf-pod"), c.namespace(t)
			c.node(t, n)
			p := c.pod(t, ns, "rank-0", n, gpu)
			return faulttest.Env{
				Injector: c.injector(t, "workload.pod-kill", 0),
				Ref:      nodeRef(n),
				Values:   faulttest.Values(t, "workload.pod-kill", nil),
				Count: func() int {
					if c.alive(t, p) {
						return 0
					}
					return 1
				},
			}
		})
	})
}

// testPodKill: pod-kill deletes the pods its selector picks on its node
// (by default those requesting GPUs), never DaemonSet or mirror pods, and
// a key injected again does not kill the replacements.
func testPodKill(t *testing.T, c cluster) {
	ctx := context.Background()
	tests := []struct {
		name, selector string
		// pods on the node, by name: whether the fault kills it.
		want map[string]bool
	}{
		{"gpu pods by default", "", map[string]bool{"rank-0": true, "rank-1": true, "sidecar": false, "plugin": false, "static": false}},
		{"selector", "job=llm", map[string]bool{"rank-0": true, "rank-1": false, "sidecar": true, "plugin": false, "static": false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, other, ns := unique("podkill"), unique("podkill-other"), c.namespace(t)
			c.node(t, n)
			c.node(t, other)
			pods := map[string]*corev1.Pod{
				"rank-0":  c.pod(t, ns, "rank-0", n, gpu, labelled("job", "llm")),
				"rank-1":  c.pod(t, ns, "rank-1", n, gpu, labelled("job", "other")),
				"sidecar": c.pod(t, ns, "sidecar", n, labelled("job", "llm")),
				"plugin":  c.pod(t, ns, "plugin", n, gpu, daemonSet, labelled("job", "llm")),
				"static":  c.pod(t, ns, "static", n, gpu, mirror, labelled("job", "llm")),
			}
			elsewhere := c.pod(t, ns, "rank-2", other, gpu, labelled("job", "llm"))
			in := c.injector(t, "workload.pod-kill", 0)
			v := faulttest.Values(t, "workload.pod-kill", map[string]string{"selector": tc.selector})
			if err := in.Inject(ctx, "k1", nodeRef(n), v); err != nil {
				t.Fatal(err)
			}
			for name, killed := range tc.want {
				if c.alive(t, pods[name]) == killed {
					t.Errorf("pod %s: killed %v, want %v", name, !killed, killed)
				}
			}
			if !c.alive(t, elsewhere) {
				t.Error("a pod on another node was killed")
			}
			// grace 0 removed the pod at once; its replacement, same name,
			// must survive the same key injected again, not another key.
			repl := c.pod(t, ns, "rank-0", n, gpu, labelled("job", "llm"))
			if err := in.Inject(ctx, "k1", nodeRef(n), v); err != nil {
				t.Fatal(err)
			}
			if !c.alive(t, repl) {
				t.Fatal("injecting the same key again killed the replacement")
			}
			if err := in.Recover(ctx, "k1"); err != nil {
				t.Fatal(err)
			}
			if err := in.Inject(ctx, "k2", nodeRef(n), v); err != nil {
				t.Fatal(err)
			}
			if c.alive(t, repl) {
				t.Fatal("a new key did not kill the replacement")
			}
		})
	}
	t.Run("nothing to kill", func(t *testing.T) {
		n := unique("podkill-empty")
		c.node(t, n)
		err := c.injector(t, "workload.pod-kill", 0).Inject(ctx, "k", nodeRef(n), faulttest.Values(t, "workload.pod-kill", nil))
		if err == nil || !strings.Contains(err.Error(), "no pod on node "+n) {
			t.Fatalf("Inject on a node without GPU pods = %v, want an error naming the node", err)
		}
	})
}

// testDevicePlugin: the device plugin's pod on the node goes, the one on
// another node and other DaemonSet pods stay.
func testDevicePlugin(t *testing.T, c cluster) {
	ctx := context.Background()
	n, other, ns := unique("dp"), unique("dp-other"), c.namespace(t)
	c.node(t, n)
	c.node(t, other)
	sel := labelled("app", "nvidia-device-plugin-daemonset")
	plugin := c.pod(t, ns, "plugin-a", n, daemonSet, sel)
	exporter := c.pod(t, ns, "exporter-a", n, daemonSet, labelled("app", "dcgm-exporter"))
	remote := c.pod(t, ns, "plugin-b", other, daemonSet, sel)
	in := c.injector(t, "workload.device-plugin-kill", 0)
	if err := in.Inject(ctx, "k", nodeRef(n), faulttest.Values(t, "workload.device-plugin-kill", nil)); err != nil {
		t.Fatal(err)
	}
	// The plugin's pod keeps its default 30 s grace: terminating is killed.
	if c.alive(t, plugin) {
		t.Error("the device plugin pod on the node is alive")
	}
	if !c.alive(t, exporter) || !c.alive(t, remote) {
		t.Error("another DaemonSet pod, or the plugin on another node, was killed")
	}
}

// testForeignCordon: a node someone else cordoned (unschedulable, no mark
// of ours) stays cordoned after recovery; one gpuchaos cordoned is
// uncordoned, and a node another injection cordoned is not.
func testForeignCordon(t *testing.T, c cluster) {
	ctx := context.Background()
	v := faulttest.Values(t, "workload.cordon-drain", map[string]string{"drain": "false"})
	tests := []struct {
		name            string
		before          func(*corev1.Node)
		wantMark        string
		wantCordonAfter bool
	}{
		{"schedulable: ours to undo", func(*corev1.Node) {}, "ours", false},
		{"cordoned by someone else", func(n *corev1.Node) { n.Spec.Unschedulable = true }, "", true},
		{"cordoned by another injection", func(n *corev1.Node) {
			n.Spec.Unschedulable = true
			n.Annotations = map[string]string{v1alpha1.AnnotationCordoned: "other"}
		}, "other", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := unique("cordon")
			c.node(t, n, tc.before)
			// Keys name NodeFaults, unique in the cluster: recovery
			// looks for its key on every node.
			key, wantMark := n+"-k", tc.wantMark
			if wantMark == "ours" {
				wantMark = key
			}
			in := c.injector(t, "workload.cordon-drain", 0)
			if err := in.Inject(ctx, key, nodeRef(n), v); err != nil {
				t.Fatal(err)
			}
			got := c.getNode(t, n)
			if !got.Spec.Unschedulable || got.Annotations[v1alpha1.AnnotationCordoned] != wantMark {
				t.Fatalf("after inject: unschedulable %v, mark %q; want true, %q", got.Spec.Unschedulable, got.Annotations[v1alpha1.AnnotationCordoned], wantMark)
			}
			if err := in.Recover(ctx, key); err != nil {
				t.Fatal(err)
			}
			got = c.getNode(t, n)
			if got.Spec.Unschedulable != tc.wantCordonAfter {
				t.Fatalf("after recover: unschedulable %v, want %v", got.Spec.Unschedulable, tc.wantCordonAfter)
			}
			if mark := got.Annotations[v1alpha1.AnnotationCordoned]; mark == key {
				t.Fatal("recover left our mark")
			}
		})
	}
}

// testDrainBudget: a drain evicts through the Eviction API, so a
// PodDisruptionBudget (minAvailable 2, kept by the real disruption
// controller) holds its pods back: a drain that ends while held reports
// the pods that stayed, and one that goes on is retried until
// replacements elsewhere let the budget allow each eviction. DaemonSet
// and mirror pods are never evicted.
func testDrainBudget(t *testing.T, c cluster) {
	ctx := context.Background()
	n, other, ns := unique("drain"), unique("drain-other"), c.namespace(t)
	c.node(t, n)
	c.node(t, other)
	web := labelled("app", "web")
	p1 := c.pod(t, ns, "web-1", n, web)
	p2 := c.pod(t, ns, "web-2", n, web)
	ds := c.pod(t, ns, "agent", n, daemonSet)
	static := c.pod(t, ns, "static", n, mirror)
	two := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
	if err := c.Client.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	budget := func(healthy, allowed int32) func() bool {
		return func() bool {
			var got policyv1.PodDisruptionBudget
			if err := c.Client.Get(ctx, client.ObjectKeyFromObject(pdb), &got); err != nil {
				t.Fatal(err)
			}
			return got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == healthy && got.Status.DisruptionsAllowed == allowed
		}
	}
	testutil.Eventually(t, wait, "the disruption controller to count 2 healthy pods, 0 disruptions allowed", budget(2, 0))

	in := c.injector(t, "workload.cordon-drain", 500*time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := in.Inject(short, n, nodeRef(n), faulttest.Values(t, "workload.cordon-drain", nil))
	cancel()
	var de *kubefault.DrainError
	if !errors.As(err, &de) {
		t.Fatalf("drain held by the budget = %v, want a DrainError", err)
	}
	slices.Sort(de.Stayed)
	if want := []string{ns + "/web-1", ns + "/web-2"}; !slices.Equal(de.Stayed, want) {
		t.Fatalf("stayed %v, want %v", de.Stayed, want)
	}
	if !c.alive(t, p1) || !c.alive(t, p2) {
		t.Fatal("a pod the budget protects was evicted")
	}
	if !c.getNode(t, n).Spec.Unschedulable {
		t.Fatal("the node is not cordoned after a partial drain")
	}

	// One replacement elsewhere allows one eviction; the drain evicts one
	// pod and retries the other until a second replacement comes.
	c.pod(t, ns, "web-3", other, web)
	testutil.Eventually(t, wait, "the budget to allow one disruption", budget(3, 1))
	done := make(chan error, 1)
	go func() {
		long, cancel := context.WithTimeout(ctx, 3*wait)
		defer cancel()
		done <- in.Inject(long, n, nodeRef(n), faulttest.Values(t, "workload.cordon-drain", nil))
	}()
	testutil.Eventually(t, wait, "one web pod evicted", func() bool { return c.alive(t, p1) != c.alive(t, p2) })
	select {
	case err := <-done:
		t.Fatalf("the drain ended (%v) with a pod still held by the budget", err)
	default:
	}
	c.pod(t, ns, "web-4", other, web)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drain after the budget allowed it: %v", err)
		}
	case <-time.After(2 * wait):
		t.Fatal("the drain did not finish after the budget allowed the second eviction")
	}
	if c.alive(t, p1) || c.alive(t, p2) {
		t.Fatal("a web pod on the drained node is still running")
	}
	if !c.alive(t, ds) || !c.alive(t, static) {
		t.Fatal("a DaemonSet or mirror pod was evicted")
	}
	if err := in.Recover(ctx, n); err != nil {
		t.Fatal(err)
	}
	if c.getNode(t, n).Spec.Unschedulable {
		t.Fatal("recover did not uncordon the node it cordoned")
	}
}

// testTaints: our taint comes and goes, foreign taints (another key, the
// same key with another effect) stay, and a foreign taint of the same key
// and effect is refused rather than taken over.
func testTaints(t *testing.T, c cluster) {
	ctx := context.Background()
	foreign := []corev1.Taint{
		{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/quarantine", Effect: corev1.TaintEffectPreferNoSchedule},
	}
	n := unique("taint")
	c.node(t, n, func(n *corev1.Node) { n.Spec.Taints = slices.Clone(foreign) })
	in := c.injector(t, "workload.node-taint", 0)
	ours := faulttest.Values(t, "workload.node-taint", map[string]string{"key": "example.com/quarantine", "value": "xid-79", "effect": "NoSchedule"})
	if err := in.Inject(ctx, n+"-k1", nodeRef(n), ours); err != nil {
		t.Fatal(err)
	}
	keys := func() []string { return taintNames(c.getNode(t, n).Spec.Taints) }
	want := []string{"example.com/quarantine:PreferNoSchedule", "example.com/quarantine=xid-79:NoSchedule", "nvidia.com/gpu=present:NoSchedule"}
	if got := keys(); !slices.Equal(got, want) {
		t.Fatalf("taints after inject %v, want %v", got, want)
	}
	// A second injection cannot take over the same taint.
	if err := in.Inject(ctx, n+"-k2", nodeRef(n), ours); err == nil {
		t.Fatal("a second key took over the first key's taint")
	}
	// Nor a foreign one.
	taken := faulttest.Values(t, "workload.node-taint", map[string]string{"key": "nvidia.com/gpu", "effect": "NoSchedule"})
	if err := in.Inject(ctx, n+"-k3", nodeRef(n), taken); err == nil || !strings.Contains(err.Error(), "did not add") {
		t.Fatalf("inject over a foreign taint = %v, want refused", err)
	}
	other := faulttest.Values(t, "workload.node-taint", map[string]string{"key": "gpuchaos.dev/quarantine", "effect": "NoExecute"})
	if err := in.Inject(ctx, n+"-k4", nodeRef(n), other); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{n + "-k1", n + "-k2", n + "-k3"} {
		if err := in.Recover(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if got := keys(); !slices.Equal(got, []string{"example.com/quarantine:PreferNoSchedule", "gpuchaos.dev/quarantine:NoExecute", "nvidia.com/gpu=present:NoSchedule"}) {
		t.Fatalf("taints after recovering k1 %v: want the foreign ones and k4's", got)
	}
	if err := in.Recover(ctx, n+"-k4"); err != nil {
		t.Fatal(err)
	}
	got := c.getNode(t, n)
	if names, want := taintNames(got.Spec.Taints), taintNames(foreign); !slices.Equal(names, want) {
		t.Fatalf("taints after recovery %v, want exactly the foreign %v", names, want)
	}
	if _, ok := got.Annotations[v1alpha1.AnnotationTainted]; ok {
		t.Fatal("recovery left the taint record")
	}
}

// taintNames writes taints as kubectl does (key=value:effect), sorted,
// leaving out the API server's own node.kubernetes.io taints (its
// admission taints a new node not-ready until a kubelet reports).
func taintNames(taints []corev1.Taint) []string {
	var s []string
	for _, x := range taints {
		if strings.HasPrefix(x.Key, "node.kubernetes.io/") {
			continue
		}
		v := ""
		if x.Value != "" {
			v = "=" + x.Value
		}
		s = append(s, x.Key+v+":"+string(x.Effect))
	}
	slices.Sort(s)
	return s
}
