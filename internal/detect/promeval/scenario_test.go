package promeval_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// The twin scrapes every 30s and the rules run every 15s, both aligned to
// the twin's start (midnight). A fault applied at the injection time T
// (a scrape time, after that scrape) first shows in the scrape at T+30s,
// so an expression that reacts to that scrape returns the series at the
// evaluation T+30s: that is when its alert goes pending.
const firstScrape = 30 * time.Second

// expect is one line of a scenario's verdict, in offsets from the fault's
// injection.
type expect struct {
	alert string
	// gpu is the gpu label every alert of the rule must carry; "" for an
	// alert about the node (no gpu label).
	gpu string
	// never: the rule must not even go pending after injection.
	never bool
	// pending and firing are the exact ActiveAt and first firing; resolved
	// is the end of the first firing interval (0: still firing).
	pending, firing, resolved time.Duration
	// restarts: the twin restarts the job on its own, so when the alert
	// resolves is the twin's business; it must resolve, though.
	restarts bool
	// within, when set, replaces the exact times for alerts driven by the
	// twin's physics: first firing must fall in (0, within], and firing
	// must follow pending by the rule's for (to one evaluation).
	within time.Duration
}

type scenario struct {
	name  string
	rules string
	fault string
	// params override the fault's defaults; gpu is the GPU index on the
	// first node (the rank for rank faults).
	params map[string]string
	gpu    int
	// revert, when set, reverts the fault this long after injection.
	revert time.Duration
	expect []expect
}

// run plays the scenario: warm up, inject, run 30 minutes (reverting on
// the way if asked) and evaluate the rules over the whole run.
func (sc scenario) run(t *testing.T) (*promeval.Result, time.Time) {
	t.Helper()
	ctx := context.Background()
	tw := newTwin(t)
	t0 := tw.Now()
	if sc.fault != "" {
		ref := gpuRef(t, tw, sc.gpu)
		if sc.fault == "workload.kill-rank" {
			ref = rankRef(t, tw, sc.gpu)
		}
		inject(t, tw, sc.fault, sc.params, ref)
	}
	rest := 30 * time.Minute
	if sc.revert > 0 {
		if err := tw.Sleep(ctx, sc.revert); err != nil {
			t.Fatal(err)
		}
		if err := tw.Revert(sc.fault); err != nil {
			t.Fatal(err)
		}
		rest -= sc.revert
	}
	if err := tw.Sleep(ctx, rest); err != nil {
		t.Fatal(err)
	}
	res, err := promeval.Evaluate(ctx, load(t, sc.rules), tw, t0.Add(-warmUp), tw.Now(), promeval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Errors {
		t.Errorf("rule error: %v", e)
	}
	return res, t0
}

func TestScenarios(t *testing.T) {
	t.Parallel()
	const missing = `
groups:
- name: gpus
  rules:
  - alert: GPUMissing
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP) < 8
    for: 1m
`
	cases := []scenario{
		{
			// The GPU's series get a staleness marker in the next scrape,
			// so the count drops at once, not after the 5m lookback.
			name: "for holds the alert pending, then it fires", rules: missing,
			fault: "hardware.fallen-off-bus", gpu: 3,
			expect: []expect{{alert: "GPUMissing", pending: firstScrape, firing: firstScrape + time.Minute}},
		},
		{
			// 50s is not a multiple of 15s: it fires at the first
			// evaluation at least 50s after it went pending, 60s later.
			name: "a for that is not a multiple of the interval rounds up",
			rules: `
groups:
- name: gpus
  rules:
  - alert: GPUMissing
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP) < 8
    for: 50s
`,
			fault: "hardware.fallen-off-bus", gpu: 3,
			expect: []expect{{alert: "GPUMissing", pending: firstScrape, firing: firstScrape + time.Minute}},
		},
		{
			// Reverted at +10m, the GPU is back in the +10m30s scrape: the
			// alert resolves at that evaluation.
			name: "an alert resolves when the series are back", rules: missing,
			fault: "hardware.fallen-off-bus", gpu: 3, revert: 10 * time.Minute,
			expect: []expect{{alert: "GPUMissing", pending: firstScrape, firing: firstScrape + time.Minute, resolved: 10*time.Minute + firstScrape}},
		},
		{
			name: "keep_firing_for keeps it firing after the condition clears",
			rules: `
groups:
- name: gpus
  rules:
  - alert: GPUMissing
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP) < 8
    for: 1m
    keep_firing_for: 5m
`,
			fault: "hardware.fallen-off-bus", gpu: 3, revert: 10 * time.Minute,
			expect: []expect{{alert: "GPUMissing", pending: firstScrape, firing: firstScrape + time.Minute, resolved: 15*time.Minute + firstScrape}},
		},
		{
			name: "a recording rule feeds an alert of its group at the same evaluation",
			rules: `
groups:
- name: gpus
  rules:
  - record: node:dcgm_gpus:count
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)
  - alert: GPUMissing
    expr: node:dcgm_gpus:count < 8
    for: 1m
`,
			fault: "hardware.fallen-off-bus", gpu: 3,
			expect: []expect{{alert: "GPUMissing", pending: firstScrape, firing: firstScrape + time.Minute}},
		},
		{
			// Another group sees the record as of its previous evaluation
			// (see evaluator.shift): one interval later.
			name: "a recording rule of another group is seen one evaluation later",
			rules: `
groups:
- name: alerts
  rules:
  - alert: GPUMissing
    expr: node:dcgm_gpus:count < 8
    for: 1m
- name: records
  rules:
  - record: node:dcgm_gpus:count
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)
`,
			fault: "hardware.fallen-off-bus", gpu: 3,
			expect: []expect{{alert: "GPUMissing", pending: firstScrape + 15*time.Second, firing: firstScrape + 75*time.Second}},
		},
		{
			// The offset baseline is what the GPU did 15 minutes ago; a
			// power brake on GPU 2 drops its clock and no other's.
			name: "offset baseline",
			rules: `
groups:
- name: gpus
  rules:
  - alert: SMClockDrop
    expr: avg_over_time(DCGM_FI_DEV_SM_CLOCK[2m]) < 0.9 * avg_over_time(DCGM_FI_DEV_SM_CLOCK[5m] offset 15m)
    for: 1m
`,
			fault: "hardware.power-brake", gpu: 2,
			expect: []expect{{alert: "SMClockDrop", gpu: "2", within: 5 * time.Minute}},
		},
		{
			name: "on() restricts a comparison to GPUs that run a rank",
			rules: `
groups:
- name: gpus
  rules:
  - alert: PowerDrop
    expr: |
      DCGM_FI_DEV_POWER_USAGE < 0.4 * avg_over_time(DCGM_FI_DEV_POWER_USAGE[5m] offset 15m)
        and on (Hostname, gpu) gpuchaos_rank_step_seconds
`,
			// The brake's HW slowdown halves gpu 2's clock (about 150 W
			// of 685); its peers wait for it half of every step and draw
			// about 55 %, so 0.4 singles out the braked GPU.
			fault: "hardware.power-brake", gpu: 2,
			expect: []expect{{alert: "PowerDrop", gpu: "2", within: 2 * time.Minute}},
		},
		{
			// group_left keeps the GPU's labels while matching the node's
			// average on Hostname alone.
			name: "group_left compares each GPU with its node's average",
			rules: `
groups:
- name: gpus
  rules:
  - alert: GPUHotterThanNode
    expr: DCGM_FI_DEV_GPU_TEMP > on (Hostname) group_left () (avg by (Hostname) (DCGM_FI_DEV_GPU_TEMP) + 5)
`,
			fault: "hardware.thermal-throttle", gpu: 2,
			expect: []expect{{alert: "GPUHotterThanNode", gpu: "2", within: 5 * time.Minute}},
		},
		{
			// XID 79 takes the GPU off the bus: its XID_ERRORS series goes
			// stale at the next scrape, so there is no value to compare.
			name: "xid 79 vanishes with its GPU and never fires the XID alert",
			rules: `
groups:
- name: gpus
  rules:
  - alert: XidError
    expr: DCGM_FI_DEV_XID_ERRORS > 0
`,
			fault: "hardware.xid", params: map[string]string{"code": "79"}, gpu: 1,
			expect: []expect{{alert: "XidError", never: true}},
		},
		{
			name: "xid 13 fires the XID alert at the next scrape",
			rules: `
groups:
- name: gpus
  rules:
  - alert: XidError
    expr: DCGM_FI_DEV_XID_ERRORS > 0
`,
			fault: "hardware.xid", params: map[string]string{"code": "13"}, gpu: 1,
			expect: []expect{{alert: "XidError", gpu: "1", pending: firstScrape, firing: firstScrape}},
		},
		{
			name: "job down",
			rules: `
groups:
- name: jobs
  rules:
  - alert: JobDown
    expr: gpuchaos_job_up == 0
    for: 1m
`,
			fault: "workload.kill-rank", gpu: 2,
			expect: []expect{{alert: "JobDown", pending: firstScrape, firing: firstScrape + time.Minute, restarts: true}},
		},
		{
			name: "a sensible pack stays silent on the fault-free twin", rules: sensiblePack,
			expect: []expect{
				{alert: "GPUMissing", never: true}, {alert: "XidError", never: true},
				{alert: "GPUTempHigh", never: true}, {alert: "SMClockDrop", never: true},
				{alert: "JobDown", never: true}, {alert: "JobSlow", never: true},
			},
		},
	}
	for _, sc := range cases {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			res, t0 := sc.run(t)
			for _, e := range sc.expect {
				checkExpect(t, res, t0, e)
			}
		})
	}
}

// sensiblePack is what a team might deploy, with for clauses long enough
// to ride out the job's checkpoints.
const sensiblePack = `
groups:
- name: records
  rules:
  - record: node:dcgm_gpus:count
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)
- name: gpus
  rules:
  - alert: GPUMissing
    expr: node:dcgm_gpus:count < 8
    for: 1m
  - alert: XidError
    expr: DCGM_FI_DEV_XID_ERRORS > 0
  - alert: GPUTempHigh
    expr: DCGM_FI_DEV_GPU_TEMP > 85
    for: 1m
  - alert: SMClockDrop
    expr: avg_over_time(DCGM_FI_DEV_SM_CLOCK[2m]) < 0.9 * avg_over_time(DCGM_FI_DEV_SM_CLOCK[5m] offset 15m)
    for: 1m
- name: jobs
  rules:
  - alert: JobDown
    expr: gpuchaos_job_up == 0
    for: 1m
  - alert: JobSlow
    expr: avg_over_time(gpuchaos_job_steps_per_second[5m]) < 0.8 * avg_over_time(gpuchaos_job_steps_per_second[10m] offset 10m)
    for: 2m
`

func checkExpect(t *testing.T, res *promeval.Result, t0 time.Time, e expect) {
	t.Helper()
	var got []*promeval.Alert
	for _, a := range res.Alerts {
		if a.Rule.Name == e.alert {
			got = append(got, a)
		}
	}
	if e.never {
		if len(got) > 0 {
			t.Errorf("%s: want no alert, got %d, first %s active at T%+v", e.alert, len(got), got[0].Labels, got[0].ActiveAt.Sub(t0))
		}
		return
	}
	if len(got) == 0 {
		t.Fatalf("%s: no alert", e.alert)
	}
	for _, a := range got {
		if g := a.Labels.Get("gpu"); g != e.gpu {
			t.Errorf("%s: alert %s has gpu %q, want %q", e.alert, a.Labels, g, e.gpu)
		}
		if a.Labels.Get("alertname") != e.alert {
			t.Errorf("%s: alert %s lacks its alertname", e.alert, a.Labels)
		}
		if e.gpu != "" && a.Labels.Get("Hostname") != "gpu-node-0" {
			t.Errorf("%s: alert %s is not on the faulted node", e.alert, a.Labels)
		}
		if len(a.Firing) == 0 {
			t.Errorf("%s: %s pending at T%+v but never fired", e.alert, a.Labels, a.ActiveAt.Sub(t0))
			continue
		}
		pending, firing := a.ActiveAt.Sub(t0), a.Firing[0].From.Sub(t0)
		if e.within > 0 {
			hold := a.Rule.For
			if firing <= 0 || firing > e.within || firing-pending < hold || firing-pending >= hold+promeval.DefaultInterval {
				t.Errorf("%s: %s pending at T%+v, firing at T%+v; want firing in (0, %v], %v after pending", e.alert, a.Labels, pending, firing, e.within, hold)
			}
			continue
		}
		if pending != e.pending || firing != e.firing {
			t.Errorf("%s: %s pending at T%+v, firing at T%+v; want T%+v, T%+v", e.alert, a.Labels, pending, firing, e.pending, e.firing)
		}
		resolved := time.Duration(0)
		if to := a.Firing[0].To; !to.IsZero() {
			resolved = to.Sub(t0)
		}
		if e.restarts {
			if resolved <= firing {
				t.Errorf("%s: %s never resolved after the job restarted", e.alert, a.Labels)
			}
		} else if resolved != e.resolved {
			t.Errorf("%s: %s resolved at T%+v, want T%+v (0: still firing)", e.alert, a.Labels, resolved, e.resolved)
		}
		if ft, ok := res.FirstFiring(a.Rule, t0, func(ls series.Labels) bool { return ls.Get("gpu") == e.gpu }); !ok || !ft.Equal(a.Firing[0].From) {
			t.Errorf("%s: FirstFiring = %v, %v; want %v", e.alert, ft, ok, a.Firing[0].From)
		}
	}
}
