package engine

import (
	"context"
	"net/http"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/all"
	"github.com/gpuchaos/gpuchaos/internal/inventory"
	"github.com/gpuchaos/gpuchaos/internal/probe"
	"github.com/gpuchaos/gpuchaos/internal/probe/promapi"
	"github.com/gpuchaos/gpuchaos/internal/tick"
	"github.com/gpuchaos/gpuchaos/internal/twin"
	"github.com/gpuchaos/gpuchaos/internal/twin/live"
)

// LiveTarget runs experiments on a twin running in real time (a
// live.Runner whose /metrics a real Prometheus scrapes), on the wall clock.
// Faults go through the twin mechanism, as on TwinTarget; Prometheus probes
// ask the real server, and every other probe reads the twin under the
// runner's lock.
type LiveTarget struct {
	Runner *live.Runner
	// Prometheus is the base URL Prometheus probes without a url of their
	// own ask, such as http://127.0.0.1:9090.
	Prometheus string
	// Client sends Prometheus queries; nil means http.DefaultClient.
	Client *http.Client
}

// Name returns "twin": the faults are the twin's, so the twin mechanism
// applies.
func (LiveTarget) Name() string { return "twin" }

// Now returns the wall-clock time.
func (LiveTarget) Now() time.Time { return time.Now() }

// Sleep waits for d of wall time, returning ctx.Err() early when ctx ends.
func (LiveTarget) Sleep(ctx context.Context, d time.Duration) error { return tick.Sleep(ctx, d) }

// Inventory returns the twin's nodes, GPUs and jobs.
func (t LiveTarget) Inventory(ctx context.Context) (inventory.Inventory, error) {
	return t.Runner.Inventory(), ctx.Err()
}

// Injector returns the twin injector of the fault, acting through the
// runner so that every change takes its lock.
func (t LiveTarget) Injector(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error) {
	return all.Injector(f, m, all.Env{Twin: t.Runner})
}

// Probe builds a Prometheus probe against the real server, or any other
// probe over the twin's series and log with the runner's lock held while
// it observes.
func (t LiveTarget) Probe(name string, spec v1alpha1.ProbeSpec) (probe.Probe, error) {
	if spec.Prometheus != nil {
		return promapi.FromSpec(name, *spec.Prometheus, t.Prometheus, t.Client)
	}
	var (
		p   probe.Probe
		err error
	)
	// The probe keeps the twin as its source but reads it only in
	// Observe, which lockedProbe runs under the lock.
	t.Runner.WithTwin(func(tw *twin.Twin) { p, err = probe.FromSpec(name, spec, tw) })
	if err != nil {
		return nil, err
	}
	return lockedProbe{p, t.Runner}, nil
}

// lockedProbe observes a probe over the live twin with the runner's lock
// held, since the twin is advancing in another goroutine.
type lockedProbe struct {
	probe.Probe
	runner *live.Runner
}

func (l lockedProbe) Observe(ctx context.Context) (obs probe.Observation, err error) {
	l.runner.WithTwin(func(*twin.Twin) { obs, err = l.Probe.Observe(ctx) })
	return obs, err
}
