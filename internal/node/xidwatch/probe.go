package xidwatch

import (
	"context"
	"strconv"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
)

// Probe holds once an XID matching its condition has been read since the
// probe was made. It evaluates from the watcher's history on each call, so
// it keeps no state between calls; an XID that has left the history (more
// than Options.History newer XIDs) no longer counts.
type Probe struct {
	name  string
	w     *Watcher
	node  string
	since time.Time
	match func(Event) bool
}

// NewProbe returns a probe over w that holds when an XID for which match
// reports true (any XID when match is nil) was read at or after now. node
// names the machine in the probe's subjects.
func NewProbe(w *Watcher, name, node string, match func(Event) bool) *Probe {
	return &Probe{name: name, w: w, node: node, since: w.opts.Now(), match: match}
}

var _ probe.Probe = (*Probe)(nil)

// Name returns the probe's name.
func (p *Probe) Name() string { return p.name }

// Observe reports whether a matching XID was read since the probe was
// made; the subjects are the GPUs it was read for, the value the code of
// the newest one.
func (p *Probe) Observe(ctx context.Context) (probe.Observation, error) {
	if err := ctx.Err(); err != nil {
		return probe.Observation{}, err
	}
	evs := p.w.Events()
	var obs probe.Observation
	for i := len(evs) - 1; i >= 0; i-- {
		ev := evs[i]
		if ev.Time.Before(p.since) {
			break
		}
		if p.match != nil && !p.match(ev) {
			continue
		}
		if !obs.Holds {
			obs = probe.Observation{Holds: true, Value: float64(ev.Code), Detail: ev.Line}
		}
		sub := probe.Subject{Node: p.node, UUID: ev.UUID, PCI: ev.PCI}
		if ev.GPU >= 0 {
			sub.GPU = strconv.Itoa(ev.GPU)
		}
		obs.Subjects = append(obs.Subjects, sub)
	}
	return obs, nil
}
