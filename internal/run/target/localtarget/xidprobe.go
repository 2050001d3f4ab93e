package localtarget

import (
	"context"
	"strconv"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/node/xidwatch"
)

// xidProbe is the kmsg-xid detector on this node: it holds once an XID
// matching its condition has been read since the probe was made. It
// evaluates from the watcher's history on each call, so it keeps no state
// between calls; an XID that has left the history (more than
// xidwatch.Options.History newer XIDs) no longer counts. It lives here,
// beside its one user, rather than in xidwatch, so that the node agent,
// which links the watcher, does not link the probes and PromQL with it.
type xidProbe struct {
	name  string
	w     *xidwatch.Watcher
	node  string
	since time.Time
	match func(xidwatch.Event) bool
}

// newXIDProbe returns a probe over w that holds when an XID for which
// match reports true (any XID when match is nil) was read at or after
// now. node names the machine in the probe's subjects.
func newXIDProbe(w *xidwatch.Watcher, name, node string, match func(xidwatch.Event) bool) *xidProbe {
	return &xidProbe{name: name, w: w, node: node, since: w.Now(), match: match}
}

var _ probe.Probe = (*xidProbe)(nil)

// Name returns the probe's name.
func (p *xidProbe) Name() string { return p.name }

// Observe reports whether a matching XID was read since the probe was
// made; the subjects are the GPUs it was read for, the value the code of
// the newest one.
func (p *xidProbe) Observe(ctx context.Context) (probe.Observation, error) {
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
