package promeval_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"

	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
)

// TestAlertsMatchWatch feeds Alerts the rule's instant query at every
// evaluation timestamp, as a Prometheus server answers it for the k8s
// target's rule probes, and checks it fires exactly when a Watch over the
// same series does, with the same labels and values: across for:, an
// alert that resolves and keep_firing_for holding it.
func TestAlertsMatchWatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTwin(t)
	set := load(t, `
groups:
- name: gpus
  rules:
  - alert: XidError
    expr: DCGM_FI_DEV_XID_ERRORS > 0
    for: 30s
  - alert: XidNew
    expr: DCGM_FI_DEV_XID_ERRORS > 0 unless DCGM_FI_DEV_XID_ERRORS offset 1m > 0
    for: 15s
    keep_firing_for: 45s
`)
	const step = 15 * time.Second
	eng := promeval.NewEngine(step)
	start := tw.Now().Truncate(step).Add(step)
	type pair struct {
		w *promeval.Watch
		a *promeval.Alerts
		q string
	}
	var pairs []pair
	for _, name := range []string{"XidError", "XidNew"} {
		r := rule(t, set, name)
		w, err := promeval.NewWatch(r, set, tw, start, promeval.Options{Engine: eng})
		if err != nil {
			t.Fatal(err)
		}
		a, err := promeval.NewAlerts(r)
		if err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, pair{w, a, r.Expr})
	}
	if err := tw.Sleep(ctx, start.Sub(tw.Now())); err != nil {
		t.Fatal(err)
	}
	fired := map[string]int{}
	for i := range 24 {
		if i == 4 {
			inject(t, tw, "hardware.xid", map[string]string{"code": "31"}, gpuRef(t, tw, 2))
		}
		now := tw.Now()
		for _, p := range pairs {
			want, err := p.w.Advance(ctx, now)
			if err != nil {
				t.Fatal(err)
			}
			q, err := eng.NewInstantQuery(ctx, promeval.NewStorage(tw), nil, p.q, now)
			if err != nil {
				t.Fatal(err)
			}
			res := q.Exec(ctx)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			var elems []promeval.Element
			for _, s := range res.Value.(promql.Vector) {
				elems = append(elems, promeval.Element{Labels: s.Metric, Value: s.F})
			}
			q.Close()
			p.a.Step(now, elems)
			got := p.a.Firing()
			if !slices.EqualFunc(got, want, func(a, b promeval.FiringAlert) bool {
				return a.Value == b.Value && slices.Equal(a.Labels, b.Labels)
			}) {
				t.Fatalf("%s at step %d: Alerts %+v, Watch %+v", p.q, i, got, want)
			}
			if len(got) > 0 {
				fired[got[0].Labels.Get("alertname")]++
			}
		}
		if err := tw.Sleep(ctx, step); err != nil {
			t.Fatal(err)
		}
	}
	// XidError fires from 30s after the XID to the end; XidNew fires
	// 15s in, its expression stops a minute in, and keep_firing_for
	// holds it 45s more: it fires for fewer steps, but some.
	if fired["XidError"] == 0 || fired["XidNew"] == 0 || fired["XidNew"] >= fired["XidError"] {
		t.Errorf("steps firing %v: want both, XidNew fewer", fired)
	}
	t.Logf("steps firing: %v", fired)
}
