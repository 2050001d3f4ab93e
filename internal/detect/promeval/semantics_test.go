package promeval_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// t0 is aligned to the 15s evaluation grid.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixedSource is a hand-written Source: the state machine tests need
// values step by step, which the twin's physics would not give exactly.
type fixedSource []*series.Series

func (f fixedSource) Series() []*series.Series { return f }

// mkSeries builds a series in promqltest's spirit: `metric{a="1"}` and
// space-separated values one per 15s from t0, `_` for no sample and
// `stale` for a staleness marker.
func mkSeries(t testing.TB, desc, values string) *series.Series {
	t.Helper()
	name, rest, _ := strings.Cut(desc, "{")
	s := &series.Series{Metric: name}
	for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			s.Labels = append(s.Labels, series.Label{Name: k, Value: strings.Trim(v, `"`)})
		}
	}
	slices.SortFunc(s.Labels, func(a, b series.Label) int { return strings.Compare(a.Name, b.Name) })
	for i, f := range strings.Fields(values) {
		ts := t0.Add(time.Duration(i) * 15 * time.Second).UnixMilli()
		switch f {
		case "_":
		case "stale":
			s.Samples = append(s.Samples, series.Sample{T: ts, V: series.StaleNaN})
		default:
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatal(err)
			}
			s.Samples = append(s.Samples, series.Sample{T: ts, V: v})
		}
	}
	return s
}

// TestAlertStateMachine checks Prometheus' alert semantics step by step.
// Times are offsets from t0. A series' last sample stays visible for the
// 5m lookback, so a run of values ending at 105s keeps an alert up until
// 6m45s.
func TestAlertStateMachine(t *testing.T) {
	t.Parallel()
	const s = time.Second
	cases := []struct {
		name   string
		series []string // desc, values pairs
		rule   string   // the rule's YAML fields
		active time.Duration
		firing []promeval.Interval // offsets as durations since t0
		errs   bool
	}{
		{
			name:   "no for fires at once and resolves when the value drops",
			series: []string{`x{gpu="0"}`, "1 1 1 0 0"},
			rule:   "expr: x > 0",
			firing: iv(0, 45*s),
		},
		{
			name:   "for: firing once active for the whole duration",
			series: []string{`x{gpu="0"}`, "1 1 1 1 1 1 1 0"},
			rule:   "expr: x > 0\n    for: 30s",
			firing: iv(30*s, 105*s),
		},
		{
			name:   "a gap while pending restarts the for clock",
			series: []string{`x{gpu="0"}`, "1 1 0 1 1 1 1 1"},
			rule:   "expr: x > 0\n    for: 30s",
			firing: iv(75*s, 6*time.Minute+45*s),
		},
		{
			name:   "keep_firing_for is reset when the condition returns",
			series: []string{`x{gpu="0"}`, "1 0 0 1 0 0 0 0 0"},
			rule:   "expr: x > 0\n    keep_firing_for: 30s",
			firing: iv(0, 90*s),
		},
		{
			name:   "keep_firing_for does not keep a pending alert",
			series: []string{`x{gpu="0"}`, "1 1 0 0 0 0"},
			rule:   "expr: x > 0\n    for: 1m\n    keep_firing_for: 5m",
		},
		{
			name:   "a firing alert that clears and returns fires again after its for",
			series: []string{`x{gpu="0"}`, "1 1 1 0 1 1 1 1"},
			rule:   "expr: x > 0\n    for: 15s",
			firing: append(iv(15*s, 45*s), iv(75*s, 6*time.Minute+45*s)...),
		},
		{
			// The staleness marker ends the series at once.
			name:   "a staleness marker resolves at the next evaluation",
			series: []string{`x{gpu="0"}`, "1 1 stale"},
			rule:   "expr: x > 0",
			firing: iv(0, 30*s),
		},
		{
			// Without a marker the last sample is visible for the 5m
			// lookback: up to 15s+5m, exclusive.
			name:   "a series that just stops lingers for the lookback",
			series: []string{`x{gpu="0"}`, "1 1"},
			rule:   "expr: x > 0",
			firing: iv(0, 5*time.Minute+15*s),
		},
		{
			// Samples at 0s and 15s, visible for 5m: evaluations at 0s to
			// 5m, 21 of them, all failing.
			name:   "two results with the same alert labels fail the evaluation",
			series: []string{`x{gpu="0"}`, "1 1", `y{gpu="0"}`, "1 1"},
			rule:   `expr: '{__name__=~"x|y"} > 0'`,
			errs:   true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var src fixedSource
			for i := 0; i+1 < len(tc.series); i += 2 {
				src = append(src, mkSeries(t, tc.series[i], tc.series[i+1]))
			}
			set := load(t, "groups:\n- name: g\n  rules:\n  - alert: A\n    "+tc.rule+"\n")
			for _, eval := range []struct {
				name string
				f    func(context.Context, *rules.Set, promeval.Source, time.Time, time.Time, promeval.Options) (*promeval.Result, error)
			}{{"range", promeval.Evaluate}, {"instant", promeval.EvaluateStepByStep}} {
				res, err := eval.f(context.Background(), set, src, t0, t0.Add(10*time.Minute), promeval.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if tc.errs {
					var re *promeval.RuleError
					if len(res.Errors) != 1 || !errors.As(res.Errors[0], &re) || re.Count != 21 || len(res.Alerts) != 0 {
						t.Errorf("%s: errors %v, %d alerts; want one rule failing 21 times, no alert", eval.name, res.Errors, len(res.Alerts))
					}
					continue
				}
				var got []promeval.Interval
				for _, a := range res.Alerts {
					if a.Labels.String() != `{alertname="A",gpu="0"}` || !a.ActiveAt.Equal(t0.Add(tc.active)) {
						t.Errorf("%s: alert %s active at %v, want {alertname=\"A\",gpu=\"0\"} at %v", eval.name, a.Labels, a.ActiveAt.Sub(t0), tc.active)
					}
					got = append(got, a.Firing...)
				}
				if want := tc.firing; !sameIntervals(got, want) {
					t.Errorf("%s: firing %v, want %v", eval.name, offsets(got), offsets(want))
				}
			}
		})
	}
}

// iv is one interval in offsets from t0; to 0 means still firing.
func iv(from, to time.Duration) []promeval.Interval {
	i := promeval.Interval{From: t0.Add(from)}
	if to != 0 {
		i.To = t0.Add(to)
	}
	return []promeval.Interval{i}
}

func offsets(ivs []promeval.Interval) []string {
	var out []string
	for _, i := range ivs {
		to := "firing"
		if !i.To.IsZero() {
			to = i.To.Sub(t0).String()
		}
		out = append(out, i.From.Sub(t0).String()+".."+to)
	}
	return out
}

// TestRecordReadBeforeItIsWritten puts an alert ahead of the recording rule
// it reads, in another group, so the range path must find the dependency to
// evaluate the record first; it must then agree with Prometheus' own
// timestamp-by-timestamp path. Each row reads the record another way: by
// name (looked up), by a regex or by labels alone (matched against every
// record).
func TestRecordReadBeforeItIsWritten(t *testing.T) {
	t.Parallel()
	src := fixedSource{mkSeries(t, `x{gpu="0"}`, "0 0 1 1 1 1 1 1 1 1 stale")}
	for _, tc := range []struct{ name, expr string }{
		{"by name", `gpu:x:max > 0`},
		{"by regex", `{__name__=~"gpu:x:.*"} > 0`},
		{"by labels alone", `{src="rec"} > 0`},
		{"by name and a regex on it", `{__name__="gpu:x:max", __name__=~"gpu:.*"} > 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set := load(t, "groups:\n- name: alerts\n  rules:\n  - alert: A\n    expr: '"+tc.expr+"'\n"+
				"- name: records\n  rules:\n  - record: gpu:x:max\n    expr: max by (gpu) (x)\n    labels: {src: rec}\n")
			var firing [2][]promeval.Interval
			for i, eval := range []func(context.Context, *rules.Set, promeval.Source, time.Time, time.Time, promeval.Options) (*promeval.Result, error){
				promeval.Evaluate, promeval.EvaluateStepByStep} {
				res, err := eval(context.Background(), set, src, t0, t0.Add(5*time.Minute), promeval.Options{})
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range res.AlertsOf(rule(t, set, "A")) {
					firing[i] = append(firing[i], a.Firing...)
				}
			}
			// The record sees x at 30s and its marker at 150s; the
			// alert, in another group, each one evaluation later.
			if want := iv(45*time.Second, 165*time.Second); !sameIntervals(firing[0], want) || !sameIntervals(firing[1], want) {
				t.Errorf("range path fires %v, step by step %v; want %v", offsets(firing[0]), offsets(firing[1]), offsets(want))
			}
		})
	}
}
