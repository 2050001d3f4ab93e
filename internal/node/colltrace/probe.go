package colltrace

import (
	"context"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
)

// Reporter gives the tracker's current verdict; *Tracer is one.
type Reporter interface {
	Report() Report
}

// ProbeOptions configure NewProbe.
type ProbeOptions struct {
	// Node names the machine in the subjects.
	Node string
	// Subject maps a rank to the subject it is reported as; nil means the
	// node only. A target that knows which GPU or job a process drives
	// can name it here.
	Subject func(Rank) probe.Subject
}

// Probe is a detector that holds while the tracer sees a straggler or a
// hung rank. It keeps no state between calls: each Observe reads the
// tracer's current report.
type Probe struct {
	name string
	src  Reporter
	opts ProbeOptions
}

var _ probe.Probe = (*Probe)(nil)

// NewProbe returns a probe over src's reports.
func NewProbe(name string, src Reporter, opts ProbeOptions) *Probe {
	if opts.Subject == nil {
		node := opts.Node
		opts.Subject = func(Rank) probe.Subject { return probe.Subject{Node: node} }
	}
	return &Probe{name: name, src: src, opts: opts}
}

// Name returns the probe's name.
func (p *Probe) Name() string { return p.name }

// Observe holds when the report names a straggler or hung rank. The
// subjects are those ranks (one each, in the report's order, hung first),
// the value the largest lag or time behind in seconds, the detail the
// findings joined.
func (p *Probe) Observe(ctx context.Context) (probe.Observation, error) {
	if err := ctx.Err(); err != nil {
		return probe.Observation{}, err
	}
	r := p.src.Report()
	var obs probe.Observation
	var details []string
	for _, f := range r.Findings {
		obs.Holds = true
		obs.Subjects = append(obs.Subjects, p.opts.Subject(f.Rank))
		obs.Value = max(obs.Value, f.Value.Seconds())
		details = append(details, f.Detail)
	}
	obs.Detail = strings.Join(details, "; ")
	return obs, nil
}
