package probe

import (
	"context"
	"regexp"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/series"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
)

// logProbe holds while a matching kernel log line was written within the
// window before now, as a log watcher's alert would stay up.
type logProbe struct {
	name   string
	src    Source
	window time.Duration
	// match reports whether a line counts, and what it is about.
	match func(series.LogLine) (Subject, float64, bool)
}

func (p *logProbe) Name() string { return p.name }

func (p *logProbe) Observe(ctx context.Context) (Observation, error) {
	if err := ctx.Err(); err != nil {
		return Observation{}, err
	}
	now := p.src.Now()
	var obs Observation
	logs := p.src.Logs()
	for i := len(logs) - 1; i >= 0 && logs[i].Time.After(now.Add(-p.window)); i-- {
		l := logs[i]
		if l.Time.After(now) {
			continue
		}
		sub, v, ok := p.match(l)
		if !ok {
			continue
		}
		if !obs.Holds {
			obs = Observation{Holds: true, Value: v, Detail: l.Node + ": " + l.Text}
		}
		obs.Subjects = append(obs.Subjects, sub)
	}
	return obs, nil
}

// xidLine matches NVRM Xid lines; the subject carries the node and the
// line's PCI address, which the engine maps to the GPU. NVSwitch SXid lines
// name a switch, not a GPU, and do not count.
func xidLine(l series.LogLine) (Subject, float64, bool) {
	ev, ok := xid.ParseLine(l.Text)
	if !ok || ev.Kind != xid.KindXID {
		return Subject{}, 0, false
	}
	return Subject{Node: l.Node, PCI: ev.PCI}, float64(ev.Code), true
}

// regexpLine matches lines by a pattern; the subject is the node.
func regexpLine(re *regexp.Regexp) func(series.LogLine) (Subject, float64, bool) {
	return func(l series.LogLine) (Subject, float64, bool) {
		return Subject{Node: l.Node}, 0, re.MatchString(l.Text)
	}
}
