// Package fault defines the contract every injector keeps. Injectors live in
// subpackages, one per mechanism family; internal/fault/all lists them, and
// internal/fault/faulttest is the conformance suite each must pass.
package fault

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
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

// CheckMechanism says whether mechanism m of fault f is one an injector
// package runs: f is one of the faults it serves, m one of the mechanisms
// it has code for, and the catalogue lists m among f's mechanisms as built
// for a target. Which mechanism goes with which fault is the catalogue's
// to say; a package only lists what it can run, so the two cannot
// disagree. pkg names the package in errors.
func CheckMechanism(pkg string, f *catalog.Fault, m *catalog.Mechanism, faults, mechanisms []string) error {
	if f == nil || m == nil {
		return fmt.Errorf("%s: a fault and a mechanism are required", pkg)
	}
	if !slices.Contains(faults, f.ID) {
		return fmt.Errorf("%s: fault %s is not one of this package's", pkg, f.ID)
	}
	if cm := f.Mechanism(m.Name); cm != nil && len(cm.Targets) > 0 && slices.Contains(mechanisms, m.Name) {
		return nil
	}
	ours := Built(f, mechanisms)
	switch len(ours) {
	case 0:
		return fmt.Errorf("%s: mechanism %s of %s is not implemented here (the catalogue lists none of %s as built)", pkg, m.Name, f.ID, strings.Join(mechanisms, ", "))
	case 1:
		return fmt.Errorf("%s: mechanism %s of %s is not implemented here (%s is)", pkg, m.Name, f.ID, ours[0])
	}
	return fmt.Errorf("%s: mechanism %s of %s is not implemented here (%s are)", pkg, m.Name, f.ID, strings.Join(ours, " and "))
}

// Built returns the mechanisms of f, among those named, that the catalogue
// lists as built for a target, in the catalogue's order: the ones of f an
// injector package with code for those names runs.
func Built(f *catalog.Fault, names []string) []string {
	var built []string
	for _, m := range f.Mechanisms {
		if len(m.Targets) > 0 && slices.Contains(names, m.Name) {
			built = append(built, m.Name)
		}
	}
	return built
}
