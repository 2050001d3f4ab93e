package simagent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest/simagent"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

func init() { log.SetLogger(logr.Discard()) }

func nodeFault(name, node string) *v1alpha1.NodeFault {
	gpu := 0
	return &v1alpha1.NodeFault{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNode: node}},
		Spec: v1alpha1.NodeFaultSpec{
			NodeName: node, Fault: "gpu.xid-79", Mechanism: "xid.kmsg-inject",
			Target:    v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &gpu, Key: node + "/0"},
			Action:    v1alpha1.ActionApply,
			ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour)),
		},
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	if _, err := simagent.New(nil, kubetest.Scheme(), simagent.Options{}); err == nil {
		t.Error("New with no nodes: no error")
	}
}

// The agents acknowledge Apply and then Recover of their own nodes'
// NodeFaults through the status subresource, and leave another node's
// alone: its agent is not theirs.
func TestAcknowledgesOwnNodes(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	ctx, cancel := context.WithCancel(context.Background())
	ours := []string{"gpu-0", "gpu-1", "gpu-2"}
	agents, err := simagent.New(env.Config, kubetest.Scheme(), simagent.Options{Nodes: ours, Concurrency: 2, Agent: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- agents.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	select {
	case <-agents.Synced():
	case err := <-done:
		t.Fatalf("Start returned before syncing: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("informer not synced in 60 s")
	}

	var faults []*v1alpha1.NodeFault
	for i, n := range append(ours, "other-node") {
		for j := range 2 {
			nf := nodeFault(fmt.Sprintf("f-%d-%d", i, j), n)
			if err := env.Client.Create(ctx, nf); err != nil {
				t.Fatal(err)
			}
			faults = append(faults, nf)
		}
	}
	mine := faults[:6]
	other := faults[6:]

	waitPhase(t, env.Client, mine, v1alpha1.NodeFaultApplied)
	for _, nf := range mine {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(nf), nf); err != nil {
			t.Fatal(err)
		}
		if nf.Status.AppliedAt == nil || nf.Status.Agent != "sim" || nf.Status.ObservedGeneration != nf.Generation {
			t.Errorf("%s status after apply = %+v", nf.Name, nf.Status)
		}
		nf.Spec.Action = v1alpha1.ActionRecover
		if err := env.Client.Update(ctx, nf); err != nil {
			t.Fatal(err)
		}
	}
	waitPhase(t, env.Client, mine, v1alpha1.NodeFaultRecovered)
	for _, nf := range mine {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(nf), nf); err != nil {
			t.Fatal(err)
		}
		if nf.Status.AppliedAt == nil || nf.Status.RecoveredAt == nil || nf.Status.RecoveredAt.Before(nf.Status.AppliedAt) {
			t.Errorf("%s status after recover = %+v", nf.Name, nf.Status)
		}
	}
	// The other node's faults were created before ours were recovered, so
	// the informer delivered them long since.
	for _, nf := range other {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(nf), nf); err != nil {
			t.Fatal(err)
		}
		if nf.Status.Phase != "" {
			t.Errorf("%s on a node not simulated has phase %q", nf.Name, nf.Status.Phase)
		}
	}
	if s := agents.Stats(); s.Applied != 6 || s.Recovered != 6 {
		t.Errorf("stats = %+v, want 6 applied and 6 recovered writes", s)
	}
}

func waitPhase(t *testing.T, c client.Client, faults []*v1alpha1.NodeFault, want v1alpha1.NodeFaultPhase) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("%d NodeFaults to be %s", len(faults), want), func() bool {
		for _, nf := range faults {
			var got v1alpha1.NodeFault
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(nf), &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != want {
				return false
			}
		}
		return true
	})
}
