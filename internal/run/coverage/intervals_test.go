package coverage_test

import (
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// TestIntervalsSetTimeToDetect: the time to detect follows the scrape and
// evaluation intervals as Prometheus' would. A fault starts just after a
// scrape and at an evaluation, so a GPU that falls off the bus is gone
// from the next scrape, the rule goes pending at the first evaluation
// that sees it, and fires at the first evaluation at least for: later
// (coverage once predicted 90 s with a 30 s scrape against a live loop
// that scraped every second).
func TestIntervalsSetTimeToDetect(t *testing.T) {
	t.Parallel()
	set := loadRules(t, map[string]string{"count.yaml": `groups:
- name: default-interval
  rules:
  - alert: GpuMissing
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP) < 8
    for: 1m
- name: own-interval
  interval: 20s
  rules:
  - alert: GpuMissingSlow
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP) < 8
    for: 1m
`})
	tests := []struct {
		name         string
		scrape, eval time.Duration
		// want is the time to detect of GpuMissing, wantOwn of
		// GpuMissingSlow, whose group sets its own interval.
		want, wantOwn float64
	}{
		{"defaults: 30s scrape, 15s evaluation", 0, 0, 30 + 60, 40 + 60},
		{"1s scrape as the live loop's", time.Second, 0, 15 + 60, 20 + 60},
		{"1s scrape, 1s evaluation", time.Second, time.Second, 1 + 60, 20 + 60},
		{"scrape not a multiple of the evaluation", 20 * time.Second, 15 * time.Second, 30 + 60, 20 + 60},
		{"for: not a multiple of the evaluation", 5 * time.Second, 25 * time.Second, 25 + 75, 20 + 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := twin.Default()
			spec.Exporter.ScrapeInterval = tt.scrape
			res := run(t, coverage.Options{Seed: 1, Spec: spec, EvalInterval: tt.eval, Detectors: []*probe.Detector{}, Rules: set,
				Faults: faults(t, "hardware.fallen-off-bus"), Window: 5 * time.Minute, Deadline: 5 * time.Minute})
			fr := res.Faults[0]
			for name, want := range map[string]float64{"GpuMissing": tt.want, "GpuMissingSlow": tt.wantOwn} {
				if c := fr.Cells[name]; c.TTDSeconds == nil || *c.TTDSeconds != want {
					t.Errorf("%s: cell %+v, want detected after %gs", name, c, want)
				}
			}
		})
	}
}
