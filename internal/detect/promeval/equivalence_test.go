package promeval_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// equivalenceRules exercise what could make a range query differ from
// instant queries: records read within a group, from another group (in
// both directions), from a group with another interval, records that
// vanish (staleness markers), for, keep_firing_for, offset, subqueries
// and @ end(), which is the evaluation time in a rule but the range's end
// in a range query (SameAsAtEnd fires for every GPU at every evaluation).
const equivalenceRules = `
groups:
- name: alerts
  rules:
  - alert: GPUMissing
    expr: node:dcgm_gpus:count < 8
    for: 1m
    keep_firing_for: 2m
  - alert: GPUMissingSlow
    expr: node:dcgm_gpus:count:1m < 8
    for: 2m
  - alert: BusyGPUGone
    expr: absent(gpu:busy{gpu="3", Hostname="gpu-node-0"})
  - alert: ClockDrop
    expr: gpu:sm_clock:avg2m < 0.9 * avg_over_time(DCGM_FI_DEV_SM_CLOCK[5m] offset 15m)
    for: 45s
  - alert: TempRising
    expr: max_over_time(deriv(DCGM_FI_DEV_GPU_TEMP[2m])[5m:]) > 0.05
    labels:
      severity: warning
  - alert: SameAsAtEnd
    expr: DCGM_FI_DEV_GPU_TEMP - DCGM_FI_DEV_GPU_TEMP @ end() == 0
- name: records
  rules:
  - record: node:dcgm_gpus:count
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)
  - record: gpu:busy
    expr: DCGM_FI_DEV_GPU_UTIL > 50
  - record: gpu:sm_clock:avg2m
    expr: avg_over_time(DCGM_FI_DEV_SM_CLOCK[2m])
  - record: node:busy:count
    expr: count by (Hostname) (gpu:busy)
    labels:
      source: recorded
- name: slow
  interval: 1m
  rules:
  - record: node:dcgm_gpus:count:1m
    expr: node:dcgm_gpus:count
  - alert: NodeIdle
    expr: absent(node:busy:count{Hostname="gpu-node-1"})
    for: 2m
`

// TestRangeMatchesInstant proves the range-query path equal to evaluating
// every rule by instant queries timestamp by timestamp, as Prometheus'
// rule manager does: same alerts at the same times, same recorded samples.
func TestRangeMatchesInstant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, fault string
		params      map[string]string
		// stale: a recorded series must vanish and come back.
		stale bool
	}{
		{"fallen off the bus", "hardware.fallen-off-bus", nil, true},
		{"power brake", "hardware.power-brake", nil, false},
		{"xid 13", "hardware.xid", map[string]string{"code": "13"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tw := newTwin(t)
			t0 := tw.Now()
			inject(t, tw, tc.fault, tc.params, gpuRef(t, tw, 3))
			if err := tw.Sleep(ctx, 10*time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := tw.Revert(tc.fault); err != nil {
				t.Fatal(err)
			}
			if err := tw.Sleep(ctx, 10*time.Minute); err != nil {
				t.Fatal(err)
			}
			set := load(t, equivalenceRules)
			// Start off the 1m grid, so the groups start at different
			// times.
			start, end := t0.Add(-warmUp+20*time.Second), tw.Now()
			fast, err := promeval.Evaluate(ctx, set, tw, start, end, promeval.Options{})
			if err != nil {
				t.Fatal(err)
			}
			slow, err := promeval.EvaluateStepByStep(ctx, set, tw, start, end, promeval.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(fast.Errors)+len(slow.Errors) > 0 {
				t.Fatalf("rule errors: range %v, instant %v", fast.Errors, slow.Errors)
			}
			if len(fast.Alerts) == 0 {
				t.Fatal("no alert at all: the comparison proves nothing")
			}
			compareAlerts(t, fast.Alerts, slow.Alerts)
			fired := map[string]int{}
			for _, a := range fast.Alerts {
				fired[a.Rule.Name]++
			}
			t.Logf("alerts by rule: %v", fired)
			if stale := compareRecorded(t, fast.Recorded, slow.Recorded); tc.stale && stale == 0 {
				t.Error("no staleness marker in the recorded series: the case proves less than it should")
			}
		})
	}
}

func compareAlerts(t *testing.T, fast, slow []*promeval.Alert) {
	t.Helper()
	if len(fast) != len(slow) {
		t.Errorf("range path: %d alerts, instant path: %d", len(fast), len(slow))
	}
	for i := 0; i < min(len(fast), len(slow)); i++ {
		f, s := fast[i], slow[i]
		if f.Rule != s.Rule || f.Labels.String() != s.Labels.String() || !f.ActiveAt.Equal(s.ActiveAt) || !sameIntervals(f.Firing, s.Firing) {
			t.Errorf("alert %d:\n range   %s %s active %s firing %v\n instant %s %s active %s firing %v",
				i, f.Rule.Name, f.Labels, f.ActiveAt, f.Firing, s.Rule.Name, s.Labels, s.ActiveAt, s.Firing)
		}
	}
}

func sameIntervals(a, b []promeval.Interval) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].From.Equal(b[i].From) || !a[i].To.Equal(b[i].To) {
			return false
		}
	}
	return true
}

// compareRecorded reports differences and returns how many staleness
// markers the series hold.
func compareRecorded(t *testing.T, fast, slow map[string][]*series.Series) int {
	t.Helper()
	if len(fast) != len(slow) {
		t.Errorf("range path recorded %d names, instant path %d", len(fast), len(slow))
	}
	stale := 0
	for name, fs := range fast {
		ss := slow[name]
		if len(fs) != len(ss) {
			t.Errorf("%s: range path %d series, instant path %d", name, len(fs), len(ss))
			continue
		}
		for i := range fs {
			if fs[i].LabelKey() != ss[i].LabelKey() || len(fs[i].Samples) != len(ss[i].Samples) {
				t.Errorf("%s: series %d: range %s (%d samples), instant %s (%d samples)", name, i, fs[i].LabelKey(), len(fs[i].Samples), ss[i].LabelKey(), len(ss[i].Samples))
				continue
			}
			for j, a := range fs[i].Samples {
				b := ss[i].Samples[j]
				if series.IsStale(a.V) {
					stale++
				}
				if a.T != b.T || math.Float64bits(a.V) != math.Float64bits(b.V) && !(math.IsNaN(a.V) && math.IsNaN(b.V) && series.IsStale(a.V) == series.IsStale(b.V)) {
					t.Errorf("%s%s: sample %d: range %v, instant %v", name, fs[i].LabelKey(), j, a, b)
					break
				}
			}
		}
	}
	return stale
}
