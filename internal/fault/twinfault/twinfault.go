// Package twinfault injects catalogue faults into the digital twin by playing
// each fault's signature. It is the twin mechanism of every fault.
package twinfault

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// Entries lists the twin mechanism, which every fault of the catalogue
// has, for the registry (internal/fault/all): it plays the fault on the
// twin the target's Env carries.
func Entries() []fault.Entry {
	return []fault.Entry{{Mechanism: catalog.MechanismTwin, Targets: []string{"twin"}, New: newFromEnv}}
}

func newFromEnv(f *catalog.Fault, _ *catalog.Mechanism, env fault.Env) (fault.Injector, error) {
	if env.Twin == nil {
		return nil, fmt.Errorf("mechanism twin of %s needs the twin target", f.ID)
	}
	return New(f, env.Twin), nil
}

// Injector plays one fault's signature on a twin.
type Injector struct {
	fault  *catalog.Fault
	player fault.TwinPlayer
}

// New returns the twin injector for a fault. *twin.Twin is a player.
func New(f *catalog.Fault, p fault.TwinPlayer) *Injector { return &Injector{fault: f, player: p} }

// Inject plays the fault's effects for the resolved values on ref.
func (in *Injector) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := in.player.Apply(key, ref, in.fault.Signature.Effects(v)); err != nil {
		if errors.Is(err, twin.ErrTargetGone) {
			err = fmt.Errorf("%w: %w", fault.ErrTargetGone, err)
		}
		return fmt.Errorf("inject %s on twin: %w", in.fault.ID, err)
	}
	return nil
}

// Recover reverts whatever key applied.
func (in *Injector) Recover(ctx context.Context, key string) error {
	if err := in.player.Revert(key); err != nil {
		return fmt.Errorf("recover %s on twin: %w", in.fault.ID, err)
	}
	return nil
}
