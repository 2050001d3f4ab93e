// Package all joins every injector of this build: the twin's
// (twinfault), the node's (internal/fault/nodeall) and the API server's
// (kubefault). Each injector package lists its own entries (mechanism,
// faults, targets, constructor); this package restates none of them, and
// its test holds the joined registry to the catalogue.
package all

import (
	"log/slog"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/kubefault"
	"github.com/gpuchaos/gpuchaos/internal/fault/nodeall"
	"github.com/gpuchaos/gpuchaos/internal/fault/twinfault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// Registry lists every injector of this build. kube is the client the
// API mechanisms act through (kubefault.Entries); nil lists them and
// refuses to build them, as a target without an API server must. The
// slice is new on every call.
func Registry(kube client.Client) fault.Registry {
	return slices.Concat(
		twinfault.Entries(),
		nodeall.Registry(),
		kubefault.Entries(kubefault.Options{Client: kube}),
	)
}

// Injector returns the injector implementing mechanism m of fault f, built
// from env. A mechanism without one (the catalogue lists it as planned),
// or one env cannot build, is refused by name; the API mechanisms are
// refused here, their injectors being built with a client by the
// controller (controller.SetupNodeFaults).
func Injector(f *catalog.Fault, m *catalog.Mechanism, env fault.Env) (fault.Injector, error) {
	return Registry(nil).Injector(f, m, env)
}

// TwinEnv is the fault.Env of a twin target: the one place it is filled
// for the twin, on its virtual clock or in real time.
func TwinEnv(p fault.TwinPlayer, logger *slog.Logger) fault.Env {
	return fault.Env{Twin: p, Logger: logger}
}
