// Package twintarget is the twin target: experiments on a digital twin, on
// its virtual clock, so a 30-minute experiment runs in milliseconds.
package twintarget

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/all"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// Open builds the twin of cfg.Cluster (the embedded default when empty)
// with cfg.Seed; Prepare runs it fault-free for cfg.Warmup.
func Open(_ context.Context, cfg target.Config) (target.Target, error) {
	spec, err := Spec(cfg)
	if err != nil {
		return nil, err
	}
	tw, err := twin.New(twin.Options{Spec: spec, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	t := New(tw)
	t.warmup, t.notes, t.env = cfg.Warmup, cfg.Notes, all.TwinEnv(tw, cfg.Logger)
	return t, nil
}

// Spec checks the twin's part of cfg (the warm-up) and loads its cluster
// spec, refusing either as bad input; the live target builds its twin from
// the same.
func Spec(cfg target.Config) (twin.ClusterSpec, error) {
	if err := twin.CheckWarmup("--warmup", cfg.Warmup); err != nil {
		return twin.ClusterSpec{}, &target.ConfigError{Err: err}
	}
	spec, err := twin.LoadCluster(cfg.Cluster)
	if err != nil {
		return twin.ClusterSpec{}, &target.ConfigError{Field: "--cluster", Err: err}
	}
	return spec, nil
}

// Target runs experiments on a digital twin.
type Target struct {
	Twin *twin.Twin

	warmup time.Duration
	notes  io.Writer
	env    fault.Env
}

// New returns a target over tw, with no warm-up.
func New(tw *twin.Twin) *Target {
	return &Target{Twin: tw, notes: io.Discard, env: all.TwinEnv(tw, nil)}
}

// Kind returns target.Twin.
func (*Target) Kind() target.Kind { return target.Twin }

// Now returns the twin's virtual time.
func (t *Target) Now() time.Time { return t.Twin.Now() }

// Sleep advances the twin's simulation by d.
func (t *Target) Sleep(ctx context.Context, d time.Duration) error { return t.Twin.Sleep(ctx, d) }

// Inventory returns the twin's nodes, GPUs and jobs.
func (t *Target) Inventory(context.Context) (inventory.Inventory, error) {
	return t.Twin.Inventory(), nil
}

// Injector returns the twin injector of the fault.
func (t *Target) Injector(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error) {
	return all.Injector(f, m, t.env)
}

// Probe builds a probe over the twin's series and kernel log.
func (t *Target) Probe(name string, spec v1alpha1.ProbeSpec) (probe.Probe, error) {
	return probe.FromSpec(name, spec, t.Twin)
}

// Settings polls every 15 s, as a Prometheus rule group would evaluate,
// and keeps the ledger in memory: nothing outlives the process.
func (*Target) Settings() target.Settings {
	return target.Settings{PollInterval: 15 * time.Second, RecoveryWindow: 10 * time.Minute}
}

// Prepare runs the twin fault-free for the warm-up, so baselines exist.
func (t *Target) Prepare(ctx context.Context) error {
	if t.warmup <= 0 {
		return nil
	}
	fmt.Fprintf(t.notes, "Warming the twin up for %s of virtual time.\n", t.warmup)
	return t.Twin.Sleep(ctx, t.warmup)
}

// Close does nothing: the twin holds no resources.
func (*Target) Close() error { return nil }
