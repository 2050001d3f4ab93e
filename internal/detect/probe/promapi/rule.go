package promapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// RuleProbe holds while an alerting rule fires on a Prometheus server's
// data, without the server running the rule: a built-in detector or a
// threshold probe on a cluster whose series live in Prometheus (the k8s
// target).
//
// It means what probe.NewAlertProbe means over the twin or a scraped
// exporter. The rule's expression is evaluated by the server at the same
// timestamps the local probe's engine uses (multiples of the rule's group
// interval since the epoch, starting for + keep_firing_for + one interval
// before the first observation), and the same alert state machine
// (promeval.Alerts, the code behind the local probe's Watch) runs over the
// answers. The evaluations are asked for as one range query per
// observation, covering the steps since the previous one: a range query's
// value at each step is by definition the instant query's at that time, so
// this is exactly the rule manager's sequence of instant queries, in one
// round trip. Pending state lives here, not on the server, as it lives in
// the local probe: an alert fires once its expression has held at every
// evaluation for the rule's for:, and a first observation looks back that
// far, so a condition that began before the run counts as it would for a
// Prometheus running all along. (Querying ALERTS instead would need the
// rule loaded into the server; one subquery over the for: window, such as
// count_over_time((expr)[1m:15s]), would still count a series missing at
// some step, where Prometheus' for: clock starts over, and loses the
// keep_firing_for state.)
//
// Where the verdict can differ from the local probe's: the local target
// evaluates at every scrape rather than every group interval, which moves
// detection by less than one interval; and the server's samples carry its
// own scrape timestamps and job/instance labels. Subjects come from the
// alert labels as the prometheus probes read them (Hostname or node, gpu,
// UUID, pci_bus_id; exported_job over job).
type RuleProbe struct {
	name   string
	rule   *rules.Rule
	client *Client
	now    func() time.Time
	step   time.Duration

	mu     sync.Mutex // serialises Observe: the state machine is stateful
	alerts *promeval.Alerts
	next   int64 // the next evaluation timestamp, ms; 0 before the first
}

// Rule returns a probe named name that holds while rule fires on the
// server's data, observed at the times now returns (the target's clock).
// rule must be an alerting rule reading no recording rule (the server
// does not hold gpuchaos's records): the built-in detectors and threshold
// probes are such rules. Its interval is its group's, or probe.EvalInterval.
func (c *Client) Rule(name string, rule *rules.Rule, now func() time.Time) (*RuleProbe, error) {
	a, err := promeval.NewAlerts(rule)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", name, err)
	}
	if name == "" {
		name = rule.Name
	}
	step := rule.Interval
	if step <= 0 {
		step = probe.EvalInterval
	}
	if step < time.Millisecond {
		return nil, fmt.Errorf("probe %s: rule interval %s below a millisecond", name, step)
	}
	return &RuleProbe{name: name, rule: rule, client: c, now: now, step: step, alerts: a}, nil
}

// Name returns the probe's name.
func (p *RuleProbe) Name() string { return p.name }

// Query returns the PromQL expression the probe evaluates on the server.
func (p *RuleProbe) Query() string { return p.rule.Expr }

// Observe runs the evaluations due since the previous observation on the
// server and holds when the rule's alert fires for at least one label set.
// A failed round trip (server down, timeout) returns an error and keeps
// those evaluations due, so the next observation runs them: the server
// still has the data. An evaluation the server refuses to compute (a
// many-to-many match at one step) changes no alert, as in Prometheus, and
// is reported in Detail.
func (p *RuleProbe) Observe(ctx context.Context) (probe.Observation, error) {
	if err := ctx.Err(); err != nil {
		return probe.Observation{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	step := p.step.Milliseconds()
	now := p.now().UnixMilli()
	if p.next == 0 {
		// As probe.NewAlertProbe's first observation: from as far back
		// as for: and keep_firing_for reach, plus one step.
		p.next = promeval.CeilTo(now-(p.rule.For+p.rule.KeepFiringFor+p.step).Milliseconds(), step)
	}
	if last := promeval.FloorTo(now, step); last >= p.next {
		if err := p.evaluate(ctx, p.next, last); err != nil {
			return probe.Observation{}, fmt.Errorf("probe %s: %w", p.name, err)
		}
	}
	return p.observation(), nil
}

// maxSteps bounds one range query; Prometheus refuses more than 11,000
// points per series.
const maxSteps = 10_000

// evaluate runs the evaluations from to to (ms, both on the step grid),
// advancing p.next past each evaluation it applied.
func (p *RuleProbe) evaluate(ctx context.Context, from, to int64) error {
	step := p.step.Milliseconds()
	for from <= to {
		end := min(to, from+(maxSteps-1)*step)
		res, err := p.client.QueryRange(ctx, p.rule.Expr, time.UnixMilli(from), time.UnixMilli(end), p.step)
		var pe *Error
		switch {
		case errors.As(err, &pe) && pe.Status == http.StatusUnprocessableEntity:
			// The server could not compute some step: ask step by step,
			// so only the failing evaluations are lost.
			if err := p.evaluateSteps(ctx, from, end); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			byStep := make([][]promeval.Element, (end-from)/step+1)
			for _, s := range res {
				ls := labels.FromMap(s.Labels)
				for _, pt := range s.Points {
					if pt.T < from || pt.T > end || (pt.T-from)%step != 0 {
						return fmt.Errorf("query_range %s answered a point at %d ms, off the %s grid from %d", p.rule.Expr, pt.T, p.step, from)
					}
					k := (pt.T - from) / step
					byStep[k] = append(byStep[k], promeval.Element{Labels: ls, Value: pt.V})
				}
			}
			for k, elems := range byStep {
				p.alerts.Step(time.UnixMilli(from+int64(k)*step), elems)
			}
			p.next = end + step
		}
		from = p.next
	}
	return nil
}

// evaluateSteps runs one instant query per step.
func (p *RuleProbe) evaluateSteps(ctx context.Context, from, to int64) error {
	for ts := from; ts <= to; ts += p.step.Milliseconds() {
		at := time.UnixMilli(ts)
		res, err := p.client.QueryAt(ctx, p.rule.Expr, at)
		var pe *Error
		switch {
		case errors.As(err, &pe) && pe.Status == http.StatusUnprocessableEntity:
			p.alerts.Fail(at, err)
		case err != nil:
			return err
		default:
			elems := make([]promeval.Element, len(res))
			for i, s := range res {
				elems[i] = promeval.Element{Labels: labels.FromMap(s.Labels), Value: s.Value}
			}
			p.alerts.Step(at, elems)
		}
		p.next = ts + p.step.Milliseconds()
	}
	return nil
}

// observation reports the alerts firing now, worded as the local alert
// probe words them.
func (p *RuleProbe) observation() probe.Observation {
	firing := p.alerts.Firing()
	if len(firing) == 0 {
		obs := probe.Observation{}
		if err := p.alerts.Err(); err != nil {
			obs.Detail = err.Error()
		}
		return obs
	}
	obs := probe.Observation{Holds: true, Value: firing[0].Value}
	for _, a := range firing {
		m := make(map[string]string, len(a.Labels))
		for _, l := range a.Labels {
			m[l.Name] = l.Value
		}
		// One subject per alert, duplicates kept, as the local probe
		// reports them.
		obs.Subjects = append(obs.Subjects, subjectOf(m))
	}
	what := "1 alert"
	if len(firing) > 1 {
		what = fmt.Sprintf("%d alerts", len(firing))
	}
	first := slices.DeleteFunc(slices.Clone(firing[0].Labels), func(l series.Label) bool { return l.Name == labels.AlertName })
	obs.Detail = fmt.Sprintf("%s firing, first %s = %g", what, first, firing[0].Value)
	return obs
}
