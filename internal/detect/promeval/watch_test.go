package promeval_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
)

// TestWatch checks what a watch reports: nothing before the fault, the
// faulted GPU's alert with its labels and value after, and errors for rules
// it cannot watch.
func TestWatch(t *testing.T) {
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
	w, err := promeval.NewWatch(rule(t, set, "XidError"), set, tw, tw.Now(), promeval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	firing, err := w.Advance(ctx, tw.Now())
	if err != nil || len(firing) > 0 {
		t.Fatalf("before the fault: %+v, %v", firing, err)
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
		firing, err = w.Advance(ctx, tw.Now())
		if err != nil {
			t.Fatal(err)
		}
		if want := at == 60*time.Second; (len(firing) > 0) != want {
			t.Fatalf("at T+%v: firing %+v, want firing %v", at, firing, want)
		}
	}
	if len(firing) != 1 || firing[0].Labels.Get("Hostname") != ref.Node || firing[0].Labels.Get("gpu") != "6" ||
		firing[0].Labels.Get("UUID") != ref.UUID || firing[0].Labels.Get("alertname") != "XidError" || firing[0].Value != 31 {
		t.Errorf("firing %+v, want XidError on %s GPU 6 (%s) = 31", firing, ref.Node, ref.UUID)
	}
	if w.Err() != nil {
		t.Errorf("Err() = %v", w.Err())
	}

	other := load(t, "groups: [{name: g, rules: [{alert: A, expr: up == 0}]}]")
	for name, r := range map[string]*rules.Rule{
		"recording rule":  rule(t, set, "gpu:xid"),
		"rule not in set": rule(t, other, "A"),
		"no rule":         nil,
	} {
		if _, err := promeval.NewWatch(r, set, tw, tw.Now(), promeval.Options{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestWatchMatchesEvaluate checks a watch's incremental evaluation, one
// poll at a time, against one Evaluate over the same span.
func TestWatchMatchesEvaluate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTwin(t)
	set := load(t, equivalenceRules)
	start := tw.Now().Add(-10 * time.Minute)
	probes := map[*rules.Rule]*promeval.Watch{}
	for _, r := range set.Rules {
		if r.Kind == rules.KindAlert {
			w, err := promeval.NewWatch(r, set, tw, start, promeval.Options{})
			if err != nil {
				t.Fatal(err)
			}
			probes[r] = w
		}
	}
	inject(t, tw, "hardware.fallen-off-bus", nil, gpuRef(t, tw, 3))
	holds := map[*rules.Rule][]time.Time{}
	for i := 0; i < 40; i++ {
		// Polls at an odd period: an evaluation can fall between polls.
		if err := tw.Sleep(ctx, 40*time.Second); err != nil {
			t.Fatal(err)
		}
		for r, w := range probes {
			firing, err := w.Advance(ctx, tw.Now())
			if err != nil {
				t.Fatal(err)
			}
			if len(firing) > 0 {
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
