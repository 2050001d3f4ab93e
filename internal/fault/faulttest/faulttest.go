// Package faulttest is the conformance suite every injector passes, in the
// manner of testing/slogtest: inject twice, inject then recover twice,
// recover with nothing injected, a cancelled context, and a target that
// vanished, after which Recover may say gone only with its proof on one
// line and then forget the key, or stay unproven. Each check uses a fresh
// injector and target from the Case.
package faulttest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// Env is one fresh injector with its target.
type Env struct {
	Injector fault.Injector
	Ref      inventory.Ref
	Values   catalog.Values
	// Applied reports, by looking at the target rather than asking the
	// injector, whether the key's fault is in effect.
	Applied func(key string) bool
	// Count, set instead of Applied, is for one-shot faults that recovery
	// cannot undo (a line written to the kernel log): it counts the
	// effects seen on the target, which injecting a key must raise by one
	// exactly once and recovering must leave as they are.
	Count func() int
	// Vanish makes the target disappear (a GPU falls off the bus, a
	// process exits). Nil skips the vanished-target check.
	Vanish func()
}

// Run runs every check against fresh environments from newEnv.
func Run(t *testing.T, newEnv func(t *testing.T) Env) {
	t.Helper()
	const key = "faulttest/0"
	ctx := context.Background()

	t.Run("inject twice is one injection", func(t *testing.T) {
		e := newEnv(t)
		if e.Count != nil {
			must(t, "first inject", e.Injector.Inject(ctx, key, e.Ref, e.Values))
			must(t, "second inject", e.Injector.Inject(ctx, key, e.Ref, e.Values))
			must(t, "recover", e.Injector.Recover(ctx, key))
			if n := e.Count(); n != 1 {
				t.Fatalf("%d effects after two injects of one key and a recover, want 1", n)
			}
			return
		}
		must(t, "first inject", e.Injector.Inject(ctx, key, e.Ref, e.Values))
		must(t, "second inject", e.Injector.Inject(ctx, key, e.Ref, e.Values))
		if !e.Applied(key) {
			t.Fatal("fault not in effect after inject")
		}
		must(t, "recover", e.Injector.Recover(ctx, key))
		if e.Applied(key) {
			t.Fatal("one recover did not undo two injects of the same key")
		}
	})
	t.Run("recover twice", func(t *testing.T) {
		e := newEnv(t)
		must(t, "inject", e.Injector.Inject(ctx, key, e.Ref, e.Values))
		must(t, "first recover", e.Injector.Recover(ctx, key))
		must(t, "second recover", e.Injector.Recover(ctx, key))
		if e.Count != nil {
			if n := e.Count(); n != 1 {
				t.Fatalf("%d effects after inject and two recovers, want 1", n)
			}
			return
		}
		if e.Applied(key) {
			t.Fatal("fault still in effect after recover")
		}
	})
	t.Run("recover with nothing injected", func(t *testing.T) {
		e := newEnv(t)
		must(t, "recover", e.Injector.Recover(ctx, key))
		if e.applied(key) {
			t.Fatal("recover applied something")
		}
	})
	t.Run("cancelled context", func(t *testing.T) {
		e := newEnv(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := e.Injector.Inject(cctx, key, e.Ref, e.Values)
		if err == nil && !e.applied(key) {
			t.Fatal("inject with a cancelled context reported success but applied nothing")
		}
		must(t, "recover after cancelled inject", e.Injector.Recover(ctx, key))
		if e.Count != nil {
			if err != nil && e.Count() != 0 {
				t.Fatal("a cancelled inject that failed left an effect")
			}
			return
		}
		if e.Applied(key) {
			t.Fatal("fault left in effect after a cancelled inject and recover")
		}
	})
	t.Run("target vanished", func(t *testing.T) {
		e := newEnv(t)
		if e.Vanish == nil {
			t.Skip("the case cannot make its target vanish")
		}
		must(t, "inject", e.Injector.Inject(ctx, key, e.Ref, e.Values))
		e.Vanish()
		err := e.Injector.Recover(ctx, key)
		if errors.Is(err, fault.ErrUnproven) {
			// Where it could not look everywhere the target may live on
			// (a sandbox hides a process), the key must stay pending:
			// asking again cannot turn into a quiet success.
			if err := e.Injector.Recover(ctx, key); !errors.Is(err, fault.ErrUnproven) {
				t.Fatalf("second recover of an unproven key: %v, want it still unproven", err)
			}
			return
		}
		if err != nil && !errors.Is(err, fault.ErrTargetGone) {
			t.Fatalf("recover after the target vanished: %v", err)
		}
		if err == nil {
			return
		}
		// Gone is believed only with what it rests on, on one line: more
		// than "recover FAULT: target gone".
		if rest := strings.ReplaceAll(err.Error(), fault.ErrTargetGone.Error(), ""); strings.Count(rest, ":") < 2 || strings.Contains(rest, "\n") {
			t.Fatalf("recover after the target vanished says gone without its proof on one line: %q", err)
		}
		// A gone key is forgotten: asking again recovers nothing.
		must(t, "second recover of a gone key", e.Injector.Recover(ctx, key))
	})
}

// applied reports whether anything of the key is in effect, by Applied or,
// for one-shot faults, by any effect counted.
func (e Env) applied(key string) bool {
	if e.Count != nil {
		return e.Count() > 0
	}
	return e.Applied(key)
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Values resolves the parameters of catalogue fault id from raw as the
// engine does (defaults laid under them), failing the test on a bad id or
// value.
func Values(t testing.TB, id string, raw map[string]string) catalog.Values {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("%s is not in the catalogue", id)
	}
	v, err := f.Resolve(raw)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return v
}

// BuiltMechanisms maps each fault id an injector package's entries name to
// the mechanisms the catalogue lists as built for it among the package's
// (fault.Built), for tests that build an injector by fault id.
func BuiltMechanisms(entries fault.Registry) map[string][]string {
	m := map[string][]string{}
	names := entries.Mechanisms()
	for _, id := range entries.FaultIDs() {
		if f, ok := catalog.Lookup(id); ok {
			m[id] = fault.Built(f, names)
		}
	}
	return m
}

// FirstBuilt is BuiltMechanisms with each fault's first built mechanism;
// faults with none are left out.
func FirstBuilt(entries fault.Registry) map[string]string {
	m := map[string]string{}
	for id, built := range BuiltMechanisms(entries) {
		if len(built) > 0 {
			m[id] = built[0]
		}
	}
	return m
}
