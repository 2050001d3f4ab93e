package coverage_test

import (
	"slices"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/coverage"
	"github.com/gpuchaos/gpuchaos/internal/probe"
)

// TestHealthyTwinIsNotStuck: the twin's telemetry moves a little, scrape
// after scrape, as a real H200's does, so the public "GPU is down/stuck"
// rule over a reading that never changes stays quiet on the fault-free
// baseline (issue 14, observation 4).
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
// rule of the recommended pack fires on the fault-free baseline (issue 14,
// Done when).
func TestRecommendedPackQuietOnNoisyBaseline(t *testing.T) {
	t.Parallel()
	res := run(t, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: packs(t, "recommended"),
		Faults: faults(t, "hardware.thermal-throttle")})
	if fp := res.Baseline.FalsePositives; len(fp) != 0 {
		t.Errorf("recommended pack on the fault-free twin: false positives %q (noise %+v)", fp, res.Baseline.Noisy)
	}
}
