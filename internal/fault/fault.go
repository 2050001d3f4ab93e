// Package fault defines the contract every injector keeps. Injectors live in
// subpackages, one per mechanism family; internal/fault/all lists them, and
// internal/fault/faulttest is the conformance suite each must pass.
package fault

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/inventory"
)

// ErrTargetGone reports that the target of an injection no longer exists
// (a GPU fell off the bus, a process exited), and with it everything the
// injection changed. Recover returns it only with the proof in the error's
// text (what it looked at); callers treat it as success.
var ErrTargetGone = errors.New("target gone")

// ErrUnproven reports that Recover could neither undo an injection nor
// prove that its target is gone (it could not look everywhere the target
// may live on). The injection stays pending: its record is kept, so a
// later recovery tries again; callers report it, never as recovered.
var ErrUnproven = errors.New("cannot prove the target gone")

// Injector causes one fault through one mechanism on one target at a time.
//
// Inject and Recover are symmetric and safe to repeat: injecting an already
// injected key is a no-op, and recovering a key that is not injected (never
// was, already recovered) succeeds. Recover returns nil only when what the
// key changed is undone, ErrTargetGone only when it has proved that the
// target, and the change with it, no longer exists, and any other error
// (ErrUnproven when it could not tell) while the change may still be in
// effect. The engine writes
// the ledger record before it calls Inject, so a crash between the two is
// recovered by calling Recover with the same key. Both honour ctx: a cancelled
// Inject leaves nothing applied or returns an error after which Recover
// cleans up. Implementations must be safe for concurrent use with distinct
// keys.
type Injector interface {
	Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error
	Recover(ctx context.Context, key string) error
}

// CheckMechanism says whether mechanism m of fault f is the one an
// injector package implements for it; want maps each fault id the package
// serves to its mechanism, and pkg names the package in errors.
func CheckMechanism(pkg string, f *catalog.Fault, m *catalog.Mechanism, want map[string]string) error {
	if f == nil || m == nil {
		return fmt.Errorf("%s: a fault and a mechanism are required", pkg)
	}
	w, ok := want[f.ID]
	if !ok {
		return fmt.Errorf("%s: fault %s is not one of this package's", pkg, f.ID)
	}
	if m.Name != w {
		return fmt.Errorf("%s: mechanism %s of %s is not implemented here (%s is)", pkg, m.Name, f.ID, w)
	}
	return nil
}
