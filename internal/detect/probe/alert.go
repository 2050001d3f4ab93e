package probe

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
)

// Source is what probes read: series by metric name and the kernel log, at
// a current time. *twin.Twin and scrape.Store implement it. Callers must
// not modify what Select and Logs return.
type Source interface {
	Now() time.Time
	Select(metric string) []*series.Series
	Logs() []series.LogLine
}

// EvalEveryer is a Source that says how often rules over it are evaluated,
// overriding their groups' intervals: the local target evaluates them
// itself, as often as it scrapes.
type EvalEveryer interface {
	EvalEvery() time.Duration
}

// engine is the PromQL engine every alert probe shares; it is safe for
// concurrent use and holds no state between queries.
var engine = sync.OnceValue(func() *promql.Engine { return promeval.NewEngine(EvalInterval) })

// NewAlertProbe returns a probe that holds while rule, an alerting rule of
// set, fires over src: its expression evaluated with the real PromQL engine
// at every evaluation step (multiples of the rule's group interval, by
// default EvalInterval) and Prometheus' alert state machine (for:,
// keep_firing_for) run over the results (see internal/detect/promeval). Each
// firing alert is a subject. name labels the probe; empty means the rule's
// name.
//
// The probe is stateful, as a running Prometheus is: its first Observe
// starts evaluating from as far back as rule's for: and keep_firing_for
// reach (plus one step), as if Prometheus had been running all along, and
// each later Observe runs the evaluations since the previous one. It must
// be polled in time order; calls are serialised. Errors in the rule (not
// an alerting rule of set, an expression that does not parse) are returned
// by Observe.
func NewAlertProbe(name string, rule *rules.Rule, set *rules.Set, src Source) Probe {
	if name == "" && rule != nil {
		name = rule.Name
	}
	return &alertProbe{name: name, rule: rule, set: set, src: src}
}

type alertProbe struct {
	name string
	rule *rules.Rule
	set  *rules.Set
	src  Source

	mu sync.Mutex // serialises Observe: the watch is stateful
	w  *promeval.Watch
	// err is the watch's construction error, returned by every Observe.
	err error
}

func (p *alertProbe) Name() string { return p.name }

// Observe evaluates up to the source's current time and holds when the
// alert fires for at least one label set.
func (p *alertProbe) Observe(ctx context.Context) (Observation, error) {
	if err := ctx.Err(); err != nil {
		return Observation{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.src.Now()
	if p.w == nil && p.err == nil {
		p.w, p.err = p.watch(now)
	}
	if p.err != nil {
		return Observation{}, p.err
	}
	alerts, err := p.w.Advance(ctx, now)
	if err != nil {
		return Observation{}, fmt.Errorf("observe alert %s: %w", p.rule.Name, err)
	}
	if len(alerts) == 0 {
		obs := Observation{}
		if err := p.w.Err(); err != nil {
			obs.Detail = err.Error()
		}
		return obs, nil
	}
	obs := Observation{Holds: true, Value: alerts[0].Value}
	for _, a := range alerts {
		obs.Subjects = append(obs.Subjects, SubjectFromLabels(a.Labels))
	}
	what := "1 alert"
	if len(alerts) > 1 {
		what = fmt.Sprintf("%d alerts", len(alerts))
	}
	obs.Detail = fmt.Sprintf("%s firing, first %s = %g", what, withoutAlertName(alerts[0].Labels), alerts[0].Value)
	return obs, nil
}

// watch starts the rule's evaluation far enough before now for its alert
// state at now to be what a Prometheus running all along would hold.
func (p *alertProbe) watch(now time.Time) (*promeval.Watch, error) {
	if p.rule == nil {
		return nil, fmt.Errorf("alert probe %s: no rule", p.name)
	}
	step := p.rule.Interval
	if step <= 0 {
		step = EvalInterval
	}
	opts := promeval.Options{Engine: engine(), Interval: EvalInterval}
	if e, ok := p.src.(EvalEveryer); ok && e.EvalEvery() > 0 {
		step = e.EvalEvery()
		opts.Every = step
	}
	start := now.Add(-(p.rule.For + p.rule.KeepFiringFor + step))
	src, err := seriesOf(p.src, p.rule, p.set)
	if err != nil {
		return nil, fmt.Errorf("alert probe %s: %w", p.name, err)
	}
	return promeval.NewWatch(p.rule, p.set, src, start, opts)
}

// selected presents the series of a few metrics of a Source as the list
// promeval reads. Copying only what the rule reads, not every series of
// the twin, keeps a poll cheap.
type selected struct {
	src   Source
	names []string
}

// Series returns a fresh list each call: promeval compares it with the
// previous one to notice new series.
func (s *selected) Series() []*series.Series {
	var out []*series.Series
	for _, n := range s.names {
		out = append(out, s.src.Select(n)...)
	}
	return out
}

// seriesOf returns src as promeval reads it for rule: the metrics that rule
// and set's recording rules select, by name. A selector that does not name
// its metric exactly needs every series, which only a source that lists
// them (the twin) can give.
func seriesOf(src Source, rule *rules.Rule, set *rules.Set) (promeval.Source, error) {
	var names []string
	all := false
	for _, r := range set.Rules {
		if r != rule && r.Kind != rules.KindRecord {
			continue
		}
		expr := r.Parsed
		if expr == nil {
			var err error
			if expr, err = parser.NewParser(parser.Options{}).ParseExpr(r.Expr); err != nil {
				return nil, fmt.Errorf("rule %s: %w", r.Name, err)
			}
		}
		for _, n := range metricNames(expr) {
			if n == "" {
				all = true
			} else if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if all {
		if lister, ok := src.(promeval.Source); ok {
			return lister, nil
		}
		return nil, fmt.Errorf("a selector without an exact metric name needs every series, which this source cannot list")
	}
	return &selected{src: src, names: names}, nil
}

// metricNames returns the metric name of each selector in expr, in order,
// "" for a selector that does not pin its name with an equality.
func metricNames(expr parser.Expr) []string {
	var out []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := ""
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		out = append(out, name)
		return nil
	})
	return out
}

func withoutAlertName(ls series.Labels) series.Labels {
	return slices.DeleteFunc(slices.Clone(ls), func(l series.Label) bool { return l.Name == labels.AlertName })
}

// SubjectFromLabels reads what a series or alert is about from the labels
// exporters set: Hostname (dcgm-exporter) or node (kube-state-metrics), gpu,
// UUID, pci_bus_id (turned into the kernel's form, as Subject.PCI is) and
// job.
func SubjectFromLabels(ls series.Labels) Subject {
	node := ls.Get("Hostname")
	if node == "" {
		node = ls.Get("node")
	}
	pci := ls.Get("pci_bus_id")
	if n, ok := xid.NormalizePCI(pci); ok {
		pci = n
	}
	return Subject{Node: node, GPU: ls.Get("gpu"), UUID: ls.Get("UUID"), PCI: pci, Job: ls.Get("job")}
}
