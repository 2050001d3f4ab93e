// Package fault defines the contract every injector keeps: the Injector
// interface, the Env a target gives its injectors, and the Entry each
// injector package registers for every mechanism it runs. Injectors live
// in subpackages, one per mechanism family, each listing its own entries
// (an Entries function); internal/fault/nodeall joins those that act on
// the machine itself, internal/fault/all joins those with the twin's and
// the API server's, and internal/fault/faulttest is the conformance suite
// each injector must pass.
//
// This package links neither the twin nor a Kubernetes client, so that
// the node agent, which builds its injectors from nodeall, links neither
// either. The twin reaches its injector through TwinPlayer, a small
// interface in catalogue and inventory terms declared here for Env. The
// API server's client is not in Env at all: kubefault.Entries builds its
// entries with the client they act through, which keeps every client type
// in kubefault, the one package that needs it.
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
// package runs: f is one of the faults its entries serve, m one of their
// mechanisms, and the catalogue lists m among f's mechanisms as built for
// a target. Which mechanism goes with which fault is the catalogue's to
// say, and a test of the registry holds the entries to it. pkg names the
// package in errors.
func CheckMechanism(pkg string, f *catalog.Fault, m *catalog.Mechanism, entries Registry) error {
	if f == nil || m == nil {
		return fmt.Errorf("%s: a fault and a mechanism are required", pkg)
	}
	if !entries.servesFault(f) {
		return fmt.Errorf("%s: fault %s is not one of this package's", pkg, f.ID)
	}
	mechanisms := entries.Mechanisms()
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
