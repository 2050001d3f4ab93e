package promeval_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// warmUp is how long every twin runs before a fault: long enough for the
// 15m windows and offsets the rules use to have data.
const warmUp = 20 * time.Minute

// newTwin returns the default twin (seed 1) after warmUp.
func newTwin(t testing.TB) *twin.Twin {
	t.Helper()
	tw, err := twin.New(twin.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Sleep(context.Background(), warmUp); err != nil {
		t.Fatal(err)
	}
	return tw
}

// gpuRef returns the reference of GPU index on the twin's first node.
func gpuRef(t testing.TB, tw *twin.Twin, index int) inventory.Ref {
	t.Helper()
	n := tw.Inventory().Nodes[0]
	g := n.GPUs[index]
	return inventory.Ref{Kind: catalog.ScopeGPU, Node: n.Name, GPU: g.Index, UUID: g.UUID, PCI: g.PCI}
}

// inject applies a catalogue fault with its default parameters overridden
// by params to ref, as the engine's twin injector does.
func inject(t testing.TB, tw *twin.Twin, id string, params map[string]string, ref inventory.Ref) {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("no fault %s", id)
	}
	values, err := f.Resolve(params)
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Apply(id, ref, f.Signature.Effects(values)); err != nil {
		t.Fatal(err)
	}
}

// load parses a rule file.
func load(t testing.TB, text string) *rules.Set {
	t.Helper()
	set, err := rules.Load([]byte(text), "test.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// rule returns the rule of set named name.
func rule(t testing.TB, set *rules.Set, name string) *rules.Rule {
	t.Helper()
	for _, r := range set.Rules {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no rule %s", name)
	return nil
}

// rankRef returns the reference of a rank of the twin's first job.
func rankRef(t testing.TB, tw *twin.Twin, rank int) inventory.Ref {
	t.Helper()
	j := tw.Inventory().Jobs[0]
	r := j.Ranks[rank]
	return inventory.Ref{Kind: catalog.ScopeRank, Job: j.Name, Rank: r.Rank, Node: r.Node, GPU: r.GPU}
}
