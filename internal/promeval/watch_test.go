package promeval_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/probe"
	"github.com/gpuchaos/gpuchaos/internal/promeval"
	"github.com/gpuchaos/gpuchaos/internal/rules"
	"github.com/gpuchaos/gpuchaos/internal/xid"
)

// builtinEquivalents are built-in detectors (internal/probe's small query
// layer) next to the PromQL rule that says the same thing.
const builtinEquivalents = `
groups:
- name: gpus
  rules:
  - alert: dcgm-gpu-temp-high
    expr: DCGM_FI_DEV_GPU_TEMP > 85
    for: 1m
  - alert: dcgm-xid-errors
    expr: DCGM_FI_DEV_XID_ERRORS > 0
  - alert: dcgm-gpu-missing
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP) < 8
    for: 1m
  - alert: dcgm-sm-clock-throttled
    expr: |
      DCGM_FI_DEV_SM_CLOCK < 0.85 * quantile_over_time(0.5, DCGM_FI_DEV_SM_CLOCK[20m] offset 10m)
        and on (Hostname, gpu) DCGM_FI_DEV_GPU_UTIL > 50
    for: 2m
- name: jobs
  rules:
  - alert: job-down
    expr: gpuchaos_job_up == 0
    for: 1m
`

// TestBuiltinDetectorsAgree runs a built-in detector and its PromQL
// equivalent (through NewAlertProbe) side by side on one twin run, polled
// every evaluation step as the engine polls: both must first hold within
// one step of each other, about the same subjects. This cross-checks the
// probe package's query layer against the real engine.
func TestBuiltinDetectorsAgree(t *testing.T) {
	t.Parallel()
	cases := []struct {
		detector, fault string
		params          map[string]string
		rank            bool
	}{
		{"dcgm-gpu-temp-high", "hardware.thermal-throttle", nil, false},
		{"dcgm-xid-errors", "hardware.xid", map[string]string{"code": "13"}, false},
		{"dcgm-gpu-missing", "hardware.fallen-off-bus", nil, false},
		{"dcgm-sm-clock-throttled", "hardware.power-brake", nil, false},
		{"job-down", "workload.kill-rank", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.detector, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tw := newTwin(t)
			set := load(t, builtinEquivalents)
			d, ok := probe.LookupDetector(tc.detector)
			if !ok {
				t.Fatalf("no detector %s", tc.detector)
			}
			builtin := d.Probe(tw)
			// Start evaluating well before the fault, as a running
			// Prometheus would have.
			ours := promeval.NewAlertProbe(rule(t, set, tc.detector), set, tw, tw.Now().Add(-10*time.Minute), promeval.Options{})
			if ours.Name() != tc.detector {
				t.Errorf("probe name %q", ours.Name())
			}
			ref := gpuRef(t, tw, 5)
			if tc.rank {
				ref = rankRef(t, tw, 5)
			}
			t0 := tw.Now()
			inject(t, tw, tc.fault, tc.params, ref)
			var firstBuiltin, firstOurs time.Duration = -1, -1
			var subjects [2][]probe.Subject
			for i := 0; i < 60 && (firstBuiltin < 0 || firstOurs < 0); i++ {
				if err := tw.Sleep(ctx, promeval.DefaultInterval); err != nil {
					t.Fatal(err)
				}
				b, err := builtin.Observe(ctx)
				if err != nil {
					t.Fatal(err)
				}
				o, err := ours.Observe(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if b.Holds && firstBuiltin < 0 {
					firstBuiltin, subjects[0] = tw.Now().Sub(t0), b.Subjects
				}
				if o.Holds && firstOurs < 0 {
					firstOurs, subjects[1] = tw.Now().Sub(t0), o.Subjects
				}
			}
			t.Logf("built-in first holds at T+%v, PromQL at T+%v", firstBuiltin, firstOurs)
			if firstBuiltin < 0 || firstOurs < 0 {
				t.Fatalf("did not both hold within 15m: built-in %v, PromQL %v", firstBuiltin, firstOurs)
			}
			if diff := (firstBuiltin - firstOurs).Abs(); diff > promeval.DefaultInterval {
				t.Errorf("first holds differ by %v, more than one evaluation step", diff)
			}
			switch {
			case len(subjects[1]) == 0:
				t.Error("PromQL probe holds without a subject")
			case tc.rank && subjects[1][0].Job != ref.Job:
				t.Errorf("PromQL subjects %+v, want job %s first", subjects[1], ref.Job)
			case !tc.rank && subjects[1][0].Node != ref.Node:
				t.Errorf("PromQL subjects %+v, want node %s first", subjects[1], ref.Node)
			}
			if len(subjects[0]) > 0 && len(subjects[1]) > 0 && subjects[0][0].GPU != subjects[1][0].GPU {
				t.Errorf("subjects differ: built-in %+v, PromQL %+v", subjects[0], subjects[1])
			}
		})
	}
}

// TestAlertProbe checks what the probe reports: nothing before the fault,
// the faulted GPU with its labels mapped to a subject after, and errors for
// rules it cannot watch.
func TestAlertProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTwin(t)
	set := load(t, `
groups:
- name: gpus
  rules:
  - record: gpu:xid
    expr: DCGM_FI_DEV_XID_ERRORS
  - alert: XidError
    expr: gpu:xid > 0
    for: 30s
`)
	p := promeval.NewAlertProbe(rule(t, set, "XidError"), set, tw, tw.Now(), promeval.Options{})
	obs, err := p.Observe(ctx)
	if err != nil || obs.Holds {
		t.Fatalf("before the fault: %+v, %v", obs, err)
	}
	ref := gpuRef(t, tw, 6)
	t0 := tw.Now()
	inject(t, tw, "hardware.xid", map[string]string{"code": "31"}, ref)
	// Pending at the +30s scrape, firing 30s later; polls at +15s, +30s,
	// +45s must not hold, +60s must.
	for _, at := range []time.Duration{15 * time.Second, 30 * time.Second, 45 * time.Second, 60 * time.Second} {
		if err := tw.Sleep(ctx, t0.Add(at).Sub(tw.Now())); err != nil {
			t.Fatal(err)
		}
		obs, err = p.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := at == 60*time.Second; obs.Holds != want {
			t.Fatalf("at T+%v: holds %v, want %v (%s)", at, obs.Holds, want, obs.Detail)
		}
	}
	pci, _ := xid.NormalizePCI(ref.PCI)
	want := probe.Subject{Node: ref.Node, GPU: "6", UUID: ref.UUID, PCI: pci}
	if len(obs.Subjects) != 1 || obs.Subjects[0] != want || obs.Value != 31 {
		t.Errorf("subjects %+v value %v, want [%+v] 31", obs.Subjects, obs.Value, want)
	}

	other := load(t, "groups: [{name: g, rules: [{alert: A, expr: up == 0}]}]")
	for name, p := range map[string]probe.Probe{
		"recording rule":  promeval.NewAlertProbe(rule(t, set, "gpu:xid"), set, tw, tw.Now(), promeval.Options{}),
		"rule not in set": promeval.NewAlertProbe(rule(t, other, "A"), set, tw, tw.Now(), promeval.Options{}),
		"no rule":         promeval.NewAlertProbe(nil, set, tw, tw.Now(), promeval.Options{}),
	} {
		if _, err := p.Observe(ctx); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestProbeMatchesEvaluate checks the probe's incremental evaluation, one
// poll at a time, against one Evaluate over the same span.
func TestProbeMatchesEvaluate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTwin(t)
	set := load(t, equivalenceRules)
	start := tw.Now().Add(-10 * time.Minute)
	probes := map[*rules.Rule]probe.Probe{}
	for _, r := range set.Rules {
		if r.Kind == rules.KindAlert {
			probes[r] = promeval.NewAlertProbe(r, set, tw, start, promeval.Options{})
		}
	}
	inject(t, tw, "hardware.fallen-off-bus", nil, gpuRef(t, tw, 3))
	holds := map[*rules.Rule][]time.Time{}
	for i := 0; i < 40; i++ {
		// Polls at an odd period: an evaluation can fall between polls.
		if err := tw.Sleep(ctx, 40*time.Second); err != nil {
			t.Fatal(err)
		}
		for r, p := range probes {
			obs, err := p.Observe(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if obs.Holds {
				holds[r] = append(holds[r], tw.Now())
			}
		}
	}
	res, err := promeval.Evaluate(ctx, set, tw, start, tw.Now(), promeval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for r := range probes {
		var want []time.Time
		for i := 1; i <= 40; i++ {
			at := start.Add(10*time.Minute + time.Duration(i)*40*time.Second)
			// The probe holds at a poll when the last evaluation at or
			// before it left an alert firing.
			last := at.Truncate(promeval.DefaultInterval)
			if r.Interval > 0 {
				last = at.Truncate(r.Interval)
			}
			for _, a := range res.Alerts {
				if a.Rule == r && a.FiringAt(last) {
					want = append(want, at)
					break
				}
			}
		}
		if len(want) != len(holds[r]) {
			t.Errorf("%s: probe held at %d polls, Evaluate says %d", r.Name, len(holds[r]), len(want))
			continue
		}
		for i := range want {
			if !want[i].Equal(holds[r][i]) {
				t.Errorf("%s: poll %d: probe held at %v, Evaluate says %v", r.Name, i, holds[r][i], want[i])
				break
			}
		}
	}
}
