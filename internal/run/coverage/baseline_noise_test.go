package coverage_test

import (
	"slices"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
)

// TestHealthyTwinIsNotStuck: the twin's telemetry moves a little, scrape
// after scrape, as a real H200's does, so the public "GPU is down/stuck"
// rule over a reading that never changes stays quiet on the fault-free
// baseline (observation 4 of scripts/coverage-observations).
func TestHealthyTwinIsNotStuck(t *testing.T) {
	t.Parallel()
	set := loadRules(t, map[string]string{"stuck.yaml": `groups:
- name: gpu
  rules:
  - alert: GpuStuck
    expr: stddev_over_time(DCGM_FI_DEV_POWER_USAGE[15m]) == 0
  - alert: GpuUtilStuck
    expr: stddev_over_time(DCGM_FI_DEV_GPU_UTIL[15m]) == 0 and DCGM_FI_DEV_GPU_UTIL > 0
`})
	res := run(t, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: set, Faults: faults(t, "hardware.xid")})
	for _, name := range []string{"GpuStuck", "GpuUtilStuck"} {
		if slices.Contains(res.Baseline.FalsePositives, name) {
			t.Errorf("%s fires on the fault-free twin (baseline noise %+v)", name, res.Baseline.Noisy)
		}
	}
}

// TestRecommendedPackQuietOnNoisyBaseline: with telemetry noise on, no
// rule of the recommended pack fires on the fault-free baseline: a pack we
// recommend must not page a healthy fleet.
func TestRecommendedPackQuietOnNoisyBaseline(t *testing.T) {
	t.Parallel()
	res := run(t, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: packs(t, "recommended"),
		Faults: faults(t, "hardware.thermal-throttle")})
	if fp := res.Baseline.FalsePositives; len(fp) != 0 {
		t.Errorf("recommended pack on the fault-free twin: false positives %q (noise %+v)", fp, res.Baseline.Noisy)
	}
}

// TestLaunchRuleIsNoisy: the fault-free baseline relaunches its job once,
// as a healthy fleet does every day, so a rule that pages on the memory a
// launch allocates is noisy and no fault's detector (observation 9 of
// scripts/coverage-observations).
func TestLaunchRuleIsNoisy(t *testing.T) {
	t.Parallel()
	set := loadRules(t, map[string]string{"alloc.yaml": `groups:
- name: gpu
  rules:
  - alert: GpuMemoryGrowing
    expr: deriv(DCGM_FI_DEV_FB_USED[2m]) > 512
`})
	res := run(t, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: set,
		Faults: faults(t, "hardware.xid", "workload.kill-rank")})
	if !slices.Contains(res.Baseline.FalsePositives, "GpuMemoryGrowing") {
		t.Fatalf("false positives = %q, want GpuMemoryGrowing (it fires at every launch)", res.Baseline.FalsePositives)
	}
	for _, fr := range res.Faults {
		if c := fr.Cells["GpuMemoryGrowing"]; c.Detected || c.Verdict != coverage.Noisy || slices.Contains(fr.By, "GpuMemoryGrowing") {
			t.Errorf("%s: GpuMemoryGrowing cell %+v, by %q; want no credit, verdict noisy", fr.ID, c, fr.By)
		}
	}
	if r := res.Baseline.Job.Restarts; r != 0 {
		t.Errorf("baseline job restarts = %d, want 0: a clean relaunch is not a crash", r)
	}
}
