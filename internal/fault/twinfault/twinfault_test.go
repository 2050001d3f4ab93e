package twinfault_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/fault/twinfault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// refFor aims a fault at GPU 3 of the first node, or the matching object of
// its scope.
func refFor(f *catalog.Fault, inv inventory.Inventory) inventory.Ref {
	n := inv.Nodes[0]
	g := n.GPUs[3]
	switch f.Scope {
	case catalog.ScopeNode:
		return inventory.Ref{Kind: catalog.ScopeNode, Node: n.Name}
	case catalog.ScopeJob:
		return inventory.Ref{Kind: catalog.ScopeJob, Job: inv.Jobs[0].Name}
	case catalog.ScopeRank:
		return inventory.Ref{Kind: catalog.ScopeRank, Job: inv.Jobs[0].Name, Rank: 3, Node: n.Name, GPU: 3, UUID: g.UUID, PCI: g.PCI}
	}
	return inventory.Ref{Kind: catalog.ScopeGPU, Node: n.Name, GPU: g.Index, UUID: g.UUID, PCI: g.PCI}
}

// TestConformance runs the injector contract for every fault of the
// catalogue on a real twin.
func TestConformance(t *testing.T) {
	for _, f := range catalog.All() {
		t.Run(f.ID, func(t *testing.T) {
			t.Parallel()
			faulttest.Run(t, func(t *testing.T) faulttest.Env {
				tw, err := twin.New(twin.Options{Seed: 7})
				if err != nil {
					t.Fatal(err)
				}
				if err := tw.Sleep(context.Background(), 2*time.Minute); err != nil {
					t.Fatal(err)
				}
				v, err := f.Resolve(nil)
				if err != nil {
					t.Fatal(err)
				}
				ref := refFor(f, tw.Inventory())
				env := faulttest.Env{
					Injector: twinfault.New(f, tw),
					Ref:      ref,
					Values:   v,
					Applied:  func(key string) bool { return slices.Contains(tw.Active(), key) },
				}
				if ref.Kind == catalog.ScopeGPU || ref.Kind == catalog.ScopeRank {
					gone, _ := catalog.Lookup("hardware.fallen-off-bus")
					env.Vanish = func() {
						gpu := inventory.Ref{Kind: catalog.ScopeGPU, Node: ref.Node, GPU: ref.GPU, UUID: ref.UUID, PCI: ref.PCI}
						// The fault may have taken the GPU away already.
						if err := tw.Apply("vanish", gpu, gone.Signature.Effects(nil)); err != nil && !errors.Is(err, twin.ErrTargetGone) {
							t.Fatalf("make the GPU vanish: %v", err)
						}
					}
				}
				return env
			})
		})
	}
}

// TestInjectOnVanishedGPU checks that injecting into a GPU that fell off
// the bus reports the target as gone.
func TestInjectOnVanishedGPU(t *testing.T) {
	tw, err := twin.New(twin.Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	gone, _ := catalog.Lookup("hardware.fallen-off-bus")
	xid, _ := catalog.Lookup("hardware.xid")
	ref := refFor(xid, tw.Inventory())
	if err := twinfault.New(gone, tw).Inject(context.Background(), "a", ref, nil); err != nil {
		t.Fatal(err)
	}
	v, _ := xid.Resolve(nil)
	err = twinfault.New(xid, tw).Inject(context.Background(), "b", ref, v)
	if err == nil || !errors.Is(err, fault.ErrTargetGone) {
		t.Fatalf("inject on a vanished GPU: err = %v, want fault.ErrTargetGone", err)
	}
}
