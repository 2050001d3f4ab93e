package nodeagent_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/kube/nodeagent"
)

// The agent's REST client against a real API server: the node's
// NodeFaults listed and watched by label, merge patches of a NodeFault
// and of its status answered into it, the resourceVersion they carry
// honoured, the API server's errors kept for apierrors, and a Node
// patched without touching what else it holds. Config reads the same
// kubeconfig file a process under test gets.
func TestClient(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	ctx := t.Context()
	createNode(t, env)
	cfg, err := nodeagent.Config(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodeagent.Config(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("Config of a missing kubeconfig: no error")
	}
	c, err := nodeagent.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}

	w, err := c.Watch(ctx, node)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Stop()
	mine := newFault("mine", "hardware.xid", "kernel-log", map[string]string{"code": "79"}, v1alpha1.NodeFaultTarget{Kind: "node", Key: node}, time.Now().Add(time.Hour))
	create(t, env, mine)
	other := newFault("other", "hardware.xid", "kernel-log", nil, v1alpha1.NodeFaultTarget{Kind: "node", Key: "n2"}, time.Now().Add(time.Hour))
	other.Labels[v1alpha1.LabelNode], other.Spec.NodeName = "n2", "n2"
	create(t, env, other)
	select {
	case ev := <-w.ResultChan():
		if nf, ok := ev.Object.(*v1alpha1.NodeFault); !ok || nf.Name != "mine" {
			t.Errorf("first watch event %s %T %v, want NodeFault mine", ev.Type, ev.Object, ev.Object)
		}
	case <-time.After(within):
		t.Fatal("no watch event for a NodeFault of the node")
	}

	list, err := c.List(ctx, node)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 1 || list[0].Name != "mine" || list[0].Spec.Params["code"] != "79" || list[0].ResourceVersion == "" {
		t.Fatalf("List = %+v, want NodeFault mine alone, whole", list)
	}
	nf := &list[0]
	stale := nf.DeepCopy()

	fin, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": []string{v1alpha1.FinalizerRecover}, "resourceVersion": nf.ResourceVersion}})
	if err := c.Patch(ctx, nf, fin); err != nil {
		t.Fatalf("Patch: %v", err)
	}
	if !slices.Contains(nf.Finalizers, v1alpha1.FinalizerRecover) || nf.ResourceVersion == stale.ResourceVersion {
		t.Errorf("after Patch, finalizers %v, resourceVersion %s (was %s): want the server's answer", nf.Finalizers, nf.ResourceVersion, stale.ResourceVersion)
	}
	if err := c.Patch(ctx, stale, fin); !apierrors.IsConflict(err) {
		t.Errorf("Patch carrying a stale resourceVersion: %v, want a conflict", err)
	}

	st, _ := json.Marshal(map[string]any{"status": map[string]any{"phase": "Applied", "agent": "a"}, "metadata": map[string]any{"resourceVersion": nf.ResourceVersion}})
	if err := c.PatchStatus(ctx, nf, st); err != nil {
		t.Fatalf("PatchStatus: %v", err)
	}
	if got := get(t, env, "mine"); got.Status.Phase != v1alpha1.NodeFaultApplied || got.Status.Agent != "a" || nf.ResourceVersion != got.ResourceVersion {
		t.Errorf("after PatchStatus, status %+v, resourceVersion %s (server %s)", got.Status, nf.ResourceVersion, got.ResourceVersion)
	}
	if err := c.PatchStatus(ctx, &v1alpha1.NodeFault{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}, st); !apierrors.IsNotFound(err) {
		t.Errorf("PatchStatus of a NodeFault that does not exist: %v, want not found", err)
	}

	if err := c.PatchNode(ctx, node, []byte(`{"metadata":{"annotations":{"example.com/new":"x"}}}`)); err != nil {
		t.Fatalf("PatchNode: %v", err)
	}
	var n corev1.Node
	if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
		t.Fatal(err)
	}
	if n.Annotations["example.com/new"] != "x" || n.Annotations["example.com/keep"] != "me" {
		t.Errorf("node annotations %v, want the new one beside the one it had", n.Annotations)
	}
	if err := c.PatchNode(ctx, "no-such-node", []byte(`{}`)); !apierrors.IsNotFound(err) {
		t.Errorf("PatchNode of a node that does not exist: %v, want not found", err)
	}
}
