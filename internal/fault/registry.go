package fault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// TwinPlayer is the part of the digital twin the twin mechanism needs
// (internal/fault/twinfault); *twin.Twin and the live runner implement it.
// Apply is idempotent per key and Revert of an unknown key succeeds. It is
// declared here, in the twin's terms of catalogue effects and inventory
// refs, so that Env can carry a twin without this package linking it.
type TwinPlayer interface {
	Apply(key string, ref inventory.Ref, effects []catalog.Effect) error
	Revert(key string) error
}

// KmsgWriter writes one kernel log record at a syslog level, for the
// kernel-log mechanism (internal/fault/xidfault); kmsg.Writer writes
// /dev/kmsg. Implementations are safe for concurrent use.
type KmsgWriter interface {
	Write(level int, msg string) error
}

// Env carries what injectors need from their target. Each target fills it
// in one place: the node's (a local run, the node agent) in
// internal/fault/nodeall.Env, the twin's in internal/fault/all.TwinEnv.
//
// The Kubernetes API client is not here: the mechanisms that act through
// the API server get it when kubefault builds their entries
// (kubefault.Entries), so that this package, and the node agent that
// links it, need no Kubernetes client library.
type Env struct {
	// Logger receives the injectors' logs, each with its component
	// attribute; nil discards them.
	Logger *slog.Logger
	// Twin is set when the target is the digital twin.
	Twin TwinPlayer
	// Kmsg writes kernel log records for the kernel-log mechanism; a
	// kmsg.Writer on a node. Nil refuses the mechanism.
	Kmsg KmsgWriter
	// StateDir is where mechanisms that change the node (network
	// qdiscs and filters, child processes) record each injection before
	// acting, each in a subdirectory of its own (StateSubdir), so that a
	// run killed mid-fault is recovered from it by the next. Empty
	// refuses those mechanisms.
	StateDir string
	// Exec is the gpuchaos binary the exhaustion, NUMA and duty-cycle
	// mechanisms run as child processes (burn, exhaust, numa-hog, pace);
	// empty means this process's own.
	Exec string
	// GPUNode returns the NUMA node of a GPU (-1 when unknown), for the
	// NUMA mechanisms; nil means unknown for every GPU.
	GPUNode func(ctx context.Context, gpu int) (int, error)
	// PodCgroups is set on a Kubernetes node (the node agent): a rank in
	// a pod's container group stays there, and cgroup-cpu sets that
	// group's own quota (procfault.Options.PodCgroups).
	PodCgroups bool
	// HogCgroups, when set, says where the NUMA hogs go so that they are
	// the node's and not this process's, and makes them outlive it until
	// their hold ends (numafault.Options.HogCgroups); the node agent's
	// are the node level above its own pod (podproc.NodeGroups).
	HogCgroups func() ([]string, error)
}

// StateSubdir is the subdirectory of StateDir that one injector package
// keeps its records in. It refuses, naming mechanism m of fault f, an env
// without a state directory.
func (env Env) StateSubdir(f *catalog.Fault, m *catalog.Mechanism, sub string) (string, error) {
	if env.StateDir == "" {
		return "", fmt.Errorf("mechanism %s of %s needs a state directory on a local node", m.Name, f.ID)
	}
	return filepath.Join(env.StateDir, sub), nil
}

// Component is the env's logger with an injector package as its
// component attribute; nil when the env has none (the package then
// discards).
func (env Env) Component(name string) *slog.Logger {
	if env.Logger == nil {
		return nil
	}
	return env.Logger.With("component", name)
}

// NodeTargets are the targets of a mechanism that acts on the machine
// itself: a local run's node, and on k8s the node's agent, which runs the
// same injectors for NodeFaults. The slice is new on every call.
func NodeTargets() []string { return []string{"local", "k8s"} }

// Entry is one injector of a registry: a mechanism, the faults it causes
// through it, the targets it runs on and its constructor. Each injector
// package lists its own (an Entries function), so that how a mechanism
// runs is written in the package that runs it.
type Entry struct {
	// Mechanism is the catalogue's name of the mechanism.
	Mechanism string
	// Faults lists the ids of the faults served; nil means every fault of
	// the catalogue that has the mechanism.
	Faults []string
	// Targets lists the target kinds the injector runs on. For every fault
	// served they are exactly the targets the catalogue lists as built
	// (catalog.Mechanism.Targets); a test of internal/fault/all holds the
	// two to each other.
	Targets []string
	// New builds the injector for fault f from what its target provides,
	// refusing when env lacks what the injector needs.
	New func(f *catalog.Fault, m *catalog.Mechanism, env Env) (Injector, error)
}

// Serves reports whether the entry causes fault faultID through
// mechanism.
func (e Entry) Serves(faultID, mechanism string) bool {
	return e.Mechanism == mechanism && (e.Faults == nil || slices.Contains(e.Faults, faultID))
}

// Registry is a list of entries in which each (fault, mechanism) is
// served by one entry at most.
type Registry []Entry

// Injector returns the injector implementing mechanism m of fault f: the
// entry serving them, built from env, and wrapped so that every injector
// logs its steps the same way when env has a logger. A mechanism without
// an entry (the catalogue lists it as planned) is refused, saying so.
func (r Registry) Injector(f *catalog.Fault, m *catalog.Mechanism, env Env) (Injector, error) {
	if f == nil || m == nil {
		return nil, errors.New("an injector needs a fault and a mechanism")
	}
	for _, e := range r {
		if e.Serves(f.ID, m.Name) {
			inj, err := e.New(f, m, env)
			if err != nil || env.Logger == nil {
				return inj, err
			}
			return logged{inj, env.Logger.With("component", "injector", "fault", f.ID, "mechanism", m.Name)}, nil
		}
	}
	return nil, fmt.Errorf("mechanism %s of %s has no injector in this build", m.Name, f.ID)
}

// servesFault reports whether some entry causes fault f, through any of
// its mechanisms.
func (r Registry) servesFault(f *catalog.Fault) bool {
	return slices.ContainsFunc(r, func(e Entry) bool {
		if e.Faults == nil {
			return f.Mechanism(e.Mechanism) != nil
		}
		return slices.Contains(e.Faults, f.ID)
	})
}

// FaultIDs returns the ids of the faults the entries name, each once, in
// the entries' order; an entry serving every fault of its mechanism
// (nil Faults) adds none.
func (r Registry) FaultIDs() []string {
	var ids []string
	for _, e := range r {
		for _, id := range e.Faults {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// Mechanisms returns the names of the entries' mechanisms, each once, in
// the entries' order.
func (r Registry) Mechanisms() []string {
	var names []string
	for _, e := range r {
		if !slices.Contains(names, e.Mechanism) {
			names = append(names, e.Mechanism)
		}
	}
	return names
}

// logged logs every injector's steps the same way, whatever the injector
// logs of its own: what it was asked, and how it ended.
type logged struct {
	Injector
	log *slog.Logger
}

func (l logged) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	l.log.Debug("inject", "key", key, "target", ref.Key(), "params", v)
	err := l.Injector.Inject(ctx, key, ref, v)
	if err != nil {
		l.log.Warn("inject failed", "key", key, "err", err)
		return err
	}
	l.log.Info("injected", "key", key, "target", ref.Key())
	return nil
}

func (l logged) Recover(ctx context.Context, key string) error {
	l.log.Debug("recover", "key", key)
	err := l.Injector.Recover(ctx, key)
	switch {
	case err == nil:
		l.log.Info("recovered", "key", key)
	case errors.Is(err, ErrTargetGone):
		l.log.Info("target gone", "key", key, "proof", err)
	default:
		l.log.Warn("recovery pending", "key", key, "err", err)
	}
	return err
}
