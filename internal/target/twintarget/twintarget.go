package engine

import (
	"context"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/all"
	"github.com/gpuchaos/gpuchaos/internal/inventory"
	"github.com/gpuchaos/gpuchaos/internal/probe"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// TwinTarget runs experiments on a digital twin, on its virtual clock.
type TwinTarget struct {
	Twin *twin.Twin
}

// Name returns "twin".
func (TwinTarget) Name() string { return "twin" }

// Now returns the twin's virtual time.
func (t TwinTarget) Now() time.Time { return t.Twin.Now() }

// Sleep advances the twin's simulation by d.
func (t TwinTarget) Sleep(ctx context.Context, d time.Duration) error { return t.Twin.Sleep(ctx, d) }

// Inventory returns the twin's nodes, GPUs and jobs.
func (t TwinTarget) Inventory(context.Context) (inventory.Inventory, error) {
	return t.Twin.Inventory(), nil
}

// Injector returns the twin injector of the fault.
func (t TwinTarget) Injector(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error) {
	return all.Injector(f, m, all.Env{Twin: t.Twin})
}

// Probe builds a probe over the twin's series and kernel log.
func (t TwinTarget) Probe(name string, spec v1alpha1.ProbeSpec) (probe.Probe, error) {
	return probe.FromSpec(name, spec, t.Twin)
}
