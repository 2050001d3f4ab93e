package promeval

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/probe"
	"github.com/gpuchaos/gpuchaos/internal/rules"
)

// ClockSource is a Source with a clock: the twin.
type ClockSource interface {
	Source
	Now() time.Time
}

// NewAlertProbe returns a probe that holds while the alerting rule fires,
// evaluating set (only rule and the recording rules it reads) over src from
// start.
//
// Unlike most probes it is stateful, as an alert's `for:` clock is: each
// Observe runs the evaluations between the previous call and src.Now(), and
// keeps alert states and recorded series for the next. It must therefore be
// polled in time order; skipped polls lose nothing, since every evaluation
// timestamp is still run. Calls are serialised by a mutex. Errors in the
// rule (not an alerting rule of set, an expression that does not parse) are
// returned by Observe.
func NewAlertProbe(rule *rules.Rule, set *rules.Set, src ClockSource, start time.Time, opts Options) probe.Probe {
	p := &alertProbe{rule: rule, src: src}
	switch {
	case rule == nil:
		p.err = fmt.Errorf("alert probe: no rule")
	case rule.Kind != rules.KindAlert:
		p.err = fmt.Errorf("alert probe: %s: %q is a %s rule, not an alerting rule", rule.Source, rule.Name, rule.Kind)
	case set == nil || !slices.Contains(set.Rules, rule):
		p.err = fmt.Errorf("alert probe: %s: rule %q is not in the rule set", rule.Source, rule.Name)
	}
	if p.err != nil {
		return p
	}
	p.ev, p.err = newEvaluator(set, src, start, opts, []*rules.Rule{rule})
	if p.err != nil {
		p.err = fmt.Errorf("alert probe %s: %w", rule.Name, p.err)
		return p
	}
	for _, rs := range p.ev.rules {
		if rs.rule == rule {
			p.rs = rs
		}
	}
	return p
}

type alertProbe struct {
	rule *rules.Rule
	src  ClockSource
	err  error

	mu sync.Mutex // serialises Observe: the evaluator is stateful
	ev *evaluator
	rs *ruleState
}

// Name returns the rule's name.
func (p *alertProbe) Name() string {
	if p.rule == nil {
		return ""
	}
	return p.rule.Name
}

// Observe evaluates up to the source's current time and holds when the
// alert fires for at least one label set; each firing alert is a subject.
func (p *alertProbe) Observe(ctx context.Context) (probe.Observation, error) {
	if p.err != nil {
		return probe.Observation{}, p.err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.ev.advance(ctx, p.src.Now()); err != nil {
		return probe.Observation{}, fmt.Errorf("observe alert %s: %w", p.rule.Name, err)
	}
	alerts, vals := p.rs.firing()
	if len(alerts) == 0 {
		obs := probe.Observation{}
		if p.rs.err != nil {
			obs.Detail = p.rs.err.Error()
		}
		return obs, nil
	}
	obs := probe.Observation{Holds: true, Value: vals[0]}
	for _, a := range alerts {
		obs.Subjects = append(obs.Subjects, probe.SubjectFromLabels(a.Labels))
	}
	obs.Detail = fmt.Sprintf("%d alerts firing, first %s = %g", len(alerts), alerts[0].Labels, vals[0])
	return obs, nil
}
