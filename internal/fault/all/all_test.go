package all

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// player and writer stand in for the twin and the kernel log: building an
// injector only keeps them.
type player struct{}

func (player) Apply(string, inventory.Ref, []catalog.Effect) error { return nil }
func (player) Revert(string) error                                 { return nil }

type writer struct{}

func (writer) Write(int, string) error { return nil }

// env is what each target gives its injectors, and the registry it
// builds them from.
func env(t *testing.T, target string) (fault.Env, fault.Registry) {
	switch target {
	case "twin":
		return TwinEnv(player{}, nil), Registry(nil)
	case "local":
		return fault.Env{Kmsg: writer{}, StateDir: t.TempDir()}, Registry(nil)
	case "k8s":
		// On k8s the node's agent builds the local injectors and the
		// controller the API ones, with its client. Building an API
		// injector only keeps the client; kubefault's tests run them
		// against a real API server.
		c, err := client.New(&rest.Config{Host: "https://127.0.0.1:1"}, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return fault.Env{Kmsg: writer{}, StateDir: t.TempDir()}, Registry(c)
	}
	t.Fatalf("no environment for target %s", target)
	return fault.Env{}, nil
}

// TestRegistryMatchesCatalogue holds the catalogue to what this build
// runs, both ways: every mechanism the catalogue lists as built for a
// target has exactly one registry entry that builds it there, every entry
// serves only mechanisms the catalogue lists as built on exactly its
// targets, and nothing planned has an injector.
func TestRegistryMatchesCatalogue(t *testing.T) {
	t.Parallel()
	reg := Registry(nil)
	serving := func(f *catalog.Fault, m *catalog.Mechanism) []fault.Entry {
		var es []fault.Entry
		for _, e := range reg {
			if e.Serves(f.ID, m.Name) {
				es = append(es, e)
			}
		}
		return es
	}
	for _, f := range catalog.All() {
		for i := range f.Mechanisms {
			m := &f.Mechanisms[i]
			es := serving(f, m)
			if len(es) > 1 {
				t.Errorf("%s via %s: %d registry entries, want one at most", f.ID, m.Name, len(es))
				continue
			}
			if len(es) == 0 {
				if len(m.Targets) > 0 {
					t.Errorf("%s via %s: the catalogue lists it as built for %v, but no injector is registered; move those targets to Planned or register one",
						f.ID, m.Name, m.Targets)
				}
				continue
			}
			e := es[0]
			if !slices.Equal(e.Targets, m.Targets) {
				t.Errorf("%s via %s: the injector runs on %v, the catalogue says built for %v", f.ID, m.Name, e.Targets, m.Targets)
			}
			for _, p := range m.Planned {
				if slices.Contains(e.Targets, p) {
					t.Errorf("%s via %s: planned for %s, yet an injector runs there", f.ID, m.Name, p)
				}
			}
			for _, target := range m.Targets {
				targetEnv, targetReg := env(t, target)
				in, err := targetReg.Injector(f, m, targetEnv)
				if err != nil || in == nil {
					t.Errorf("%s via %s on %s: %v", f.ID, m.Name, target, err)
				}
			}
		}
	}
	for _, e := range reg {
		if e.New == nil || len(e.Targets) == 0 {
			t.Errorf("entry %s: no constructor or no target", e.Mechanism)
		}
		for _, id := range e.Faults {
			f, ok := catalog.Lookup(id)
			if !ok {
				t.Errorf("entry %s serves %s, which is not in the catalogue", e.Mechanism, id)
				continue
			}
			if f.Mechanism(e.Mechanism) == nil {
				t.Errorf("entry %s serves %s, which has no such mechanism in the catalogue", e.Mechanism, id)
			}
		}
	}
}

// TestInjectorRefuses: what has no injector, and an env that lacks what
// an injector needs, are refused by name.
func TestInjectorRefuses(t *testing.T) {
	t.Parallel()
	lookup := func(id, mech string) (*catalog.Fault, *catalog.Mechanism) {
		f, ok := catalog.Lookup(id)
		if !ok || f.Mechanism(mech) == nil {
			t.Fatalf("%s via %s is not in the catalogue", id, mech)
		}
		return f, f.Mechanism(mech)
	}
	tests := []struct {
		name, fault, mech string
		env               fault.Env
		want              string
	}{
		{"planned", "nccl.p2p-off", "env", fault.Env{StateDir: t.TempDir()}, "mechanism env of nccl.p2p-off has no injector in this build"},
		{"planned for one fault, built for another", "workload.pod-kill", "signal", fault.Env{StateDir: t.TempDir()}, "mechanism signal of workload.pod-kill has no injector in this build"},
		{"twin without a twin", "hardware.xid", "twin", fault.Env{}, "needs the twin target"},
		{"kernel log without a writer", "hardware.xid", "kernel-log", fault.Env{}, "needs the kernel log of a local node"},
		{"no state directory", "workload.kill-rank", "signal", fault.Env{}, "mechanism signal of workload.kill-rank needs a state directory"},
		{"no API server", "workload.cordon-drain", "node-cordon", fault.Env{StateDir: t.TempDir()}, "mechanism node-cordon of workload.cordon-drain needs the API server"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, m := lookup(tc.fault, tc.mech)
			if _, err := Injector(f, m, tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Injector = %v, want an error with %q", err, tc.want)
			}
		})
	}
	if _, err := Injector(nil, nil, fault.Env{}); err == nil {
		t.Error("Injector(nil, nil) was accepted")
	}
}
