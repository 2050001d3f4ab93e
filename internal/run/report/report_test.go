package report_test

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
	"github.com/gpuchaos/gpuchaos/internal/run/report"
)

func fault(t *testing.T, id string) *catalog.Fault {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("no fault %q in the catalogue", id)
	}
	return f
}

func detectors(t *testing.T, names ...string) []*probe.Detector {
	t.Helper()
	var ds []*probe.Detector
	for _, n := range names {
		d, ok := probe.LookupDetector(n)
		if !ok {
			t.Fatalf("no detector %q", n)
		}
		ds = append(ds, d)
	}
	return ds
}

// outcome is one detector's result on a fault: a verdict and, when the
// detector noticed, the time it took.
type outcome struct {
	verdict string
	ttd     float64 // negative: not detected
}

var (
	miss    = outcome{engine.Missed, -1}
	errored = outcome{engine.Error, -1}
)

func pass(s float64) outcome { return outcome{engine.Pass, s} }
func late(s float64) outcome { return outcome{engine.Late, s} }

// faultResult assembles a fault's row the way coverage.Run does: cells in
// detector order, By in that order too, First the fastest.
func faultResult(f *catalog.Fault, ref inventory.Ref, job coverage.JobImpact, ds []*probe.Detector, outs ...outcome) *coverage.FaultResult {
	fr := &coverage.FaultResult{Fault: f, ID: f.ID, Target: ref, Job: job, Cells: map[string]coverage.Cell{}}
	for i, d := range ds {
		o := outs[i]
		c := coverage.Cell{Fault: f.ID, Detector: d.Name, Verdict: o.verdict}
		if o.ttd >= 0 {
			ttd := o.ttd
			c.TTDSeconds, c.Detected = &ttd, true
			fr.By = append(fr.By, d.Name)
			if fr.First == nil || ttd < *fr.First {
				fr.First = &ttd
			}
		}
		fr.Cells[d.Name] = c
	}
	return fr
}

func result(ds []*probe.Detector, baseline coverage.Baseline, frs ...*coverage.FaultResult) *coverage.Result {
	res := &coverage.Result{Detectors: coverage.Builtins(ds), Faults: frs, Baseline: baseline}
	for _, fr := range frs {
		for _, d := range ds {
			res.Matrix = append(res.Matrix, fr.Cells[d.Name])
		}
	}
	return res
}

var (
	gpu3  = inventory.Ref{Kind: catalog.ScopeGPU, Node: "gpu-node-0", GPU: 3}
	rank3 = inventory.Ref{Kind: catalog.ScopeRank, Job: "train", Rank: 3}
)

// sample is three catalogue faults against three detectors: one caught in
// time (by two detectors, one within a minute), one caught only late, one
// missed by all with a probe error.
func sample(t *testing.T) *coverage.Result {
	ds := detectors(t, "dcgm-xid-errors", "kmsg-xid", "dcgm-gpu-temp-high")
	return result(ds,
		coverage.Baseline{Job: coverage.JobImpact{Goodput: 0.98, LostGPUHours: 0.2}, FalsePositives: []string{"dcgm-gpu-temp-high"}},
		faultResult(fault(t, "hardware.xid"), gpu3, coverage.JobImpact{Goodput: 0.80, LostGPUHours: 2.0, Restarts: 1}, ds, pass(75), pass(15), miss),
		faultResult(fault(t, "hardware.thermal-throttle"), gpu3, coverage.JobImpact{Goodput: 0.90, LostGPUHours: 1.0}, ds, miss, miss, late(720)),
		faultResult(fault(t, "numa.remote-memory"), rank3, coverage.JobImpact{Goodput: 0.95, LostGPUHours: 0.5}, ds, miss, errored, miss),
	)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestNewCoverageDocSummary(t *testing.T) {
	t.Parallel()
	doc := report.NewCoverageDoc(sample(t))
	s := doc.Summary
	if s.Faults != 3 || s.Detected != 1 {
		t.Errorf("faults %d detected %d, want 3 and 1", s.Faults, s.Detected)
	}
	if !slices.Equal(s.Missed, []string{"numa.remote-memory"}) {
		t.Errorf("missed %q", s.Missed)
	}
	if !slices.Equal(s.Late, []string{"hardware.thermal-throttle"}) {
		t.Errorf("late %q", s.Late)
	}
	wantFam := map[catalog.Family]report.Family{
		catalog.FamilyHardware: {Faults: 2, Detected: 1},
		catalog.FamilyNUMA:     {Faults: 1, Detected: 0},
	}
	if len(s.ByFamily) != len(wantFam) {
		t.Errorf("by family %v, want %v", s.ByFamily, wantFam)
	}
	for f, want := range wantFam {
		if got := s.ByFamily[f]; got != want {
			t.Errorf("family %s: %+v, want %+v", f, got, want)
		}
	}
	if !near(s.Goodput, (0.80+0.90+0.95)/3) || !near(s.BaselineGoodput, 0.98) {
		t.Errorf("goodput %g (baseline %g)", s.Goodput, s.BaselineGoodput)
	}
	// Lost GPU-hours count only what each fault cost beyond the baseline.
	if !near(s.LostGPUHours, (2.0-0.2)+(1.0-0.2)+(0.5-0.2)) {
		t.Errorf("lost GPU-hours %g, want 2.9", s.LostGPUHours)
	}
	var ids []string
	for _, f := range doc.Faults {
		ids = append(ids, f.ID)
	}
	if !slices.Equal(ids, []string{"hardware.xid", "hardware.thermal-throttle", "numa.remote-memory"}) {
		t.Errorf("faults in order %q", ids)
	}
	if doc.Faults[0].Family != catalog.FamilyHardware || doc.Faults[0].Scope != catalog.ScopeGPU {
		t.Errorf("fault 0: family %q scope %q", doc.Faults[0].Family, doc.Faults[0].Scope)
	}
}

func TestNewCoverageDocEmpty(t *testing.T) {
	t.Parallel()
	doc := report.NewCoverageDoc(&coverage.Result{})
	if doc.Summary.Faults != 0 || doc.Summary.Goodput != 0 || math.IsNaN(doc.Summary.Goodput) {
		t.Errorf("summary of nothing: %+v", doc.Summary)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	// Scripts read these as lists; null would break `len()`.
	for _, want := range []string{`"missed":[]`, `"late":[]`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("JSON %s lacks %s", b, want)
		}
	}
}

func TestCoverageDocJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(report.NewCoverageDoc(sample(t)))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Faults []struct {
			ID         *string   `json:"id"`
			Family     *string   `json:"family"`
			DetectedBy *[]string `json:"detected_by"`
			Target     *struct {
				Node string `json:"node"`
			} `json:"target"`
		} `json:"faults"`
		Detectors []struct {
			Name *string `json:"name"`
			Rule string  `json:"rule"`
		} `json:"detectors"`
		Matrix  []map[string]json.RawMessage `json:"matrix"`
		Summary struct {
			Faults   int                                       `json:"faults"`
			Detected int                                       `json:"detected"`
			Missed   []string                                  `json:"missed"`
			ByFamily map[string]struct{ Faults, Detected int } `json:"by_family"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	wantFaults := [][2]string{{"hardware.xid", "hardware"}, {"hardware.thermal-throttle", "hardware"}, {"numa.remote-memory", "numa"}}
	if len(doc.Faults) != len(wantFaults) {
		t.Fatalf("%d faults, want %d", len(doc.Faults), len(wantFaults))
	}
	for i, f := range doc.Faults {
		if f.ID == nil || f.Family == nil || *f.ID != wantFaults[i][0] || *f.Family != wantFaults[i][1] {
			t.Errorf("fault %d: id %v family %v, want %q", i, f.ID, f.Family, wantFaults[i])
		}
		if f.Target == nil {
			t.Errorf("fault %d: no target", i)
		}
	}
	if got := doc.Faults[0].DetectedBy; got == nil || !slices.Equal(*got, []string{"dcgm-xid-errors", "kmsg-xid"}) {
		t.Errorf("detected_by %v", got)
	}
	var names []string
	for _, d := range doc.Detectors {
		if d.Name == nil || d.Rule == "" {
			t.Errorf("detector without name or rule: %+v", d)
			continue
		}
		names = append(names, *d.Name)
	}
	if !slices.Equal(names, []string{"dcgm-xid-errors", "kmsg-xid", "dcgm-gpu-temp-high"}) {
		t.Errorf("detectors %q", names)
	}
	if len(doc.Matrix) != 9 {
		t.Fatalf("%d matrix cells, want 9", len(doc.Matrix))
	}
	for i, c := range doc.Matrix {
		for _, k := range []string{"fault", "detector", "detected", "ttd_seconds"} {
			if _, ok := c[k]; !ok {
				t.Errorf("cell %d lacks %q: %v", i, k, c)
			}
		}
	}
	// Cell 1 is hardware.xid × kmsg-xid, caught in 15s; cell 2 is its
	// miss, whose time is null, not zero.
	if got := string(doc.Matrix[1]["ttd_seconds"]); got != "15" {
		t.Errorf("hardware.xid × kmsg-xid ttd_seconds = %s, want 15", got)
	}
	if got := string(doc.Matrix[2]["ttd_seconds"]); got != "null" {
		t.Errorf("missed cell ttd_seconds = %s, want null", got)
	}
	if doc.Summary.Faults != 3 || doc.Summary.Detected != 1 || !slices.Equal(doc.Summary.Missed, []string{"numa.remote-memory"}) {
		t.Errorf("summary %+v", doc.Summary)
	}
	if doc.Summary.ByFamily["hardware"].Faults != 2 || doc.Summary.ByFamily["numa"].Faults != 1 {
		t.Errorf("by_family %+v", doc.Summary.ByFamily)
	}
}

func TestCoverageTable(t *testing.T) {
	t.Parallel()
	ds := detectors(t, "dcgm-xid-errors", "kmsg-xid", "dcgm-gpu-temp-high")
	five := detectors(t, "dcgm-xid-errors", "kmsg-xid", "dcgm-gpu-temp-high", "job-down", "job-step-stall")
	none := coverage.Baseline{Job: coverage.JobImpact{Goodput: 1}, FalsePositives: []string{}}
	tests := []struct {
		name string
		res  *coverage.Result
		// rows are the substrings each table row holds, in order.
		rows   [][]string
		lines  []string // whole lines of the summary
		absent []string // text the output must not have
	}{
		{
			name: "sample",
			res:  sample(t),
			rows: [][]string{
				{"hardware.xid", "gpu-node-0/gpu3", "kmsg-xid 15s, dcgm-xid-errors 75s", "0.80", "1.8"},
				{"hardware.thermal-throttle", "gpu-node-0/gpu3", "dcgm-gpu-temp-high 12.0m (late)", "0.90", "0.8"},
				{"numa.remote-memory", "train/rank3", "MISSED by all 3 detectors", "0.95", "0.3"},
			},
			lines: []string{
				"Detected within the deadline: 1 of 3 faults (1 late, 1 missed).",
				"By family: hardware 1/2, numa 0/1.",
				"Missed (nothing noticed): numa.remote-memory.",
				"Late (noticed after the deadline only): hardware.thermal-throttle.",
				"False positives on the fault-free twin (no detection credit): dcgm-gpu-temp-high.",
				"Goodput: 0.980 fault-free; 0.883 on average under a fault; 2.9 GPU-hours lost to faults beyond the baseline.",
			},
			absent: []string{"Detectors that never fired"},
		},
		{
			name: "nothing detected",
			res:  result(ds, none, faultResult(fault(t, "numa.remote-memory"), rank3, coverage.JobImpact{Goodput: 0.95}, ds, miss, miss, miss)),
			rows: [][]string{{"numa.remote-memory", "train/rank3", "MISSED by all 3 detectors"}},
			lines: []string{
				"Detected within the deadline: 0 of 1 faults (0 late, 1 missed).",
				"By family: numa 0/1.",
				"Detectors that never fired: dcgm-xid-errors, kmsg-xid, dcgm-gpu-temp-high.",
			},
			absent: []string{"Late (", "False positives"},
		},
		{
			// Observation 12 of scripts/coverage-observations: no "all 0
			// detectors", no "-0.0".
			name: "no detector judged, a cost a hair under the baseline's",
			res: result(nil, coverage.Baseline{Job: coverage.JobImpact{Goodput: 0.99, LostGPUHours: 0.32}, FalsePositives: []string{}},
				faultResult(fault(t, "numa.remote-memory"), rank3, coverage.JobImpact{Goodput: 0.99, LostGPUHours: 0.3}, nil)),
			rows:   [][]string{{"numa.remote-memory", "train/rank3", "MISSED: no detector judged (no alert rule, no built-in)", "0.99", " 0.0"}},
			lines:  []string{"Goodput: 0.990 fault-free; 0.990 on average under a fault; 0.0 GPU-hours lost to faults beyond the baseline."},
			absent: []string{"-0.0", "all 0"},
		},
		{
			name: "one detector",
			res:  result(ds[:1], none, faultResult(fault(t, "numa.remote-memory"), rank3, coverage.JobImpact{Goodput: 0.95}, ds[:1], miss)),
			rows: [][]string{{"numa.remote-memory", "train/rank3", "MISSED by the only detector"}},
		},
		{
			// Observation 3 of scripts/coverage-observations: the report
			// says how often a noisy detector fired, and does not call it
			// silent.
			name: "noisy detector",
			res: result(ds, coverage.Baseline{Job: coverage.JobImpact{Goodput: 1}, FalsePositives: []string{"dcgm-gpu-temp-high"},
				Noisy: []coverage.Noise{{Detector: "dcgm-gpu-temp-high", Firings: 4, Seconds: 1800}}},
				faultResult(fault(t, "numa.remote-memory"), rank3, coverage.JobImpact{Goodput: 0.95}, ds, miss, miss, miss)),
			rows: [][]string{{"numa.remote-memory", "MISSED by all 3 detectors"}},
			lines: []string{
				"Detectors that never fired: dcgm-xid-errors, kmsg-xid.",
				"False positives on the fault-free twin (no detection credit): dcgm-gpu-temp-high (fired 4 times in 30m).",
			},
		},
		{
			// Observation 12 of scripts/coverage-observations: a recording
			// rule never produces.
			name: "rules that never fire and records that never produce",
			res: func() *coverage.Result {
				r := result(nil, none, faultResult(fault(t, "numa.remote-memory"), rank3, coverage.JobImpact{Goodput: 0.95}, nil))
				r.Rules = []coverage.RuleReport{
					{Name: "GpuDbe", Kind: "alert", Source: "a.yaml:4", Status: "never_fires", Reason: "GpuDbe reads x"},
					{Name: "gpu:dbe:rate5m", Kind: "record", Source: "a.yaml:8", Status: "never_fires", Reason: "gpu:dbe:rate5m never produces a series: it reads x"},
				}
				return r
			}(),
			rows: [][]string{{"numa.remote-memory", "MISSED: no detector judged"}},
			lines: []string{
				"Rules that can never fire (1 of 2):",
				"  GpuDbe (a.yaml:4): GpuDbe reads x",
				"Recording rules that can never produce a series (1 of 2):",
				"  gpu:dbe:rate5m (a.yaml:8): gpu:dbe:rate5m never produces a series: it reads x",
			},
		},
		{
			name: "more than three detectors are summarised",
			res:  result(five, none, faultResult(fault(t, "hardware.xid"), gpu3, coverage.JobImpact{Goodput: 0.5}, five, pass(40), pass(20), pass(30), pass(50), late(900))),
			rows: [][]string{{"hardware.xid", "kmsg-xid 20s, dcgm-gpu-temp-high 30s, dcgm-xid-errors 40s, +2 more"}},
			lines: []string{
				"Detected within the deadline: 1 of 1 faults (0 late, 0 missed).",
				"By family: hardware 1/1.",
			},
			absent: []string{"MISSED", "Missed (", "Late (", "never fired", "job-down"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			if err := report.CoverageTable(&buf, tt.res); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			lines := strings.Split(out, "\n")
			if !strings.HasPrefix(lines[0], "FAULT") || !strings.Contains(lines[0], "DETECTED BY") {
				t.Errorf("header %q", lines[0])
			}
			for i, want := range tt.rows {
				if i+1 >= len(lines) {
					t.Fatalf("no row %d in\n%s", i, out)
				}
				fields := strings.Fields(lines[i+1])
				if len(fields) == 0 || fields[0] != want[0] {
					t.Errorf("row %d = %q, want fault %s", i, lines[i+1], want[0])
				}
				for _, w := range want[1:] {
					if !strings.Contains(lines[i+1], w) {
						t.Errorf("row %d = %q, lacks %q", i, lines[i+1], w)
					}
				}
			}
			if got := lines[len(tt.rows)+1]; got != "" {
				t.Errorf("line after the rows = %q, want a blank line", got)
			}
			for _, want := range tt.lines {
				if !slices.Contains(lines, want) {
					t.Errorf("no line %q in\n%s", want, out)
				}
			}
			for _, no := range tt.absent {
				if strings.Contains(out, no) {
					t.Errorf("output has %q:\n%s", no, out)
				}
			}
		})
	}
}

// TestCoverageJSONStreams holds the streamed document to what a json.Encoder
// with two-space indentation writes, for a full result, an empty one and
// one whose text holds the matrix key inside a string.
func TestCoverageJSONStreams(t *testing.T) {
	t.Parallel()
	tricky := sample(t)
	tricky.Rules = append(tricky.Rules, coverage.RuleReport{Name: "R", Reason: "\n  \"matrix\": null <&>"})
	tests := []struct {
		name string
		res  *coverage.Result
	}{
		{"sample", sample(t)},
		{"empty", &coverage.Result{}},
		{"matrix key in a string", tricky},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var want, got bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetIndent("", "  ")
			if err := enc.Encode(report.NewCoverageDoc(tt.res)); err != nil {
				t.Fatal(err)
			}
			if err := report.CoverageJSON(&got, tt.res); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Errorf("streamed:\n%s\nwant:\n%s", got.String(), want.String())
			}
		})
	}
}
