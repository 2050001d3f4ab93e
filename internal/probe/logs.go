package probe

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/xid"
)

// xidLogProbe holds while an XID line was logged within the window. Its
// subjects carry the node and the line's PCI address, which the engine maps
// to the GPU.
type xidLogProbe struct {
	name   string
	src    Source
	window time.Duration
}

func (p *xidLogProbe) Name() string { return p.name }

func (p *xidLogProbe) Observe(ctx context.Context) (Observation, error) {
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
		// ParseLine also reads NVSwitch SXids; they carry a switch's
		// address, not a GPU's, and are not what this watcher matches.
		ev, ok := xid.ParseLine(l.Text)
		if !ok || ev.Kind != xid.KindXID {
			continue
		}
		if !obs.Holds {
			obs = Observation{Holds: true, Value: float64(ev.Code), Detail: l.Node + ": " + l.Text}
		}
		obs.Subjects = append(obs.Subjects, Subject{Node: l.Node, PCI: ev.PCI})
	}
	return obs, nil
}

// logProbe holds while a line matching its pattern was logged within the
// window.
type logProbe struct {
	name   string
	src    Source
	re     *regexp.Regexp
	window time.Duration
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
		if l.Time.After(now) || !p.re.MatchString(l.Text) {
			continue
		}
		if !obs.Holds {
			obs = Observation{Holds: true, Detail: fmt.Sprintf("%s: %s", l.Node, l.Text)}
		}
		obs.Subjects = append(obs.Subjects, Subject{Node: l.Node})
	}
	return obs, nil
}
