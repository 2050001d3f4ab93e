package coverage_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

func packs(t testing.TB, names ...string) *rules.Set {
	t.Helper()
	set := &rules.Set{}
	for _, n := range names {
		p, err := rules.Pack(n)
		if err != nil {
			t.Fatal(err)
		}
		set.Rules = append(set.Rules, p.Rules...)
	}
	return set
}

// TestTypicalPackCoverage is the acceptance check of rule coverage on the
// real PromQL engine: the seed's rule can never fire and says why; the
// typical pack misses the silent faults; every fault it misses gets a
// recommended rule or a reason.
func TestTypicalPackCoverage(t *testing.T) {
	res := run(t, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: packs(t, "seed", "typical"), Recommended: packs(t, "recommended")})
	var seed *coverage.RuleReport
	for i, r := range res.Rules {
		if r.Name == "GPUThrottlingDetected" {
			seed = &res.Rules[i]
		}
	}
	if seed == nil || seed.Status != "never_fires" || !strings.Contains(seed.Reason, "nvidia_gpu_temperature") || len(seed.Detects) != 0 {
		t.Fatalf("seed rule report: %+v", seed)
	}
	caught := map[string]bool{}
	for _, fr := range res.Faults {
		for _, c := range fr.Cells {
			if c.Verdict == "pass" {
				caught[fr.ID] = true
			}
		}
	}
	for _, id := range []string{"numa.remote-memory", "numa.wrong-affinity", "nccl.p2p-off", "nccl.socket-fallback", "hardware.fallen-off-bus"} {
		if caught[id] {
			t.Errorf("the typical pack caught %s; it reads no metric that moves", id)
		}
	}
	for _, id := range []string{"hardware.xid", "hardware.thermal-throttle"} {
		if !caught[id] {
			t.Errorf("the typical pack missed %s", id)
		}
	}
	suggested := map[string]coverage.Suggestion{}
	for _, s := range res.Suggestions {
		suggested[s.Fault] = s
	}
	for _, fr := range res.Faults {
		if caught[fr.ID] {
			if _, ok := suggested[fr.ID]; ok {
				t.Errorf("suggestion for %s, which a rule caught", fr.ID)
			}
			continue
		}
		s, ok := suggested[fr.ID]
		if !ok || s.Rule == "" && s.Note == "" {
			t.Errorf("no suggestion or reason for missed fault %s", fr.ID)
		}
	}
	for _, id := range []string{"hardware.fallen-off-bus", "workload.hang-rank", "workload.straggler", "nccl.socket-fallback"} {
		if s := suggested[id]; s.Rule == "" || !s.Verified || s.TTDSeconds <= 0 || s.TTDSeconds > 600 {
			t.Errorf("%s: suggestion %+v, want a verified rule within the deadline", id, s)
		}
	}
	if fp := res.Baseline.FalsePositives; len(fp) != 0 {
		t.Errorf("typical pack fires on the fault-free twin: %v", fp)
	}
}

// TestSuggestionsHoldUp checks every suggested rule independently of
// coverage's own bookkeeping: re-run its fault on a fresh twin and evaluate
// the recommended pack with the real engine (it must fire for the faulted
// target within the deadline), and evaluate it over a fault-free hour (it
// must stay silent).
func TestSuggestionsHoldUp(t *testing.T) {
	rec := packs(t, "recommended")
	res := run(t, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: packs(t, "typical"), Recommended: rec})
	ctx := context.Background()

	clean, err := twin.New(twin.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	start := clean.Now()
	if err := clean.Sleep(ctx, 80*time.Minute); err != nil {
		t.Fatal(err)
	}
	quiet, err := promeval.Evaluate(ctx, rec, clean, start, clean.Now(), promeval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range res.Suggestions {
		if s.Rule == "" {
			continue
		}
		n++
		rule := rec.Lookup(s.Rule)
		if len(rule) != 1 {
			t.Fatalf("%s: suggested rule %q not in the recommended pack", s.Fault, s.Rule)
		}
		if at, ok := quiet.FirstFiring(rule[0], start.Add(20*time.Minute), nil); ok {
			t.Errorf("%s fires on the fault-free twin at %s", s.Rule, at)
		}
		f, _ := catalog.Lookup(s.Fault)
		again := run(t, coverage.Options{Seed: 1, Faults: []*catalog.Fault{f}, Detectors: []*probe.Detector{}, Rules: rec})
		c := again.Faults[0].Cells[s.Rule]
		if c.Verdict != "pass" || c.TTDSeconds == nil || *c.TTDSeconds != s.TTDSeconds {
			t.Errorf("%s: %s on a re-run: %+v, want pass after %.0fs", s.Fault, s.Rule, c, s.TTDSeconds)
		}
	}
	if n < 10 {
		t.Errorf("only %d suggestions with a rule", n)
	}
}

// BenchmarkCatalogue50Rules is the speed target of a coverage run: the whole
// catalogue on the demo twin against 50 rules (the three bundled packs plus
// the typical pack again as a second team's copy, cut at 50), every rule
// evaluated with the real PromQL engine. No suggestions.
func BenchmarkCatalogue50Rules(b *testing.B) {
	set := packs(b, "seed", "typical", "recommended", "typical")
	if n := len(set.Rules); n < 50 {
		b.Fatalf("%d rules, want at least 50", n)
	}
	set.Rules = set.Rules[:50]
	for b.Loop() {
		run(b, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: set})
	}
}

// TestTwinExportsWhatAnalysisCounts holds the invariant that lets coverage
// skip never-firing rules at evaluation: every metric the twin exports, with
// or without opt-in counters, is one the static analysis counts as present
// under the same opt-ins. A twin metric the analysis calls absent would make
// a rule "never fire" that fires on the twin.
func TestTwinExportsWhatAnalysisCounts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		optIn []string
	}{
		{"defaults", nil},
		{"every opt-in counter", twin.OptInCounters()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := twin.Default()
			spec.Exporter.OptIn = tt.optIn
			tw, err := twin.New(twin.Options{Spec: spec, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			var doc strings.Builder
			doc.WriteString("groups:\n- name: g\n  rules:\n")
			seen := map[string]bool{}
			for _, s := range tw.Series() {
				if !seen[s.Metric] {
					seen[s.Metric] = true
					fmt.Fprintf(&doc, "  - record: read:%d\n    expr: %s\n", len(seen), s.Metric)
				}
			}
			set, err := rules.Load([]byte(doc.String()), "twin.yaml")
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range rules.Analyze(set, rules.AnalyzeOptions{OptIn: tt.optIn}) {
				if a.Status != rules.StatusOK || a.Reason != "" {
					t.Errorf("the twin exports %s, the analysis says %s: %s", a.Rule.Expr, a.Status, a.Reason)
				}
			}
		})
	}
}
