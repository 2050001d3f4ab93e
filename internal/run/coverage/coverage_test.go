package coverage_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func run(t testing.TB, opts coverage.Options) *coverage.Result {
	t.Helper()
	res, err := coverage.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestCatalogueMatrix runs the whole catalogue, as the demo does, and checks
// what a GPU operator would expect of it, fault by fault.
func TestCatalogueMatrix(t *testing.T) {
	res := run(t, coverage.Options{Seed: 1})
	if got, want := len(res.Matrix), len(catalog.All())*len(probe.Detectors()); got != want {
		t.Fatalf("matrix has %d cells, want %d", got, want)
	}
	if fp := res.Baseline.FalsePositives; len(fp) != 0 {
		t.Errorf("detectors fired on the fault-free twin: %v", fp)
	}
	if g := res.Baseline.Job.Goodput; g < 0.95 {
		t.Errorf("fault-free goodput %.3f, want >= 0.95", g)
	}
	byID := map[string]*coverage.FaultResult{}
	families := map[catalog.Family]bool{}
	for _, fr := range res.Faults {
		byID[fr.ID] = fr
		families[fr.Fault.Family] = true
		if fr.Error != "" {
			t.Errorf("%s: run error %s", fr.ID, fr.Error)
		}
	}
	for _, f := range catalog.Families() {
		if !families[f] {
			t.Errorf("family %s missing from the matrix", f)
		}
	}
	tests := []struct {
		fault string
		// pass must detect within the deadline; never must not fire at all.
		pass, never []string
		// maxGoodput bounds the job's goodput under the fault.
		maxGoodput float64
	}{
		{"hardware.fallen-off-bus", []string{"kmsg-xid", "job-down", "node-gpu-capacity-drop"}, []string{"dcgm-gpu-temp-high", "dcgm-ecc-dbe"}, 0.5},
		{"hardware.xid", []string{"kmsg-xid", "dcgm-xid-errors", "job-restarted"}, []string{"dcgm-gpu-missing"}, 0.8},
		{"hardware.thermal-throttle", []string{"dcgm-gpu-temp-high", "dcgm-sm-clock-throttled"}, []string{"kmsg-xid", "job-down"}, 1},
		// DBE errors reach the kernel log and crash the job, but the rule
		// on the opt-in ECC counter stays silent: that counter is off.
		{"hardware.ecc-dbe", []string{"kmsg-xid", "job-down"}, []string{"dcgm-ecc-dbe"}, 0.8},
		{"hardware.row-remap-failure", []string{"dcgm-row-remap-failure"}, nil, 1},
		{"hardware.nvlink-down", []string{"dcgm-nvlink-bandwidth-drop"}, nil, 1},
		{"exhaustion.pcie", []string{"dcgm-pcie-saturated"}, nil, 1},
		{"workload.hang-rank", []string{"job-step-stall"}, []string{"kmsg-xid"}, 0.2},
		{"workload.straggler", []string{"job-straggler"}, []string{"job-down"}, 0.95},
		{"workload.cordon-drain", []string{"node-unschedulable"}, nil, 0.5},
		{"workload.device-plugin-kill", []string{"node-gpu-capacity-drop"}, nil, 1},
		{"checkpoint.fill-volume", []string{"checkpoint-failures"}, []string{"job-down"}, 1},
		{"checkpoint.kill-writer", []string{"job-restarted"}, nil, 0.8},
		{"nccl.socket-fallback", nil, nil, 0.5},
		{"network.partition", []string{"job-step-stall"}, nil, 0.2},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			fr := byID[tt.fault]
			if fr == nil {
				t.Fatal("not in the matrix")
			}
			for _, d := range tt.pass {
				if c := fr.Cells[d]; c.Verdict != "pass" {
					t.Errorf("%s: verdict %q, want pass", d, c.Verdict)
				}
			}
			for _, d := range tt.never {
				if c := fr.Cells[d]; c.Detected {
					t.Errorf("%s fired after %.0fs; it should not see this fault", d, *c.TTDSeconds)
				}
			}
			if fr.Job.Goodput > tt.maxGoodput {
				t.Errorf("goodput %.3f under the fault, want <= %.2f", fr.Job.Goodput, tt.maxGoodput)
			}
		})
	}
	builtinGolden(t, res)
	// NUMA misplacement is the silent kind: it slows the job, and no GPU
	// metric rule notices.
	for _, fr := range res.Faults {
		if fr.Fault.Family != catalog.FamilyNUMA {
			continue
		}
		for _, d := range fr.By {
			if strings.HasPrefix(d, "dcgm-") {
				t.Errorf("%s detected by GPU metric rule %s; NUMA faults change no GPU metric", fr.ID, d)
			}
		}
		if fr.Job.Goodput >= res.Baseline.Job.Goodput {
			t.Errorf("%s: goodput %.3f not below the baseline %.3f", fr.ID, fr.Job.Goodput, res.Baseline.Job.Goodput)
		}
	}
}

// TestDeterministicAcrossParallelism checks that the matrix depends on the
// seed only, not on how many twins ran at once.
func TestDeterministicAcrossParallelism(t *testing.T) {
	var faults []*catalog.Fault
	for _, id := range []string{"hardware.xid", "numa.remote-memory", "workload.hang-rank"} {
		f, _ := catalog.Lookup(id)
		faults = append(faults, f)
	}
	a, _ := json.Marshal(run(t, coverage.Options{Seed: 3, Faults: faults, Parallel: 1}).Matrix)
	b, _ := json.Marshal(run(t, coverage.Options{Seed: 3, Faults: faults, Parallel: 3}).Matrix)
	if string(a) != string(b) {
		t.Error("matrix differs between 1 and 3 parallel twins")
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := coverage.Run(ctx, coverage.Options{Seed: 1}); err == nil {
		t.Fatal("a cancelled run returned no error")
	}
}

// BenchmarkDemo is the demo's work: the whole catalogue against every
// built-in detector, plus the fault-free baseline.
func BenchmarkDemo(b *testing.B) {
	for b.Loop() {
		run(b, coverage.Options{Seed: 1})
	}
}

// builtinGolden pins every built-in detector's cell of the catalogue
// (verdict and time to detect) to testdata/builtin-cells.golden, so that a
// change to a detector's rule, to the PromQL evaluation or to the twin
// shows as a diff of cells. Refresh with go test ./internal/run/coverage -run
// TestCatalogueMatrix -update, and say in the commit why cells moved.
func builtinGolden(t *testing.T, res *coverage.Result) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# fault detector verdict ttd_seconds (- when not detected); written by TestCatalogueMatrix -update\n")
	for _, c := range res.Matrix {
		ttd := "-"
		if c.TTDSeconds != nil {
			ttd = fmt.Sprintf("%g", *c.TTDSeconds)
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", c.Fault, c.Detector, c.Verdict, ttd)
	}
	const file = "testdata/builtin-cells.golden"
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	got := strings.Split(b.String(), "\n")
	for i, w := range strings.Split(string(want), "\n") {
		if i >= len(got) {
			t.Errorf("cell missing: %s", w)
			continue
		}
		if got[i] != w {
			t.Errorf("cell changed: %q, golden %q", got[i], w)
		}
	}
	if n := len(strings.Split(string(want), "\n")); len(got) > n {
		t.Errorf("%d cells more than the golden file", len(got)-n)
	}
}
