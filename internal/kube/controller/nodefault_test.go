package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/kube/controller"
)

// nfWait is the deadline for state the API server or the controller
// reaches; generous, for a busy two-core machine.
const nfWait = 60 * time.Second

var nfSeq atomic.Int64

// nfUnique names one subtest's object, so subtests share a control plane.
func nfUnique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, nfSeq.Add(1)) }

// nfCluster is the control plane TestNodeFaults' subtests share.
type nfCluster struct{ *kubetest.Env }

func (c nfCluster) node(t *testing.T, name string) {
	t.Helper()
	if err := c.Client.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
}

func (c nfCluster) getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	var n corev1.Node
	if err := c.Client.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatalf("get node %s: %v", name, err)
	}
	return &n
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

func nodeFault(name, node, id, mech string, params map[string]string, expires time.Time) *v1alpha1.NodeFault {
	return &v1alpha1.NodeFault{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNode: node}},
		Spec: v1alpha1.NodeFaultSpec{
			NodeName: node, Fault: id, Mechanism: mech, Params: params,
			Target: v1alpha1.NodeFaultTarget{Kind: "node", Key: node},
			Action: v1alpha1.ActionApply, ExpiresAt: metav1.NewTime(expires),
		},
	}
}

// TestNodeFaults runs SetupNodeFaults' controller in a real manager: a
// NodeFault is applied and reported, recovered on Action Recover, at
// ExpiresAt and on deletion (its finalizer holding the object until then),
// and a NodeFault of a node-agent mechanism is left alone.
func TestNodeFaults(t *testing.T) {
	c := nfCluster{kubetest.Start(t, kubetest.Options{CRDs: true})}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// Controller names are unique per process; -count=2 sets up twice.
	skip := true
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme: kubetest.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.SetupNodeFaults(mgr, controller.NodeFaultOptions{Retry: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	get := func(name string) *v1alpha1.NodeFault {
		var nf v1alpha1.NodeFault
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, &nf); err != nil {
			t.Fatalf("get nodefault %s: %v", name, err)
		}
		return &nf
	}
	phase := func(name string, want v1alpha1.NodeFaultPhase) func() bool {
		return func() bool { return get(name).Status.Phase == want }
	}
	create := func(nf *v1alpha1.NodeFault) {
		if err := c.Client.Create(ctx, nf); err != nil {
			t.Fatalf("create nodefault %s: %v", nf.Name, err)
		}
	}
	hour := time.Now().Add(time.Hour)

	// Created first, so the reconciler has seen it before the others end.
	agentNode := nfUnique("rec-agent")
	c.node(t, agentNode)
	create(nodeFault(nfUnique("agents"), agentNode, "hardware.xid", "kernel-log", map[string]string{"code": "79"}, hour))

	t.Run("apply then recover", func(t *testing.T) {
		n := nfUnique("rec-cordon")
		c.node(t, n)
		nf := nodeFault(nfUnique("nf-cordon"), n, "workload.cordon-drain", "node-cordon", map[string]string{"drain": "false"}, hour)
		create(nf)
		testutil.Eventually(t, nfWait, "the NodeFault applied", phase(nf.Name, v1alpha1.NodeFaultApplied))
		got := get(nf.Name)
		if got.Status.Agent != controller.NodeFaultAgent || got.Status.AppliedAt == nil || got.Status.ObservedGeneration != got.Generation {
			t.Fatalf("status %+v: want agent %s, an applied time, the generation", got.Status, controller.NodeFaultAgent)
		}
		if !slices.Contains(got.Finalizers, v1alpha1.FinalizerRecover) {
			t.Fatal("no recovery finalizer on an applied NodeFault")
		}
		node := c.getNode(t, n)
		if !node.Spec.Unschedulable || node.Annotations[v1alpha1.AnnotationCordoned] != nf.Name {
			t.Fatalf("node unschedulable %v, mark %q; want cordoned by %s", node.Spec.Unschedulable, node.Annotations[v1alpha1.AnnotationCordoned], nf.Name)
		}
		got.Spec.Action = v1alpha1.ActionRecover
		if err := c.Client.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, nfWait, "the NodeFault recovered", phase(nf.Name, v1alpha1.NodeFaultRecovered))
		if got := get(nf.Name); got.Status.RecoveredAt == nil {
			t.Fatal("recovered without a time")
		}
		if c.getNode(t, n).Spec.Unschedulable {
			t.Fatal("node still cordoned after recovery")
		}
	})

	t.Run("recover at expiry", func(t *testing.T) {
		n := nfUnique("rec-expire")
		c.node(t, n)
		// Long enough for the apply to be seen before it expires on a
		// busy machine.
		nf := nodeFault(nfUnique("nf-taint"), n, "workload.node-taint", "node-taint",
			map[string]string{"key": "example.com/quarantine", "effect": "NoSchedule"}, time.Now().Add(10*time.Second))
		create(nf)
		testutil.Eventually(t, nfWait, "the NodeFault applied", func() bool {
			p := get(nf.Name).Status.Phase
			return p == v1alpha1.NodeFaultApplied || p == v1alpha1.NodeFaultRecovered
		})
		testutil.Eventually(t, nfWait, "the NodeFault recovered on expiry", phase(nf.Name, v1alpha1.NodeFaultRecovered))
		if got := get(nf.Name); got.Status.Message != "recovered on expiry" || got.Spec.Action != v1alpha1.ActionApply {
			t.Fatalf("status %+v, spec action %s: want recovered on expiry, action untouched", got.Status, got.Spec.Action)
		}
		if taints := taintNames(c.getNode(t, n).Spec.Taints); len(taints) != 0 {
			t.Fatalf("taints %v remain after expiry", taints)
		}
	})

	t.Run("recover on deletion", func(t *testing.T) {
		n := nfUnique("rec-delete")
		c.node(t, n)
		nf := nodeFault(nfUnique("nf-delete"), n, "workload.cordon-drain", "node-cordon", map[string]string{"drain": "false"}, hour)
		create(nf)
		testutil.Eventually(t, nfWait, "the NodeFault applied", phase(nf.Name, v1alpha1.NodeFaultApplied))
		if err := c.Client.Delete(ctx, nf); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, nfWait, "the NodeFault gone", func() bool {
			return apierrors.IsNotFound(c.Client.Get(ctx, client.ObjectKeyFromObject(nf), &v1alpha1.NodeFault{}))
		})
		if c.getNode(t, n).Spec.Unschedulable {
			t.Fatal("node still cordoned after its NodeFault was deleted")
		}
	})

	t.Run("failure is reported", func(t *testing.T) {
		n := nfUnique("rec-fail")
		c.node(t, n)
		nf := nodeFault(nfUnique("nf-fail"), n, "workload.pod-kill", "pod-delete", nil, hour)
		create(nf)
		testutil.Eventually(t, nfWait, "the NodeFault failed", phase(nf.Name, v1alpha1.NodeFaultFailed))
		if msg := get(nf.Name).Status.Message; msg == "" {
			t.Fatal("failed without a message")
		}
	})

	t.Run("agent mechanisms are left alone", func(t *testing.T) {
		var list v1alpha1.NodeFaultList
		if err := c.Client.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelNode: agentNode}); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("%d NodeFaults on %s, want 1", len(list.Items), agentNode)
		}
		if nf := list.Items[0]; nf.Status.Phase != "" || len(nf.Finalizers) != 0 {
			t.Fatalf("the kernel-log NodeFault was touched: status %+v, finalizers %v", nf.Status, nf.Finalizers)
		}
	})
}
