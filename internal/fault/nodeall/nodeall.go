// Package nodeall is the registry of the node mechanisms: the injectors
// that act on the machine itself (the kernel log, GPU exhaustion, traffic
// control, checkpoint storage, NUMA placement, a rank's process), which a
// local run and a Kubernetes node's agent run alike, and Env, the one
// place their fault.Env is filled. It links neither the twin nor a
// Kubernetes client, so the node agent, which builds its injectors here,
// links neither; internal/fault/all joins these entries with the twin's
// and the API server's.
package nodeall

import (
	"context"
	"log/slog"
	"os"
	"slices"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ckptfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/exhaustfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/netfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/numafault"
	"github.com/gpuchaos/gpuchaos/internal/fault/procfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/storagefault"
	"github.com/gpuchaos/gpuchaos/internal/fault/xidfault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc"
)

// Registry lists the node mechanisms of this build, one line per injector
// package: a new node mechanism's package adds its line here. The slice is
// new on every call.
func Registry() fault.Registry {
	return slices.Concat(
		xidfault.Entries(),
		exhaustfault.Entries(),
		netfault.Entries(),
		storagefault.Entries(),
		ckptfault.Entries(),
		numafault.Entries(),
		procfault.Entries(),
	)
}

// Injector returns the node's injector of mechanism m of fault f, built
// from env; a mechanism that does not act on the node is refused.
func Injector(f *catalog.Fault, m *catalog.Mechanism, env fault.Env) (fault.Injector, error) {
	return Registry().Injector(f, m, env)
}

// Node is what the process running a node's injectors knows of the node:
// a local run, the recovery of a local ledger, or a Kubernetes node's
// agent. Zero values take the documented defaults.
type Node struct {
	// StateDir is where the mechanisms that change the node record each
	// injection before acting (fault.Env.StateDir): the directory beside
	// the ledger. Empty refuses those mechanisms, as a dry run must.
	StateDir string
	// Kmsg writes the kernel-log mechanism's lines; nil means
	// kmsg.Writer{}, the node's /dev/kmsg.
	Kmsg fault.KmsgWriter
	// GPUNode returns the NUMA node of one of the node's GPUs, for the
	// NUMA mechanisms; nil means unknown for every GPU.
	GPUNode func(ctx context.Context, gpu int) (int, error)
	// Logger receives the injectors' logs; nil discards them.
	Logger *slog.Logger
	// Exec is the gpuchaos binary the child-process mechanisms run
	// (fault.Env.Exec); empty means this process's own, which is right
	// wherever this process is gpuchaos and wrong in gpuchaos-agent,
	// which has none of the children's subcommands.
	Exec string
	// Pod is set where the injectors run in a Kubernetes node's agent;
	// nil on a node outside Kubernetes.
	Pod *Pod
}

// Pod says how the injectors act on a Kubernetes node. A rank in a pod
// keeps its container's group (cgroup-cpu sets that group's quota rather
// than moving the rank out of it), and the NUMA hogs the agent starts go
// to the node level above the agent's own pod, so that neither the
// agent's memory limit nor its cpuset caps them, and outlive an agent
// restart until their hold ends or the next agent recovers them from the
// ledger. Where the agent runs outside any pod (a systemd unit) the hogs
// stay in its groups.
type Pod struct {
	// CgroupRoot is where the node's cgroup hierarchies are mounted;
	// empty means /sys/fs/cgroup.
	CgroupRoot string
}

// Env is the fault.Env of every node's injectors, filled from what the
// process knows of its node: the one place a field of fault.Env is
// filled for the node.
func Env(n Node) fault.Env {
	env := fault.Env{Logger: n.Logger, Kmsg: n.Kmsg, StateDir: n.StateDir, GPUNode: n.GPUNode, Exec: n.Exec}
	if env.Kmsg == nil {
		env.Kmsg = kmsg.Writer{}
	}
	if n.Pod != nil {
		root := n.Pod.CgroupRoot
		env.PodCgroups = true
		env.HogCgroups = func() ([]string, error) { return podproc.NodeGroups(root, os.Getpid()) }
	}
	return env
}
