// Package all is the one place that lists every injector: Registry says,
// for each mechanism, which faults it causes, on which targets, and how
// its injector is built, so the wiring of mechanisms to code can be read
// in one file and held to the catalogue by a test.
package all

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ckptfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/exhaustfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/kubefault"
	"github.com/gpuchaos/gpuchaos/internal/fault/netfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/numafault"
	"github.com/gpuchaos/gpuchaos/internal/fault/procfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/storagefault"
	"github.com/gpuchaos/gpuchaos/internal/fault/twinfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/xidfault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// Env carries what injectors need from their target.
type Env struct {
	// Logger receives the injectors' logs, each with its component
	// attribute; nil discards them.
	Logger *slog.Logger
	// Twin is set when the target is the digital twin.
	Twin twinfault.Player
	// Kmsg writes kernel log records for the kernel-log mechanism; a
	// kmsg.Writer on a local target. Nil refuses the mechanism.
	Kmsg xidfault.Writer
	// StateDir is where mechanisms that change the node (network
	// qdiscs and filters, child processes) record each injection before
	// acting, each in a subdirectory of its own, so that a run killed
	// mid-fault is recovered from it by the next. Empty refuses those
	// mechanisms.
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
	// Kube reaches the cluster's API server, for the mechanisms that act
	// through it alone (kubefault.Mechanisms); nil refuses them. The
	// controller's NodeFault reconciler (kubefault.Setup) builds these
	// injectors itself; listing them here holds them to the catalogue
	// with the rest.
	Kube client.Client
}

// Entry is one injector of the registry: a mechanism, the faults it causes
// through it, the targets it runs on and its constructor.
type Entry struct {
	// Mechanism is the catalogue's name of the mechanism.
	Mechanism string
	// Faults lists the ids of the faults served; nil means every fault of
	// the catalogue that has the mechanism.
	Faults []string
	// Targets lists the target kinds the injector runs on. For every fault
	// served they are exactly the targets the catalogue lists as built
	// (catalog.Mechanism.Targets); a test holds the two to each other.
	Targets []string
	// New builds the injector for fault f from what its target provides,
	// refusing when env lacks what the injector needs.
	New func(f *catalog.Fault, m *catalog.Mechanism, env Env) (fault.Injector, error)
}

// Serves reports whether the entry causes fault faultID through
// mechanism.
func (e Entry) Serves(faultID, mechanism string) bool {
	return e.Mechanism == mechanism && (e.Faults == nil || slices.Contains(e.Faults, faultID))
}

// Registry lists every injector of this build. Each (fault, mechanism) is
// served by one entry at most. The slice is new on every call.
func Registry() []Entry {
	twin, k8s := []string{"twin"}, []string{"k8s"}
	// On k8s the node's agent runs these same injectors for NodeFaults.
	node := []string{"local", "k8s"}
	return []Entry{
		{Mechanism: catalog.MechanismTwin, Targets: twin, New: newTwin},
		{Mechanism: "kernel-log", Targets: node, New: newKmsg, Faults: []string{
			"hardware.xid", "hardware.ecc-sbe-storm", "hardware.ecc-dbe", "hardware.row-remap-pending",
			"hardware.row-remap-failure", "hardware.nvlink-down", "hardware.fallen-off-bus", "hardware.gsp-timeout"}},

		{Mechanism: "burn", Targets: node, New: newGPUProc, Faults: []string{
			"exhaustion.sm-burn", "exhaustion.thermal-soak", "exhaustion.noisy-neighbour"}},
		{Mechanism: "cuda-malloc", Targets: node, New: newGPUProc, Faults: []string{"exhaustion.vram"}},
		{Mechanism: "cuda-memcpy", Targets: node, New: newGPUProc, Faults: []string{"exhaustion.pcie"}},

		{Mechanism: "tc-tbf", Targets: node, New: newNet, Faults: []string{"network.rate-limit"}},
		{Mechanism: "netem", Targets: node, New: newNet, Faults: []string{"network.delay", "network.loss"}},
		{Mechanism: "cls-bpf", Targets: node, New: newNet, Faults: []string{
			"network.loss", "network.partition", "ebpf.packet-drop", "ebpf.port-blackhole"}},
		// On k8s the agent passes the job's pod (ckptfault.WithPod, nodeagent's
		// storageCtx) and the checkpoint faults act on its directory as the
		// pod's containers see it.
		{Mechanism: storagefault.MechanismBPF, Targets: node, New: newStorage, Faults: []string{storagefault.FaultID}},

		{Mechanism: "signal", Targets: node, New: newCkpt, Faults: []string{"checkpoint.kill-writer"}},
		{Mechanism: "fallocate", Targets: node, New: newCkpt, Faults: []string{"checkpoint.fill-volume"}},
		{Mechanism: "cgroup-io", Targets: node, New: newCkpt, Faults: []string{"checkpoint.slow-storage"}},
		{Mechanism: "byte-flip", Targets: node, New: newCkpt, Faults: []string{"checkpoint.corrupt-newest"}},

		{Mechanism: "migrate-pages", Targets: node, New: newNUMA, Faults: []string{"numa.remote-memory"}},
		{Mechanism: "sched-setaffinity", Targets: node, New: newNUMA, Faults: []string{"numa.wrong-affinity"}},
		{Mechanism: "memory-hog", Targets: node, New: newNUMA, Faults: []string{"numa.memory-pressure"}},
		{Mechanism: "cpu-hog", Targets: node, New: newNUMA, Faults: []string{"numa.cpu-saturation"}},

		// On k8s the agent finds the rank's process in its pod's cgroup
		// and passes it as pid (nodeagent's podParams); cgroup-cpu then
		// sets the quota of the rank's container group (Env.PodCgroups).
		{Mechanism: "signal", Targets: node, New: newProc, Faults: []string{"workload.kill-rank", "workload.hang-rank"}},
		{Mechanism: "cgroup-cpu", Targets: node, New: newProc, Faults: []string{"workload.straggler"}},
		{Mechanism: "duty-cycle", Targets: node, New: newProc, Faults: []string{"workload.straggler"}},

		{Mechanism: kubefault.MechanismPodDelete, Targets: k8s, New: newKube, Faults: []string{"workload.pod-kill"}},
		{Mechanism: kubefault.MechanismNodeCordon, Targets: k8s, New: newKube, Faults: []string{"workload.cordon-drain"}},
		{Mechanism: kubefault.MechanismDaemonSetPodDelete, Targets: k8s, New: newKube, Faults: []string{"workload.device-plugin-kill"}},
		{Mechanism: kubefault.MechanismNodeTaint, Targets: k8s, New: newKube, Faults: []string{"workload.node-taint"}},
	}
}

// Injector returns the injector implementing mechanism m of fault f: the
// registry's entry serving them, built from env. A mechanism without one
// (the catalogue lists it as planned) is refused, saying so.
func Injector(f *catalog.Fault, m *catalog.Mechanism, env Env) (fault.Injector, error) {
	if f == nil || m == nil {
		return nil, errors.New("an injector needs a fault and a mechanism")
	}
	for _, e := range Registry() {
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

func newTwin(f *catalog.Fault, _ *catalog.Mechanism, env Env) (fault.Injector, error) {
	if env.Twin == nil {
		return nil, fmt.Errorf("mechanism twin of %s needs the twin target", f.ID)
	}
	return twinfault.New(f, env.Twin), nil
}

func newKmsg(f *catalog.Fault, _ *catalog.Mechanism, env Env) (fault.Injector, error) {
	if env.Kmsg == nil {
		return nil, fmt.Errorf("mechanism kernel-log of %s needs the kernel log of a local node", f.ID)
	}
	return xidfault.New(f, env.Kmsg)
}

// stateDir is the subdirectory of env.StateDir one injector package keeps
// its records in; it refuses an env without a state directory.
func stateDir(f *catalog.Fault, m *catalog.Mechanism, env Env, sub string) (string, error) {
	if env.StateDir == "" {
		return "", fmt.Errorf("mechanism %s of %s needs a state directory on a local node", m.Name, f.ID)
	}
	return filepath.Join(env.StateDir, sub), nil
}

func newNet(f *catalog.Fault, m *catalog.Mechanism, env Env) (fault.Injector, error) {
	dir, err := stateDir(f, m, env, "net")
	if err != nil {
		return nil, err
	}
	return netfault.New(f, m.Name, dir)
}

func newStorage(f *catalog.Fault, m *catalog.Mechanism, env Env) (fault.Injector, error) {
	dir, err := stateDir(f, m, env, "storage")
	if err != nil {
		return nil, err
	}
	return storagefault.New(f, m, storagefault.Options{StateDir: dir})
}

func newNUMA(f *catalog.Fault, m *catalog.Mechanism, env Env) (fault.Injector, error) {
	dir, err := stateDir(f, m, env, "numa")
	if err != nil {
		return nil, err
	}
	return numafault.New(f, m, numafault.Options{StateDir: dir, GPUNode: env.GPUNode, Exec: env.Exec, HogCgroups: env.HogCgroups})
}

func newProc(f *catalog.Fault, m *catalog.Mechanism, env Env) (fault.Injector, error) {
	dir, err := stateDir(f, m, env, "rank")
	if err != nil {
		return nil, err
	}
	return procfault.New(f, m, procfault.Options{StateDir: dir, Exec: env.Exec, Logger: component(env, "procfault"), PodCgroups: env.PodCgroups})
}

func newCkpt(f *catalog.Fault, m *catalog.Mechanism, env Env) (fault.Injector, error) {
	dir, err := stateDir(f, m, env, "ckpt")
	if err != nil {
		return nil, err
	}
	return ckptfault.New(f, m, ckptfault.Options{StateDir: dir, Logger: component(env, "ckptfault")})
}

func newGPUProc(f *catalog.Fault, m *catalog.Mechanism, env Env) (fault.Injector, error) {
	dir, err := stateDir(f, m, env, "proc")
	if err != nil {
		return nil, err
	}
	return exhaustfault.New(f, m, exhaustfault.Options{Exec: env.Exec, StateDir: dir})
}

func newKube(f *catalog.Fault, m *catalog.Mechanism, env Env) (fault.Injector, error) {
	if env.Kube == nil {
		return nil, fmt.Errorf("mechanism %s of %s needs the API server of a Kubernetes cluster", m.Name, f.ID)
	}
	return kubefault.New(f, m, kubefault.Options{Client: env.Kube, Logger: component(env, "kubefault")})
}

// component is env's logger with the injector package as its component
// attribute; nil when env has none (each package then discards).
func component(env Env, name string) *slog.Logger {
	if env.Logger == nil {
		return nil
	}
	return env.Logger.With("component", name)
}

// logged logs every injector's steps the same way, whatever the injector
// logs of its own: what it was asked, and how it ended.
type logged struct {
	fault.Injector
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
	case errors.Is(err, fault.ErrTargetGone):
		l.log.Info("target gone", "key", key, "proof", err)
	default:
		l.log.Warn("recovery pending", "key", key, "err", err)
	}
	return err
}
