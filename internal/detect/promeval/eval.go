package promeval

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

const (
	// DefaultInterval is the evaluation interval of groups that set none
	// when Options.Interval is zero. Prometheus' own default is 1m; GPU
	// fleets that alert fast commonly set 15s, as the built-in detectors
	// assume.
	DefaultInterval = 15 * time.Second
	// DefaultLookback is the lookback delta of the default engine, as in
	// Prometheus (--query.lookback-delta).
	DefaultLookback = 5 * time.Minute
)

// Options configure Evaluate and NewAlertProbe. The zero value is usable.
type Options struct {
	// Engine runs the queries; nil means NewEngine(Interval). Callers
	// that evaluate many times can share one engine: it is safe for
	// concurrent use.
	Engine *promql.Engine
	// Interval is the evaluation interval of groups whose rules have
	// Interval 0; zero means DefaultInterval.
	Interval time.Duration
	// Every, when positive, is the evaluation interval of every group,
	// whatever its own: for a target that evaluates rules itself as often
	// as it scrapes (the local node), where a 15 s group interval would
	// only add up to 15 s to every detection.
	Every time.Duration
}

func (o Options) interval() time.Duration {
	if o.Interval > 0 {
		return o.Interval
	}
	return DefaultInterval
}

// NewEngine returns a PromQL engine configured as Prometheus runs rules:
// 5m lookback, the @ modifier and negative offsets enabled, no sample limit
// worth the name, and subqueries without a step evaluated every
// subqueryStep (Prometheus uses its global evaluation interval; zero means
// DefaultInterval). Query timeouts are left to the caller's context.
func NewEngine(subqueryStep time.Duration) *promql.Engine {
	if subqueryStep <= 0 {
		subqueryStep = DefaultInterval
	}
	step := subqueryStep.Milliseconds()
	return promql.NewEngine(promql.EngineOpts{
		MaxSamples:               50_000_000,
		Timeout:                  24 * time.Hour,
		LookbackDelta:            DefaultLookback,
		EnableAtModifier:         true,
		EnableNegativeOffset:     true,
		NoStepSubqueryIntervalFn: func(int64) int64 { return step },
	})
}

// Interval is a span of time during which an alert fired.
type Interval struct {
	// From is the evaluation at which the alert started firing.
	From time.Time
	// To is the first evaluation at which it no longer fired; zero means
	// it was still firing at the last evaluation.
	To time.Time
}

// Alert is everything one alert (a rule and one label set) did during an
// evaluation.
type Alert struct {
	Rule *rules.Rule
	// Labels are the alert's labels as Alertmanager would receive them:
	// the expression's result labels without __name__, the rule's labels
	// applied over them and alertname. Templated rule label values are not
	// expanded.
	Labels series.Labels
	// ActiveAt is the first evaluation at which the alert was pending.
	ActiveAt time.Time
	// Firing lists when it fired, in time order.
	Firing []Interval
}

// FiringAt reports whether the alert was firing at t.
func (a *Alert) FiringAt(t time.Time) bool {
	for _, iv := range a.Firing {
		if !t.Before(iv.From) && (iv.To.IsZero() || t.Before(iv.To)) {
			return true
		}
	}
	return false
}

// RuleError is a rule whose evaluation failed at some timestamps. As in
// Prometheus, a failed evaluation changes nothing: no recorded samples, no
// alert state change.
type RuleError struct {
	Rule *rules.Rule
	// First is the first evaluation that failed and Err its error.
	First time.Time
	Err   error
	// Count is how many evaluations failed.
	Count int
}

// Error describes the failure with the rule's location.
func (e *RuleError) Error() string {
	return fmt.Sprintf("%s: group %q: rule %q: %d evaluations failed, first at %s: %v",
		e.Rule.Source, e.Rule.Group, e.Rule.Name, e.Count, e.First.Format(time.RFC3339), e.Err)
}

// Unwrap returns the first evaluation's error.
func (e *RuleError) Unwrap() error { return e.Err }

// Result is what evaluating a rule set produced.
type Result struct {
	// Alerts are every alert that was pending at least once, in rule order
	// and then by labels.
	Alerts []*Alert
	// Recorded are the series each recording rule wrote, by record name,
	// sorted by labels. They carry staleness markers where a series stopped
	// being returned, as Prometheus writes them.
	Recorded map[string][]*series.Series
	// Errors lists the rules that failed to evaluate at some timestamps.
	Errors []*RuleError

	// byRule indexes Alerts by rule, so that a caller judging every rule
	// of a large set does not scan every alert of every other rule: that
	// scan made coverage quadratic in the number of rules.
	byRule map[*rules.Rule][]*Alert
}

// AlertsOf returns the alerts of one rule, by labels. The result is
// Evaluate's index: callers must not change it, nor Alerts after the
// first call.
func (r *Result) AlertsOf(rule *rules.Rule) []*Alert {
	if r.byRule == nil {
		r.byRule = map[*rules.Rule][]*Alert{}
		for _, a := range r.Alerts {
			r.byRule[a.Rule] = append(r.byRule[a.Rule], a)
		}
	}
	return r.byRule[rule]
}

// FirstFiring returns the earliest time at or after from at which an alert
// of rule (any rule when nil) whose labels satisfy match (any labels when
// nil) was firing. An alert already firing at from counts at from.
func (r *Result) FirstFiring(rule *rules.Rule, from time.Time, match func(series.Labels) bool) (time.Time, bool) {
	var best time.Time
	found := false
	alerts := r.Alerts
	if rule != nil {
		alerts = r.AlertsOf(rule)
	}
	for _, a := range alerts {
		if match != nil && !match(a.Labels) {
			continue
		}
		for _, iv := range a.Firing {
			if !iv.To.IsZero() && !iv.To.After(from) {
				continue
			}
			t := iv.From
			if t.Before(from) {
				t = from
			}
			if !found || t.Before(best) {
				best, found = t, true
			}
			break
		}
	}
	return best, found
}

// Evaluate evaluates every rule of set over src at each evaluation
// timestamp of its group in [start, end], and reports the alerts and
// recorded series. The semantics follow Prometheus' rules manager; see the
// package documentation for the details and where we differ.
func Evaluate(ctx context.Context, set *rules.Set, src Source, start, end time.Time, opts Options) (*Result, error) {
	if end.Before(start) {
		return nil, fmt.Errorf("evaluate rules: end %s before start %s", end, start)
	}
	e, err := newEvaluator(set, src, start, opts, nil)
	if err != nil {
		return nil, err
	}
	if err := e.advance(ctx, end); err != nil {
		return nil, err
	}
	return e.result(), nil
}

// evaluator holds the state of a rule set's evaluation between advances:
// alert states, recorded series and the next timestamp of each group.
type evaluator struct {
	engine *promql.Engine
	st     *Storage
	groups []*group
	// rules are in set order; a rule's index here is its ordinal.
	rules []*ruleState
	// order is the range path's evaluation order: every recording rule
	// before the rules that read it.
	order []*ruleState
	// stepped is set when rules depend on each other in a cycle, so whole
	// series cannot be computed one rule at a time: every group is then
	// evaluated timestamp by timestamp, as Prometheus does.
	stepped bool
	// stepByStep forces the stepped path (tests prove the two agree).
	stepByStep bool
}

type group struct {
	interval int64 // ms
	next     int64 // the next evaluation timestamp, ms
	rules    []*ruleState
}

// newEvaluator prepares set for evaluation from start. When only is not
// nil, it keeps just those rules and the recording rules they read,
// directly or not.
func newEvaluator(set *rules.Set, src Source, start time.Time, opts Options, only []*rules.Rule) (*evaluator, error) {
	if set == nil {
		return nil, errors.New("evaluate rules: no rule set")
	}
	eng := opts.Engine
	if eng == nil {
		eng = NewEngine(opts.interval())
	}
	e := &evaluator{engine: eng, st: NewStorage(src)}
	p := parser.NewParser(parser.Options{})
	groups := map[[2]string]*group{}
	for i, r := range set.Rules {
		expr := r.Parsed
		if expr == nil {
			var err error
			if expr, err = p.ParseExpr(r.Expr); err != nil {
				return nil, fmt.Errorf("evaluate rules: %s: group %q: rule %q: %w", r.Source, r.Group, r.Name, err)
			}
		}
		iv := r.Interval
		if iv <= 0 {
			iv = opts.interval()
		}
		if opts.Every > 0 {
			iv = opts.Every
		}
		k := [2]string{r.Source, r.Group}
		g := groups[k]
		if g == nil {
			g = &group{interval: iv.Milliseconds()}
			if g.interval <= 0 {
				return nil, fmt.Errorf("evaluate rules: %s: group %q: interval %s below a millisecond", r.Source, r.Group, iv)
			}
			// Evaluations are at multiples of the interval since the
			// epoch (Prometheus adds a per-group phase we leave out).
			g.next = CeilTo(start.UnixMilli(), g.interval)
			groups[k] = g
			e.groups = append(e.groups, g)
		}
		rs := &ruleState{rule: r, ord: i, grp: g, st: e.st, run: true, reads: selectors(expr), instant: usesStartOrEnd(expr)}
		if r.Kind == rules.KindAlert {
			rs.active = map[string]*alertState{}
			rs.alerts = map[string]*Alert{}
		} else {
			rs.recorded = map[string]*series.Series{}
			rs.live = map[string]bool{}
		}
		g.rules = append(g.rules, rs)
		e.rules = append(e.rules, rs)
	}
	e.linkDeps()
	if only != nil {
		e.prune(only)
	}
	e.order, e.stepped = topoOrder(e.rules)
	for _, rs := range e.rules {
		c := rs
		rs.queryable = e.st.view(func(owner int) int64 { return e.shift(owner, c) })
	}
	return e, nil
}

// linkDeps finds, for every rule, the recording rules it reads. A selector
// naming its metric (nearly all of them) looks its records up by name; only
// one with a regex or no name is matched against every record, so the cost
// grows with the rules, not with rules × records.
func (e *evaluator) linkDeps() {
	records := map[string][]*ruleState{}
	var all []*ruleState
	for _, p := range e.rules {
		if p.rule.Kind == rules.KindRecord {
			records[p.rule.Name] = append(records[p.rule.Name], p)
			all = append(all, p)
		}
	}
	if len(all) == 0 {
		return
	}
	for _, rs := range e.rules {
		dep := map[*ruleState]bool{}
		for _, ms := range rs.reads {
			if name, ok := exactName(ms); ok {
				for _, p := range records[name] {
					dep[p] = true
				}
				continue
			}
			for _, p := range all {
				if matchAll(ms, p.rule.Name) {
					dep[p] = true
				}
			}
		}
		for p := range dep {
			rs.deps = append(rs.deps, p)
		}
		// Set order, as the scan over every rule this replaces gave.
		slices.SortFunc(rs.deps, func(a, b *ruleState) int { return a.ord - b.ord })
	}
}

// exactName returns the one metric name a selector's __name__ matchers
// allow, when they pin it with an equality.
func exactName(ms []*labels.Matcher) (string, bool) {
	for _, m := range ms {
		if m.Type == labels.MatchEqual {
			return m.Value, matchAll(ms, m.Value)
		}
	}
	return "", false
}

// shift is how many milliseconds later a rule sees the samples that the
// recording rule with ordinal owner wrote. A rule sees the results of
// earlier rules of its own group at the same timestamp, as Prometheus
// evaluates a group's rules in order. Everything else (a later rule of its
// group, itself, another group) it sees as of the previous evaluation:
// Prometheus runs groups independently, each at its own phase within the
// interval, so whether another group's result of this round is already
// written depends on phases we do not model. Moving those samples 1 ms
// later hides exactly the ones written at the current timestamp, never
// overstates detection speed and makes the result independent of group
// order.
func (e *evaluator) shift(owner int, consumer *ruleState) int64 {
	p := e.rules[owner]
	if p.grp == consumer.grp && p.ord < consumer.ord {
		return 0
	}
	return 1
}

// prune keeps only the rules in only and the recording rules they depend
// on, with their groups and ordinals unchanged.
func (e *evaluator) prune(only []*rules.Rule) {
	keep := map[*ruleState]bool{}
	var visit func(*ruleState)
	visit = func(rs *ruleState) {
		if keep[rs] {
			return
		}
		keep[rs] = true
		for _, d := range rs.deps {
			visit(d)
		}
	}
	wanted := map[*rules.Rule]bool{}
	for _, r := range only {
		wanted[r] = true
	}
	for _, rs := range e.rules {
		if wanted[rs.rule] {
			visit(rs)
		}
	}
	var groups []*group
	for _, g := range e.groups {
		g.rules = slices.DeleteFunc(g.rules, func(rs *ruleState) bool { return !keep[rs] })
		if len(g.rules) > 0 {
			groups = append(groups, g)
		}
	}
	e.groups = groups
	// e.rules keeps every rule so ordinals still index it.
	for _, rs := range e.rules {
		rs.run = keep[rs]
	}
}

// topoOrder returns rules ordered so every recording rule comes before the
// rules reading it, keeping set order otherwise, and whether there is a
// cycle (then the order is meaningless).
func topoOrder(rs []*ruleState) ([]*ruleState, bool) {
	state := map[*ruleState]int{} // 1 visiting, 2 done
	in := map[*ruleState]bool{}
	for _, r := range rs {
		in[r] = true
	}
	out := make([]*ruleState, 0, len(rs))
	cycle := false
	var visit func(*ruleState)
	visit = func(r *ruleState) {
		switch state[r] {
		case 1:
			cycle = true
			return
		case 2:
			return
		}
		state[r] = 1
		for _, d := range r.deps {
			if in[d] {
				visit(d)
			}
		}
		state[r] = 2
		out = append(out, r)
	}
	for _, r := range rs {
		visit(r)
	}
	return out, cycle
}

// advance runs every evaluation at or before to that has not run yet. The
// Source must not change while it runs.
func (e *evaluator) advance(ctx context.Context, to time.Time) error {
	e.st.refresh()
	e.st.pinned = true
	defer func() { e.st.pinned = false }()
	toMs := to.UnixMilli()
	if e.stepped || e.stepByStep {
		return e.advanceStepped(ctx, toMs)
	}
	for _, rs := range e.order {
		if !rs.run {
			continue
		}
		g := rs.grp
		last := FloorTo(toMs, g.interval)
		if last < g.next {
			continue
		}
		var err error
		if rs.instant {
			err = rs.evalSteps(ctx, e.engine, g.next, last)
		} else {
			err = rs.evalRange(ctx, e.engine, g.next, last)
		}
		if err != nil {
			return err
		}
	}
	for _, g := range e.groups {
		if last := FloorTo(toMs, g.interval); last >= g.next {
			g.next = last + g.interval
		}
	}
	return nil
}

// advanceStepped evaluates timestamp by timestamp: at each, every group
// due then runs its rules in order.
func (e *evaluator) advanceStepped(ctx context.Context, toMs int64) error {
	for {
		ts := int64(-1)
		for _, g := range e.groups {
			if g.next <= toMs && (ts < 0 || g.next < ts) {
				ts = g.next
			}
		}
		if ts < 0 {
			return nil
		}
		for _, g := range e.groups {
			if g.next != ts {
				continue
			}
			for _, rs := range g.rules {
				if err := rs.evalSteps(ctx, e.engine, ts, ts); err != nil {
					return err
				}
			}
			g.next += g.interval
		}
	}
}

// result collects what the evaluation produced so far.
func (e *evaluator) result() *Result {
	res := &Result{Recorded: map[string][]*series.Series{}}
	for _, rs := range e.rules {
		if rs.err != nil {
			res.Errors = append(res.Errors, rs.err)
		}
		if rs.rule.Kind == rules.KindAlert {
			res.Alerts = append(res.Alerts, rs.sortedAlerts()...)
			continue
		}
		if len(rs.recorded) == 0 {
			continue
		}
		list := res.Recorded[rs.rule.Name]
		for _, s := range rs.recorded {
			list = append(list, s)
		}
		slices.SortFunc(list, func(a, b *series.Series) int { return strings.Compare(a.LabelKey(), b.LabelKey()) })
		res.Recorded[rs.rule.Name] = list
	}
	return res
}

// ruleState is one rule's evaluation state.
type ruleState struct {
	rule *rules.Rule
	ord  int
	grp  *group
	st   *Storage
	// run is false for rules pruned away: nothing reads them.
	run     bool
	reads   [][]*labels.Matcher // __name__ matchers of each selector
	deps    []*ruleState
	instant bool // uses @ start() or @ end(): instant queries only
	// queryable is the storage as this rule sees it.
	queryable storage.Queryable

	// Alerting rules.
	active map[string]*alertState
	alerts map[string]*Alert

	// Recording rules: series by labels key, and which were returned by
	// the last successful evaluation.
	recorded map[string]*series.Series
	live     map[string]bool

	err *RuleError
}

type alertState struct {
	alert     *Alert
	activeAt  time.Time
	firing    bool
	keepSince time.Time
	seenAt    int64
	value     float64
}

// output is one result series mapped to what the rule makes of it: the
// alert's or recorded series' labels and their key.
type output struct {
	key    string
	labels series.Labels
}

type item struct {
	out *output
	v   float64
}

// selectors returns the __name__ matchers of every selector in expr.
func selectors(expr parser.Expr) [][]*labels.Matcher {
	var out [][]*labels.Matcher
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			var ms []*labels.Matcher
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					ms = append(ms, m)
				}
			}
			out = append(out, ms)
		}
		return nil
	})
	return out
}

// usesStartOrEnd reports whether expr uses @ start() or @ end(), which mean
// the range's ends in a range query but the evaluation time in a rule's
// instant query.
func usesStartOrEnd(expr parser.Expr) bool {
	found := false
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch x := n.(type) {
		case *parser.VectorSelector:
			found = found || x.StartOrEnd != 0
		case *parser.SubqueryExpr:
			found = found || x.StartOrEnd != 0
		}
		return nil
	})
	return found
}

// evalRange evaluates the rule at every step in [from, to] with one range
// query: each step of a range query equals the instant query at that time.
// A query that fails as a whole is retried step by step, so only the
// failing evaluations are lost, as in Prometheus.
func (rs *ruleState) evalRange(ctx context.Context, eng *promql.Engine, from, to int64) error {
	step := rs.grp.interval
	q, err := eng.NewRangeQuery(ctx, rs.queryable, nil, rs.rule.Expr, time.UnixMilli(from), time.UnixMilli(to), time.Duration(step)*time.Millisecond)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return rs.evalSteps(ctx, eng, from, to)
	}
	res := q.Exec(ctx)
	defer q.Close()
	if res.Err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return rs.evalSteps(ctx, eng, from, to)
	}
	m, ok := res.Value.(promql.Matrix)
	if !ok {
		return rs.evalSteps(ctx, eng, from, to)
	}
	n := int((to-from)/step) + 1
	outs := make([]*output, len(m))
	keys := make(map[string]struct{}, len(m))
	dups := false
	total := 0
	counts := make([]int, n+1)
	for i, s := range m {
		outs[i] = rs.output(s.Metric)
		if _, ok := keys[outs[i].key]; ok {
			dups = true
		}
		keys[outs[i].key] = struct{}{}
		for _, p := range s.Floats {
			counts[(p.T-from)/step+1]++
		}
		total += len(s.Floats)
	}
	// Bucket the points by step (a counting sort), so each step's vector
	// is one subslice.
	for k := 1; k <= n; k++ {
		counts[k] += counts[k-1]
	}
	items := make([]item, total)
	fill := slices.Clone(counts[:n])
	for i, s := range m {
		for _, p := range s.Floats {
			k := (p.T - from) / step
			items[fill[k]] = item{outs[i], p.F}
			fill[k]++
		}
	}
	for k := 0; k < n; k++ {
		rs.apply(from+int64(k)*step, items[counts[k]:counts[k+1]], dups)
	}
	return nil
}

// evalSteps evaluates the rule with one instant query per step in [from,
// to], as Prometheus' rule manager does.
func (rs *ruleState) evalSteps(ctx context.Context, eng *promql.Engine, from, to int64) error {
	for ts := from; ts <= to; ts += rs.grp.interval {
		items, err := rs.instantQuery(ctx, eng, ts)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			rs.fail(ts, err)
			continue
		}
		rs.apply(ts, items, true)
	}
	return nil
}

func (rs *ruleState) instantQuery(ctx context.Context, eng *promql.Engine, ts int64) ([]item, error) {
	q, err := eng.NewInstantQuery(ctx, rs.queryable, nil, rs.rule.Expr, time.UnixMilli(ts))
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, res.Err
	}
	switch v := res.Value.(type) {
	case promql.Vector:
		items := make([]item, 0, len(v))
		for _, s := range v {
			if s.H == nil {
				items = append(items, item{rs.output(s.Metric), s.F})
			}
		}
		return items, nil
	case promql.Scalar:
		return []item{{rs.output(labels.EmptyLabels()), v.V}}, nil
	default:
		return nil, fmt.Errorf("rule result is a %s, not a vector or scalar", res.Value.Type())
	}
}

func (rs *ruleState) fail(ts int64, err error) {
	if rs.err == nil {
		rs.err = &RuleError{Rule: rs.rule, First: time.UnixMilli(ts).UTC(), Err: err}
	}
	rs.err.Count++
}

// output maps a result series to the alert's or recorded series' labels.
func (rs *ruleState) output(metric labels.Labels) *output {
	b := labels.NewBuilder(metric)
	if rs.rule.Kind == rules.KindAlert {
		b.Del(model.MetricNameLabel)
	} else {
		b.Set(model.MetricNameLabel, rs.rule.Name)
	}
	for k, v := range rs.rule.Labels {
		b.Set(k, v)
	}
	if rs.rule.Kind == rules.KindAlert {
		b.Set(labels.AlertName, rs.rule.Name)
	}
	ls := b.Labels()
	out := make(series.Labels, 0, ls.Len())
	ls.Range(func(l labels.Label) {
		if l.Name != model.MetricNameLabel {
			out = append(out, series.Label{Name: l.Name, Value: l.Value})
		}
	})
	// labels.Labels sort by byte order as series.Labels do.
	return &output{key: out.String(), labels: out}
}

// apply runs one evaluation's outcome at ts. checkDups asks to reject an
// evaluation that maps two results to one label set, as Prometheus does.
func (rs *ruleState) apply(ts int64, items []item, checkDups bool) {
	if checkDups && len(items) > 1 {
		seen := make(map[string]struct{}, len(items))
		for _, it := range items {
			if _, ok := seen[it.out.key]; ok {
				what := "alert"
				if rs.rule.Kind == rules.KindRecord {
					what = "recorded series"
				}
				rs.fail(ts, fmt.Errorf("two results map to the same %s labels %s", what, it.out.key))
				return
			}
			seen[it.out.key] = struct{}{}
		}
	}
	if rs.rule.Kind == rules.KindAlert {
		rs.alertStep(ts, items)
	} else {
		rs.recordStep(ts, items)
	}
}

// alertStep is Prometheus' alert state machine for one evaluation.
func (rs *ruleState) alertStep(ms int64, items []item) {
	ts := time.UnixMilli(ms).UTC()
	for _, it := range items {
		a := rs.active[it.out.key]
		if a == nil {
			// New, or back after it resolved: pending from now.
			al := rs.alerts[it.out.key]
			if al == nil {
				al = &Alert{Rule: rs.rule, Labels: it.out.labels, ActiveAt: ts}
				rs.alerts[it.out.key] = al
			}
			a = &alertState{alert: al, activeAt: ts}
			rs.active[it.out.key] = a
		}
		a.seenAt = ms
		a.value = it.v
	}
	for k, a := range rs.active {
		if a.seenAt != ms {
			if a.firing && rs.rule.KeepFiringFor > 0 {
				if a.keepSince.IsZero() {
					a.keepSince = ts
				}
				if ts.Sub(a.keepSince) < rs.rule.KeepFiringFor {
					continue
				}
			}
			if a.firing {
				a.alert.Firing[len(a.alert.Firing)-1].To = ts
			}
			delete(rs.active, k)
			continue
		}
		a.keepSince = time.Time{}
		if !a.firing && ts.Sub(a.activeAt) >= rs.rule.For {
			a.firing = true
			a.alert.Firing = append(a.alert.Firing, Interval{From: ts})
		}
	}
}

// recordStep appends one evaluation's samples and a staleness marker to
// every series the previous evaluation returned and this one did not.
func (rs *ruleState) recordStep(ms int64, items []item) {
	for _, it := range items {
		s := rs.recorded[it.out.key]
		if s == nil {
			s = &series.Series{Metric: rs.rule.Name, Labels: it.out.labels}
			rs.recorded[it.out.key] = s
			rs.st.add(s, rs.ord)
		}
		s.Samples = append(s.Samples, series.Sample{T: ms, V: it.v})
		rs.live[it.out.key] = true
	}
	for k := range rs.live {
		if s := rs.recorded[k]; s.Samples[len(s.Samples)-1].T != ms {
			s.Samples = append(s.Samples, series.Sample{T: ms, V: series.StaleNaN})
			delete(rs.live, k)
		}
	}
}

// sortedAlerts returns the rule's alerts by labels. The map's keys are the
// labels' strings already; building them again in the comparison allocated
// more than the evaluation itself for rules with many alerts.
func (rs *ruleState) sortedAlerts() []*Alert {
	keys := slices.Sorted(maps.Keys(rs.alerts))
	out := make([]*Alert, len(keys))
	for i, k := range keys {
		out[i] = rs.alerts[k]
	}
	return out
}

// CeilTo rounds ms up to a multiple of step (evaluation times of a rule
// group fall on multiples of its interval).
func CeilTo(ms, step int64) int64 {
	r := ((ms % step) + step) % step
	if r == 0 {
		return ms
	}
	return ms - r + step
}

// FloorTo rounds ms down to a multiple of step.
func FloorTo(ms, step int64) int64 {
	return ms - ((ms%step)+step)%step
}
