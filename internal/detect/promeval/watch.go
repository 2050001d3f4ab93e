package promeval

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// Watch evaluates one alerting rule of a set incrementally, as a running
// Prometheus does: each Advance runs the evaluations between the previous
// one and a later time, keeping alert states (the `for:` clock) and the
// series the recording rules it reads wrote. It is what a probe polled by
// the engine needs; Evaluate is the same evaluation over a whole span at
// once.
//
// Advance must be called in time order; skipped times lose nothing, since
// every evaluation timestamp is still run. A Watch is not safe for
// concurrent use, and its Source must not change while Advance runs.
type Watch struct {
	ev *evaluator
	rs *ruleState
}

// FiringAlert is an alert firing after an Advance, with the value its
// expression returned at the last evaluation.
type FiringAlert struct {
	Labels series.Labels
	Value  float64
}

// NewWatch prepares rule, an alerting rule of set, for evaluation over src
// from start; only rule and the recording rules it reads are evaluated.
func NewWatch(rule *rules.Rule, set *rules.Set, src Source, start time.Time, opts Options) (*Watch, error) {
	switch {
	case rule == nil:
		return nil, fmt.Errorf("watch alert: no rule")
	case rule.Kind != rules.KindAlert:
		return nil, fmt.Errorf("watch alert: %s: %q is a %s rule, not an alerting rule", rule.Source, rule.Name, rule.Kind)
	case set == nil || !slices.Contains(set.Rules, rule):
		return nil, fmt.Errorf("watch alert: %s: rule %q is not in the rule set", rule.Source, rule.Name)
	}
	ev, err := newEvaluator(set, src, start, opts, []*rules.Rule{rule})
	if err != nil {
		return nil, fmt.Errorf("watch alert %s: %w", rule.Name, err)
	}
	w := &Watch{ev: ev}
	for _, rs := range ev.rules {
		if rs.rule == rule {
			w.rs = rs
		}
	}
	return w, nil
}

// Advance runs every evaluation at or before to that has not run yet and
// returns the alerts firing after the last of them, by labels. Errors are
// those of ctx; a rule whose evaluations fail is reported by Err.
func (w *Watch) Advance(ctx context.Context, to time.Time) ([]FiringAlert, error) {
	if err := w.ev.advance(ctx, to); err != nil {
		return nil, err
	}
	return w.rs.firing(), nil
}

// firing returns the alerts of an alerting rule firing after its last
// evaluation, by labels.
func (rs *ruleState) firing() []FiringAlert {
	var out []FiringAlert
	// The active map is keyed by the labels' strings: its sorted keys
	// order the alerts by labels.
	for _, k := range slices.Sorted(maps.Keys(rs.active)) {
		if a := rs.active[k]; a.firing {
			out = append(out, FiringAlert{Labels: a.alert.Labels, Value: a.value})
		}
	}
	return out
}

// Err returns the rule's failed evaluations so far, or nil.
func (w *Watch) Err() error {
	if w.rs.err == nil {
		return nil
	}
	return w.rs.err
}

// Alerts is Prometheus' alert state machine (the for: and keep_firing_for
// clocks) for one alerting rule whose expression is evaluated elsewhere: a
// Prometheus server's answers (internal/detect/probe/promapi evaluates the
// built-in detectors on the server that holds a cluster's series). Fed the
// same evaluations, it fires exactly when a Watch does, since both run the
// same code. It is not safe for concurrent use.
type Alerts struct{ rs *ruleState }

// Element is one element of an evaluation's result: its labels (with or
// without __name__) and value.
type Element struct {
	Labels labels.Labels
	Value  float64
}

// NewAlerts returns the state machine of rule, which must be an alerting
// rule.
func NewAlerts(rule *rules.Rule) (*Alerts, error) {
	if rule == nil || rule.Kind != rules.KindAlert {
		return nil, fmt.Errorf("alert state: want an alerting rule")
	}
	return &Alerts{rs: &ruleState{rule: rule, run: true, active: map[string]*alertState{}, alerts: map[string]*Alert{}}}, nil
}

// Step applies one evaluation of the rule at ts. Evaluations must come in
// time order. An evaluation that maps two elements to one alert's labels
// fails, as in Prometheus, and changes nothing.
func (a *Alerts) Step(ts time.Time, elems []Element) {
	items := make([]item, len(elems))
	for i, e := range elems {
		items[i] = item{a.rs.output(e.Labels), e.Value}
	}
	a.rs.apply(ts.UnixMilli(), items, true)
}

// Fail records an evaluation at ts that could not run: like a failed
// evaluation in Prometheus, it changes no alert's state.
func (a *Alerts) Fail(ts time.Time, err error) { a.rs.fail(ts.UnixMilli(), err) }

// Firing returns the alerts firing after the last evaluation, by labels.
func (a *Alerts) Firing() []FiringAlert { return a.rs.firing() }

// Err returns the failed evaluations so far, or nil.
func (a *Alerts) Err() error {
	if a.rs.err == nil {
		return nil
	}
	return a.rs.err
}
