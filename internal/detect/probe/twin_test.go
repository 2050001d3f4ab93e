package probe_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// TestDetectorProbesMatchEvaluate runs the built-in detectors two ways on
// one twin run: as the probes an experiment's `detector:` builds, polled
// every evaluation step as the engine polls them, and as coverage judges
// them, one promeval.Evaluate of their rule file over the run. Each must
// first hold at the poll where Evaluate first has it firing.
func TestDetectorProbesMatchEvaluate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault string
		rank  bool
	}{
		{"hardware.thermal-throttle", false},
		{"hardware.fallen-off-bus", false},
		{"hardware.power-brake", false},
		{"workload.straggler", true},
		{"workload.kill-rank", true},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tw, err := twin.New(twin.Options{Seed: 1, Retention: -1})
			if err != nil {
				t.Fatal(err)
			}
			start := tw.Now()
			if err := tw.Sleep(ctx, 20*time.Minute); err != nil {
				t.Fatal(err)
			}
			var probes []probe.Probe
			for _, d := range probe.Detectors() {
				if d.AlertRule() != nil {
					probes = append(probes, d.Probe(tw))
				}
			}
			first := map[string]time.Time{}
			poll := func() {
				for _, p := range probes {
					obs, err := p.Observe(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if _, seen := first[p.Name()]; obs.Holds && !seen {
						first[p.Name()] = tw.Now()
					}
				}
			}
			// The engine's check at injection, then a poll every step.
			poll()
			injected := tw.Now()
			injectFault(t, tw, tc.fault, tc.rank)
			for range 12 * time.Minute / probe.EvalInterval {
				if err := tw.Sleep(ctx, probe.EvalInterval); err != nil {
					t.Fatal(err)
				}
				poll()
			}
			res, err := promeval.Evaluate(ctx, probe.DetectorRules(), tw, start, tw.Now(), promeval.Options{})
			if err != nil {
				t.Fatal(err)
			}
			fired := 0
			for _, d := range probe.Detectors() {
				r := d.AlertRule()
				if r == nil {
					continue
				}
				want, ok := res.FirstFiring(r, injected, nil)
				got, held := first[d.Name]
				if ok != held || ok && !got.Equal(want) {
					t.Errorf("%s: probe first held at %v (%v), Evaluate has it firing from %v (%v)", d.Name, got.Sub(injected), held, want.Sub(injected), ok)
				}
				if held {
					fired++
				}
			}
			if fired == 0 {
				t.Error("no detector fired: the comparison proved nothing")
			}
		})
	}
}

// injectFault applies a catalogue fault with its defaults to GPU 3 of the
// first node, or to rank 3 of the first job, as the engine's twin
// injector does.
func injectFault(t *testing.T, tw *twin.Twin, id string, rank bool) {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("no fault %s", id)
	}
	inv := tw.Inventory()
	n := inv.Nodes[0]
	g := n.GPUs[3]
	ref := inventory.Ref{Kind: catalog.ScopeGPU, Node: n.Name, GPU: g.Index, UUID: g.UUID, PCI: g.PCI}
	if rank {
		j := inv.Jobs[0]
		r := j.Ranks[3]
		ref = inventory.Ref{Kind: catalog.ScopeRank, Job: j.Name, Rank: r.Rank, Node: r.Node, GPU: r.GPU}
	}
	values, err := f.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Apply(id, ref, f.Signature.Effects(values)); err != nil {
		t.Fatal(err)
	}
}
