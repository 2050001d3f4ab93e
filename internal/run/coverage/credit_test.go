package coverage_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
)

func faults(t testing.TB, ids ...string) []*catalog.Fault {
	t.Helper()
	var out []*catalog.Fault
	for _, id := range ids {
		f, ok := catalog.Lookup(id)
		if !ok {
			t.Fatalf("no fault %s", id)
		}
		out = append(out, f)
	}
	return out
}

func loadRules(t testing.TB, files map[string]string) *rules.Set {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(files[name]), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	set, err := rules.LoadFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestNoisyRuleGetsNoCredit: a rule that fires on the fault-free twin (a
// busy training job keeps GPU utilisation above 95 %) is noisy — it is not
// counted as the detector of any fault, and the report says how often it
// fired (observation 3 of scripts/coverage-observations).
func TestNoisyRuleGetsNoCredit(t *testing.T) {
	t.Parallel()
	set := loadRules(t, map[string]string{"busy.yaml": `groups:
- name: gpu
  rules:
  - alert: GpuBusy
    expr: DCGM_FI_DEV_GPU_UTIL > 95
    for: 2m
  - alert: GpuHot
    expr: DCGM_FI_DEV_GPU_TEMP > 80
`})
	res := run(t, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: set,
		Faults: faults(t, "hardware.xid", "workload.kill-rank", "hardware.thermal-throttle")})
	var noise *coverage.Noise
	for i, n := range res.Baseline.Noisy {
		if n.Detector == "GpuBusy" {
			noise = &res.Baseline.Noisy[i]
		}
	}
	if noise == nil || noise.Firings < 1 {
		t.Fatalf("baseline noise = %+v, want GpuBusy with its firings", res.Baseline.Noisy)
	}
	if !slices.Contains(res.Baseline.FalsePositives, "GpuBusy") {
		t.Errorf("false positives = %q, want GpuBusy", res.Baseline.FalsePositives)
	}
	for _, fr := range res.Faults {
		c := fr.Cells["GpuBusy"]
		if c.Detected || c.Verdict != coverage.Noisy || slices.Contains(fr.By, "GpuBusy") {
			t.Errorf("%s: GpuBusy cell %+v, by %q; want no credit, verdict noisy", fr.ID, c, fr.By)
		}
	}
	for _, c := range res.Matrix {
		if c.Detector == "GpuBusy" && c.Detected {
			t.Errorf("matrix credits GpuBusy with %s", c.Fault)
		}
	}
	for _, r := range res.Rules {
		switch r.Name {
		case "GpuBusy":
			if r.Status != coverage.Noisy || len(r.Detects) != 0 || r.Reason == "" {
				t.Errorf("GpuBusy report %+v, want status noisy, no detections, a reason", r)
			}
		case "GpuHot":
			if r.Status != "ok" || !slices.Contains(r.Detects, "hardware.thermal-throttle") {
				t.Errorf("GpuHot report %+v, want ok and thermal-throttle detected", r)
			}
		}
	}
}

// TestSameNamedRulesKeepTheirDetections: two files each define
// GPUHighTemperature, one that catches thermal throttling and one that
// reads a metric no exporter produces; each report's detects is its own
// (observation 7 of scripts/coverage-observations).
func TestSameNamedRulesKeepTheirDetections(t *testing.T) {
	t.Parallel()
	set := loadRules(t, map[string]string{
		"a.yaml": `groups:
- name: gpu
  rules:
  - alert: GPUHighTemperature
    expr: DCGM_FI_DEV_GPU_TEMP > 80
`,
		"b.yaml": `groups:
- name: gpu
  rules:
  - alert: GPUHighTemperature
    expr: nvidia_gpu_temperature_celsius > 80
`})
	res := run(t, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: set, Faults: faults(t, "hardware.thermal-throttle")})
	if len(res.Rules) != 2 {
		t.Fatalf("rules = %+v", res.Rules)
	}
	a, b := res.Rules[0], res.Rules[1]
	if !slices.Equal(a.Detects, []string{"hardware.thermal-throttle"}) {
		t.Errorf("a.yaml's rule detects %q, want hardware.thermal-throttle", a.Detects)
	}
	if b.Status != "never_fires" || len(b.Detects) != 0 {
		t.Errorf("b.yaml's rule: status %s, detects %q; want never_fires and nothing", b.Status, b.Detects)
	}
	if a.Detector == b.Detector || a.Detector == "" || b.Detector == "" {
		t.Errorf("matrix columns %q and %q, want two distinct", a.Detector, b.Detector)
	}
}

// TestAbsentOfUnknownStaysUnknown: absent() of a metric no exporter
// gpuchaos knows fires on the twin, which lacks that exporter; the rule
// stays unknown rather than noisy, its reason says how often it fired, and
// it gets no detection credit (as kuberay's public
// MissingMetricRayGlobalControlStore would otherwise get).
func TestAbsentOfUnknownStaysUnknown(t *testing.T) {
	t.Parallel()
	set := loadRules(t, map[string]string{"ray.yaml": `groups:
- name: ray
  rules:
  - alert: MissingRayMetric
    expr: absent(ray_gcs_update_resource_usage_time_bucket) == 1
    for: 5m
`})
	res := run(t, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: set, Faults: faults(t, "hardware.xid")})
	if !slices.Contains(res.Baseline.FalsePositives, "MissingRayMetric") {
		t.Errorf("false positives = %q, want MissingRayMetric (it fires on the twin)", res.Baseline.FalsePositives)
	}
	r := res.Rules[0]
	if r.Status != "unknown" || len(r.Detects) != 0 {
		t.Errorf("report: status %s, detects %q; want unknown and nothing", r.Status, r.Detects)
	}
	for _, s := range []string{"wherever that exporter is not scraped", "on the fault-free twin", "no detection credit"} {
		if !strings.Contains(r.Reason, s) {
			t.Errorf("reason %q does not say %q", r.Reason, s)
		}
	}
	for _, d := range res.Detectors {
		if d.Name == "MissingRayMetric" && (d.Status != "unknown" || d.Reason != r.Reason) {
			t.Errorf("column: status %s, reason %q; want the report's", d.Status, d.Reason)
		}
	}
	if c := res.Faults[0].Cells["MissingRayMetric"]; c.Detected {
		t.Errorf("cell %+v credits it", c)
	}
}
