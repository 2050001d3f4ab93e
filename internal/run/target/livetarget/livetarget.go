// Package livetarget is the live target: the twin running in real time,
// its /metrics served for a real Prometheus to scrape, and the experiment
// on the wall clock, so expectations can ask that Prometheus.
package livetarget

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe/promapi"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/all"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/tick"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
	"github.com/gpuchaos/gpuchaos/internal/run/target/twintarget"
	"github.com/gpuchaos/gpuchaos/internal/twin"
	"github.com/gpuchaos/gpuchaos/internal/twin/live"
)

// Open warms a twin of cfg.Cluster up for cfg.Warmup, then runs it in real
// time and serves its /metrics on cfg.Listen until Close. A dry run plans
// on a virtual twin of the same cluster: the inventory is the same and
// nothing is served.
func Open(ctx context.Context, cfg target.Config) (target.Target, error) {
	if cfg.DryRun {
		t, err := twintarget.Open(ctx, target.Config{Cluster: cfg.Cluster, Seed: cfg.Seed, Notes: io.Discard, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		return dryRun{t}, nil
	}
	spec, err := twintarget.Spec(cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Notes, "Warming the twin up for %s of virtual time.\n", cfg.Warmup)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	log := cfg.Logger.With("component", "live-twin")
	r, err := live.New(ctx, live.Options{Twin: twin.Options{Spec: spec, Seed: cfg.Seed}, Warmup: cfg.Warmup, Logger: log})
	if err != nil {
		cancel()
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		cancel()
		return nil, &target.ConfigError{Field: "--listen", Err: err}
	}
	fmt.Fprintf(cfg.Notes, "Serving the twin's metrics at http://%s/metrics; probes ask %s.\n", ln.Addr(), cfg.Prometheus)
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, ln) }()
	t := New(r, cfg.Prometheus)
	t.settle, t.notes, t.log = cfg.Settle, cfg.Notes, cfg.Logger
	t.stop = func() error { cancel(); return <-done }
	return t, nil
}

// Target runs experiments on a live.Runner on the wall clock. Faults go
// through the twin mechanism, as on the twin target; Prometheus probes ask
// the real server, and every other probe reads the twin under the runner's
// lock.
type Target struct {
	Runner *live.Runner
	// Prometheus is the base URL Prometheus probes without a url of their
	// own ask, such as http://127.0.0.1:9090.
	Prometheus string
	// Client sends Prometheus queries; nil means http.DefaultClient.
	Client *http.Client

	settle time.Duration
	notes  io.Writer
	log    *slog.Logger
	stop   func() error
}

// New returns a target over a runner that someone else starts and serves.
func New(r *live.Runner, prometheus string) *Target {
	return &Target{Runner: r, Prometheus: prometheus, notes: io.Discard, log: slog.New(slog.DiscardHandler)}
}

// Kind returns target.Live.
func (*Target) Kind() target.Kind { return target.Live }

// Now returns the wall-clock time.
func (*Target) Now() time.Time { return time.Now() }

// Sleep waits for d of wall time, returning ctx.Err() early when ctx ends.
func (*Target) Sleep(ctx context.Context, d time.Duration) error { return tick.Sleep(ctx, d) }

// Inventory returns the twin's nodes, GPUs and jobs.
func (t *Target) Inventory(ctx context.Context) (inventory.Inventory, error) {
	return t.Runner.Inventory(), ctx.Err()
}

// Injector returns the twin injector of the fault, acting through the
// runner so that every change takes its lock.
func (t *Target) Injector(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error) {
	return all.Injector(f, m, all.TwinEnv(t.Runner, t.log))
}

// Probe builds a Prometheus probe against the real server, or any other
// probe over the twin's series and log with the runner's lock held while
// it observes.
func (t *Target) Probe(name string, spec v1alpha1.ProbeSpec) (probe.Probe, error) {
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

// Settings polls every second: Prometheus answers on the wall clock.
func (*Target) Settings() target.Settings {
	return target.Settings{PollInterval: time.Second, RecoveryWindow: 10 * time.Minute}
}

// Prepare lets Prometheus scrape the fault-free twin for the settle time.
func (t *Target) Prepare(ctx context.Context) error {
	if t.settle <= 0 {
		return nil
	}
	fmt.Fprintf(t.notes, "Letting Prometheus scrape the fault-free twin for %s.\n", t.settle)
	return t.Sleep(ctx, t.settle)
}

// Close stops serving and the twin, when Open started them.
func (t *Target) Close() error {
	if t.stop == nil {
		return nil
	}
	return t.stop()
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

// dryRun plans a live run on a virtual twin: the same inventory and
// mechanisms, under the live kind.
type dryRun struct{ target.Target }

func (dryRun) Kind() target.Kind { return target.Live }
