package probe

import (
	"context"
	"time"
)

// Subject is what an observation is about, in the labels exporters use: a
// GPU (Node and GPU index or UUID), a node, or a job. Empty fields are
// unknown, not wildcards; the engine decides what counts as a match.
type Subject struct {
	Node string `json:"node,omitempty"`
	GPU  string `json:"gpu,omitempty"`
	UUID string `json:"uuid,omitempty"`
	// PCI is the bus id in the kernel's domain:bus:device form, as XID lines
	// carry it (0000:18:00).
	PCI string `json:"pci,omitempty"`
	Job string `json:"job,omitempty"`
}

// Observation is one evaluation of a probe's condition.
type Observation struct {
	// Holds is true when the condition holds: a detector fires, a
	// steady-state check is satisfied, an abort condition is met.
	Holds bool `json:"holds"`
	// Subjects are the objects the condition holds for, when it does.
	Subjects []Subject `json:"subjects,omitempty"`
	// Value is the most extreme value behind the verdict, when there is one.
	Value  float64 `json:"value"`
	Detail string  `json:"detail,omitempty"`
	// At is when what the observation reports happened, when the probe
	// reads it from history more precisely than the moment it was asked
	// (a workload probe finds the scrape at which the job resumed); zero
	// means now.
	At time.Time `json:"at,omitzero"`
	// Failed is set with Holds by probes that measure against a bound (the
	// workload checks): the measurement is complete and outside it.
	Failed bool `json:"failed,omitempty"`
}

// Anchor is what an engine knows of its run that a probe judging the run
// itself needs.
type Anchor struct {
	// Injected is when the faults were injected.
	Injected time.Time
	// Recovered is when they were recovered; zero until then.
	Recovered time.Time
	// Within is the expectation's deadline after Injected.
	Within time.Duration
	// Jobs are the training jobs the run touches.
	Jobs []string
}

// Anchored is a probe whose observations are relative to its run. The
// engine calls SetAnchor at injection and again at recovery, and keeps
// observing it after recovery until Within has passed, since such a
// measurement (a resume, a rate coming back, a goodput over a window) can
// complete only then.
type Anchored interface {
	Probe
	SetAnchor(Anchor)
	// History is how much of the source's history before injection the
	// probe needs (a baseline); the engine waits for it on a target that
	// starts recording when the run starts.
	History() time.Duration
}

// Probe evaluates one condition at the current time of its source.
//
// Observe must not block beyond reading its source and must honour ctx. It
// is called repeatedly by the engine on a fixed interval; implementations
// evaluate from the source's history each time (no state between calls), so
// missed calls lose nothing. Implementations are safe for concurrent use
// when their source is.
type Probe interface {
	Name() string
	Observe(ctx context.Context) (Observation, error)
}
