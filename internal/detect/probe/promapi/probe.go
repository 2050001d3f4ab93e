package promapi

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// condition decides which result elements hold and which of them is the
// most telling.
type condition struct {
	// text describes the condition in details ("> 85"); empty for "the
	// result is not empty".
	text string
	// holds reports whether one element's value satisfies the condition.
	holds func(v float64) bool
	// better reports whether a is a more extreme witness than b.
	better func(a, b float64) bool
}

// Probe is a question to a Prometheus server, asked again at every
// observation; it keeps no state between calls.
type Probe struct {
	name   string
	query  string
	client *Client
	cond   condition
	// alert is the alert's name for alert probes, for details.
	alert string
}

// Name returns the probe's name.
func (p *Probe) Name() string { return p.name }

// Query returns the PromQL query the probe sends.
func (p *Probe) Query() string { return p.query }

// Observe runs the query now. The probe holds when any result element
// satisfies its condition; Subjects are what those elements are about and
// Value the most extreme of their values (for an alert, the number of
// firing series). Errors name the server, the query and what Prometheus
// answered.
func (p *Probe) Observe(ctx context.Context) (probe.Observation, error) {
	res, err := p.client.Query(ctx, p.query)
	if err != nil {
		return probe.Observation{}, fmt.Errorf("probe %s: %w", p.name, err)
	}
	var hold []Sample
	for _, s := range res {
		// Comparisons with NaN are false, so a NaN element holds only
		// for NonEmpty and Alert.
		if p.cond.holds(s.Value) {
			hold = append(hold, s)
		}
	}
	if len(hold) == 0 {
		obs := probe.Observation{Detail: fmt.Sprintf("no series hold (%d returned)", len(res))}
		if p.alert != "" {
			obs.Detail = fmt.Sprintf("alert %s is not firing", p.alert)
		}
		return obs, nil
	}
	best := hold[0]
	for _, s := range hold[1:] {
		if p.cond.better(s.Value, best.Value) {
			best = s
		}
	}
	obs := probe.Observation{Holds: true, Value: best.Value}
	for _, s := range hold {
		sub := subjectOf(s.Labels)
		if !slices.Contains(obs.Subjects, sub) {
			obs.Subjects = append(obs.Subjects, sub)
		}
	}
	switch {
	case p.alert != "":
		obs.Value = float64(len(hold))
		obs.Detail = fmt.Sprintf("alert %s firing for %s", p.alert, formatLabels(withoutAlertLabels(hold[0].Labels)))
		if len(hold) > 1 {
			obs.Detail += fmt.Sprintf(" and %d more", len(hold)-1)
		}
	default:
		obs.Detail = fmt.Sprintf("%d of %d series hold%s; %s = %s", len(hold), len(res), p.cond.text, formatLabels(best.Labels), strconv.FormatFloat(best.Value, 'g', -1, 64))
	}
	return obs, nil
}

// withoutAlertLabels drops the labels every ALERTS series has.
func withoutAlertLabels(ls map[string]string) map[string]string {
	out := make(map[string]string, len(ls))
	for k, v := range ls {
		if k != "__name__" && k != "alertname" && k != "alertstate" {
			out[k] = v
		}
	}
	return out
}

// subjectOf reads what an element is about from the labels exporters set.
// A scrape renames a target's own job label to exported_job (the training
// job, on the twin's series) and sets job to the scrape job's name, so
// exported_job wins.
func subjectOf(ls map[string]string) probe.Subject {
	tl := make(series.Labels, 0, len(ls))
	for k, v := range ls {
		if k == "job" && ls["exported_job"] != "" {
			continue
		}
		if k == "exported_job" {
			k = "job"
		}
		tl = append(tl, series.Label{Name: k, Value: v})
	}
	return probe.SubjectFromLabels(tl)
}

// Alert returns a probe that holds while the alert fires: while
// ALERTS{alertname=alert,alertstate="firing"} has a series. A pending alert
// (inside its for: duration) does not hold.
func (c *Client) Alert(name, alert string) *Probe {
	return &Probe{
		name:   name,
		query:  `ALERTS{alertname=` + strconv.Quote(alert) + `,alertstate="firing"}`,
		client: c,
		alert:  alert,
		cond:   condition{holds: func(float64) bool { return true }, better: func(a, b float64) bool { return a > b }},
	}
}

// NonEmpty returns a probe that holds when the query returns anything, as
// an alert rule's expression fires.
func (c *Client) NonEmpty(name, query string) *Probe {
	return &Probe{name: name, query: query, client: c, cond: condition{
		holds: func(v float64) bool { return true }, better: func(a, b float64) bool { return a > b },
	}}
}

// Compare returns a probe that holds when any element satisfies
// `element op value`; op is one of > < >= <= == !=.
func (c *Client) Compare(name, query, op string, value float64) (*Probe, error) {
	cond, err := compare(op, value)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", name, err)
	}
	return &Probe{name: name, query: query, client: c, cond: cond}, nil
}

// Near returns a probe that holds when any element is within tolerance of
// value: |element − value| ≤ tolerance.
func (c *Client) Near(name, query string, value, tolerance float64) (*Probe, error) {
	if !(tolerance >= 0) || math.IsInf(tolerance, 0) || math.IsNaN(value) {
		return nil, fmt.Errorf("probe %s: tolerance must be a finite number of at least 0 and value a number, got %v ± %v", name, value, tolerance)
	}
	dist := func(v float64) float64 { return math.Abs(v - value) }
	return &Probe{name: name, query: query, client: c, cond: condition{
		text:   fmt.Sprintf(" within %g of %g", tolerance, value),
		holds:  func(v float64) bool { return dist(v) <= tolerance },
		better: func(a, b float64) bool { return dist(a) < dist(b) },
	}}, nil
}

func compare(op string, x float64) (condition, error) {
	text := " " + op + " " + strconv.FormatFloat(x, 'g', -1, 64)
	larger := func(a, b float64) bool { return a > b }
	smaller := func(a, b float64) bool { return a < b }
	// For == every witness is equal and for != none is more telling than
	// another: keep the first.
	first := func(a, b float64) bool { return false }
	switch op {
	case ">":
		return condition{text, func(v float64) bool { return v > x }, larger}, nil
	case ">=":
		return condition{text, func(v float64) bool { return v >= x }, larger}, nil
	case "<":
		return condition{text, func(v float64) bool { return v < x }, smaller}, nil
	case "<=":
		return condition{text, func(v float64) bool { return v <= x }, smaller}, nil
	case "==":
		return condition{text, func(v float64) bool { return v == x }, first}, nil
	case "!=":
		return condition{text, func(v float64) bool { return v != x && !math.IsNaN(v) }, first}, nil
	}
	return condition{}, fmt.Errorf("comparison %q is not one of > < >= <= == !=", op)
}

// FromSpec builds the probe an experiment's prometheus field defines.
// defaultURL is the server asked when the spec names none; hc sends the
// requests (nil: http.DefaultClient).
func FromSpec(name string, spec v1alpha1.PrometheusProbe, defaultURL string, hc *http.Client) (probe.Probe, error) {
	u := spec.URL
	if u == "" {
		u = defaultURL
	}
	if u == "" {
		return nil, fmt.Errorf("probe %s: no Prometheus URL: set url in the probe or give the target a default", name)
	}
	c, err := New(Options{URL: u, Client: hc})
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", name, err)
	}
	switch {
	case spec.Alert != "" && spec.Query != "":
		return nil, fmt.Errorf("probe %s: set alert or query, not both", name)
	case spec.Alert != "":
		if spec.Op != "" || spec.Value != nil || spec.Tolerance != nil {
			return nil, fmt.Errorf("probe %s: op, value and tolerance apply to a query, not an alert", name)
		}
		return c.Alert(name, spec.Alert), nil
	case spec.Query == "":
		return nil, fmt.Errorf("probe %s: set alert or query", name)
	case spec.Op != "" && spec.Tolerance != nil:
		return nil, fmt.Errorf("probe %s: set op or tolerance, not both", name)
	case spec.Op != "":
		if spec.Value == nil {
			return nil, fmt.Errorf("probe %s: op %s needs a value", name, spec.Op)
		}
		return c.Compare(name, spec.Query, spec.Op, *spec.Value)
	case spec.Tolerance != nil:
		if spec.Value == nil {
			return nil, fmt.Errorf("probe %s: tolerance needs a value", name)
		}
		return c.Near(name, spec.Query, *spec.Value, *spec.Tolerance)
	case spec.Value != nil:
		return nil, fmt.Errorf("probe %s: value needs op or tolerance", name)
	}
	return c.NonEmpty(name, spec.Query), nil
}
