package probe

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
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
		th := spec.Threshold
		var e Expr
		if th.Absent {
			e = absent(src, th.Metric, th.Labels, th.For.Duration)
		} else if !slices.Contains([]string{">", "<", ">=", "<=", "==", "!="}, th.Op) {
			return nil, fmt.Errorf("probe %q: comparison %q is not one of > < >= <= == !=", name, th.Op)
		} else {
			e = For(Compare(Selector(src, th.Metric, th.Labels), th.Op, th.Value), th.For.Duration, EvalInterval)
		}
		return &exprProbe{name: name, src: src, expr: e}, nil
	case spec.Log != nil:
		re, err := regexp.Compile(spec.Log.Pattern)
		if err != nil {
			return nil, fmt.Errorf("log pattern: %w", err)
		}
		return &logProbe{name: name, src: src, window: xidWindow, match: regexpLine(re)}, nil
	case spec.Workload != nil:
		return newWorkload(name, *spec.Workload, src), nil
	case spec.Prometheus != nil:
		// internal/probe/promapi builds these; it imports this package, so
		// the targets that have a server to ask call it themselves.
		return nil, fmt.Errorf("probe %q asks a Prometheus server, which this target does not have; run it against the live twin", name)
	}
	return nil, fmt.Errorf("probe %q defines nothing: set detector, threshold, log, prometheus or workload", name)
}

// absent holds, with an empty label set, when no matching series has a
// sample in the last d (the 5m lookback when d is under a second), as
// absent_over_time does.
func absent(src Source, metric string, m map[string]string, d time.Duration) Expr {
	if d < time.Second {
		d = LookbackDelta
	}
	return func(t time.Time) Vector {
		for _, s := range src.Select(metric) {
			if matches(s.Labels, m) {
				if _, ok := at(s.Samples, t, d); ok {
					return nil
				}
			}
		}
		return Vector{{}}
	}
}

type renamed struct {
	Probe
	name string
}

func (r renamed) Name() string { return r.name }
