package probe

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
)

// FromSpec builds the probe an experiment file defines, over src. name labels
// the probe in verdicts.
func FromSpec(name string, spec v1alpha1.ProbeSpec, src Source) (Probe, error) {
	switch {
	case spec.Detector != "":
		d, ok := LookupDetector(spec.Detector)
		if !ok {
			return nil, fmt.Errorf("detector %q is not a built-in detector", spec.Detector)
		}
		p := d.Probe(src)
		if name != "" && name != d.Name {
			return renamed{p, name}, nil
		}
		return p, nil
	case spec.Threshold != nil:
		r, err := ThresholdRule(name, *spec.Threshold)
		if err != nil {
			return nil, err
		}
		return NewAlertProbe(name, r, &rules.Set{Rules: []*rules.Rule{r}}, src), nil
	case spec.Log != nil:
		re, err := regexp.Compile(spec.Log.Pattern)
		if err != nil {
			return nil, fmt.Errorf("log pattern: %w", err)
		}
		return &logProbe{name: name, src: src, window: xidWindow, match: regexpLine(re)}, nil
	case spec.Workload != nil:
		return newWorkload(name, *spec.Workload, src), nil
	case spec.Prometheus != nil:
		// internal/detect/probe/promapi builds these; it imports this package, so
		// the targets that have a server to ask call it themselves.
		return nil, fmt.Errorf("probe %q asks a Prometheus server, which this target does not have; run it against the live twin", name)
	case spec.Kubernetes != nil:
		// internal/detect/probe/kubeprobe builds these from the cluster's API
		// server; only the k8s target has one.
		return nil, fmt.Errorf("probe %q asks the Kubernetes API server, which only the k8s target has", name)
	}
	return nil, fmt.Errorf("probe %q defines nothing: set detector, threshold, log, prometheus, workload or kubernetes", name)
}

// ThresholdRule writes a threshold probe as the alerting rule it is:
// `metric{labels} OP value` with for: For, or, for an absent probe,
// absent_over_time(metric{labels}[For]) (absent(metric{labels}), the 5m
// lookback with staleness, when For is under a second). Names must be
// Prometheus' classic ones ([a-zA-Z_:][a-zA-Z0-9_:]* for metrics): the
// quoted form of other names is Prometheus 3's, which the servers the k8s
// target asks need not understand. Label values are quoted by the PromQL
// printer, so any value round-trips.
func ThresholdRule(name string, th v1alpha1.ThresholdProbe) (*rules.Rule, error) {
	if !model.LegacyValidation.IsValidMetricName(th.Metric) {
		return nil, fmt.Errorf("probe %q: threshold metric %q is not a Prometheus metric name", name, th.Metric)
	}
	for k := range th.Labels {
		if !model.LegacyValidation.IsValidLabelName(k) || strings.HasPrefix(k, "__") {
			return nil, fmt.Errorf("probe %q: threshold label %q is not a Prometheus label name (or is reserved, starting with __)", name, k)
		}
	}
	ms := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, th.Metric)}
	for _, k := range slices.Sorted(maps.Keys(th.Labels)) {
		ms = append(ms, labels.MustNewMatcher(labels.MatchEqual, k, th.Labels[k]))
	}
	sel := (&parser.VectorSelector{Name: th.Metric, LabelMatchers: ms}).String()
	r := &rules.Rule{Source: "probe " + name, Group: name, Name: name, Kind: rules.KindAlert}
	switch {
	case th.Absent && th.For.Duration < time.Second:
		r.Expr = "absent(" + sel + ")"
	case th.Absent:
		r.Expr = "absent_over_time(" + sel + "[" + model.Duration(th.For.Duration).String() + "])"
	case !slices.Contains([]string{">", "<", ">=", "<=", "==", "!="}, th.Op):
		return nil, fmt.Errorf("probe %q: comparison %q is not one of > < >= <= == !=", name, th.Op)
	default:
		r.Expr = sel + " " + th.Op + " " + strconv.FormatFloat(th.Value, 'g', -1, 64)
		r.For = th.For.Duration
	}
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
	if err != nil {
		return nil, fmt.Errorf("probe %q: %s: %w", name, r.Expr, err)
	}
	r.Parsed = expr
	return r, nil
}

type renamed struct {
	Probe
	name string
}

func (r renamed) Name() string { return r.name }
