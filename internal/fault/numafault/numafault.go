package numafault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/childproc"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/numa"
)

// Entries lists the mechanisms this package runs and the fault each
// causes, for the registry (internal/fault/nodeall).
func Entries() []fault.Entry {
	node := fault.NodeTargets()
	return []fault.Entry{
		{Mechanism: "migrate-pages", Targets: node, New: newFromEnv, Faults: []string{"numa.remote-memory"}},
		{Mechanism: "sched-setaffinity", Targets: node, New: newFromEnv, Faults: []string{"numa.wrong-affinity"}},
		{Mechanism: "memory-hog", Targets: node, New: newFromEnv, Faults: []string{"numa.memory-pressure"}},
		{Mechanism: "cpu-hog", Targets: node, New: newFromEnv, Faults: []string{"numa.cpu-saturation"}},
	}
}

func newFromEnv(f *catalog.Fault, m *catalog.Mechanism, env fault.Env) (fault.Injector, error) {
	dir, err := env.StateSubdir(f, m, "numa")
	if err != nil {
		return nil, err
	}
	in, err := New(f, m, Options{StateDir: dir, GPUNode: env.GPUNode, Exec: env.Exec, HogCgroups: env.HogCgroups})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// Defaults of the hog children's lifetime and stopping.
const (
	// DefaultHold and HoldMargin are fault's; see fault.HoldFor.
	DefaultHold = fault.DefaultHold
	HoldMargin  = fault.HoldMargin
	// ReadyTimeout bounds how long Inject waits for a hog to hold its
	// memory or CPUs; touching a node's worth of memory takes seconds.
	ReadyTimeout = 2 * time.Minute
	// TermGrace is how long a hog has after SIGTERM before SIGKILL.
	TermGrace = 5 * time.Second
)

// Options configure New. The zero value of each field is its documented
// default, except StateDir, which is required.
type Options struct {
	// StateDir holds the state file of each injected key (KEY.json) and
	// the hogs' output (KEY.log). It must outlive the injecting process;
	// it is created, mode 0700, when missing. Required.
	StateDir string
	// GPUNode returns the NUMA node of GPU gpu (internal/node/gpu's
	// Device.NUMANode), -1 when unknown. Nil, or -1, means the GPU's node
	// is unknown: the injectors then use node 0 on a machine with one
	// node and refuse on a machine with more.
	GPUNode func(ctx context.Context, gpu int) (int, error)
	// SysNodeDir is the node tree to read the topology from; "" means
	// numa.SysNodeDir.
	SysNodeDir string
	// Exec is the gpuchaos binary the hogs run; "" means this process's
	// own executable. ExecArgs come before the hog's flags; nil means
	// []string{HogCommand}, the hidden command that calls RunHog.
	Exec     string
	ExecArgs []string
	// Log, when set, gets one line per change made or undone; nil means
	// none. Writes are serialised.
	Log io.Writer

	// HogCgroups, when set, is where a hog goes and how long it lives: it
	// returns cgroup directories (one per hierarchy, absolute paths) the
	// hog moves itself into before it takes any memory or CPU, and the hog
	// is started without Pdeathsig, so it outlives this process until its
	// hold ends or Recover, from the state file, stops it. The node agent
	// sets it: a hog it started would otherwise be charged to, and capped
	// by, the agent's own pod (its memory limit, its cpuset), and a
	// restarted agent would end every hog fault it had applied. Nil keeps
	// a hog in this process's groups, dying with it.
	HogCgroups func() ([]string, error)

	// The seams below are for this package's tests.

	// maxHogBytes caps memory-pressure's allocation when set, so a test
	// can take a few megabytes of a shared machine.
	maxHogBytes uint64
	// noPdeathsig starts hogs without Pdeathsig, so a test can leave an
	// orphan behind and recover it from the state file alone.
	noPdeathsig bool
	// env is added to the hogs' environment.
	env []string
	// termGrace replaces TermGrace when set.
	termGrace time.Duration
}

// New returns the injector for mechanism m of fault f: migrate-pages for
// numa.remote-memory, sched-setaffinity for numa.wrong-affinity,
// memory-hog for numa.memory-pressure, cpu-hog for numa.cpu-saturation.
func New(f *catalog.Fault, m *catalog.Mechanism, o Options) (fault.Injector, error) {
	if f == nil || m == nil {
		return nil, errors.New("numafault: a fault and a mechanism are required")
	}
	entries := fault.Registry(Entries())
	if !slices.Contains(entries.FaultIDs(), f.ID) {
		return nil, fmt.Errorf("numafault: fault %s is not a numa fault", f.ID)
	}
	if err := fault.CheckMechanism("numafault", f, m, entries); err != nil {
		return nil, err
	}
	if o.StateDir == "" {
		return nil, fmt.Errorf("numafault: %s needs a state directory", f.ID)
	}
	dir, err := openState(o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("numafault: %w", err)
	}
	if o.termGrace == 0 {
		o.termGrace = TermGrace
	}
	in := &Injector{fault: f.ID, opts: o, dir: dir}
	if f.ID == "numa.memory-pressure" || f.ID == "numa.cpu-saturation" {
		if o.Exec == "" {
			exe, err := os.Executable()
			if err != nil {
				return nil, fmt.Errorf("numafault: find the gpuchaos binary: %w", err)
			}
			in.opts.Exec = exe
		}
		if o.ExecArgs == nil {
			in.opts.ExecArgs = []string{HogCommand}
		}
	}
	return in, nil
}

// Injector is one NUMA fault's injector. It is safe for concurrent use;
// calls with the same key are serialised.
type Injector struct {
	fault string
	opts  Options
	// dir holds the state files and serialises the calls for one key.
	dir *statedir.Dir

	// children are the hogs this instance started and has not reaped.
	children childproc.Group
	logMu    sync.Mutex
}

// Inject applies the fault to the rank or GPU ref names. Injecting a key
// that has a state file is a no-op. On error nothing stays changed and no
// state file remains, unless undoing failed too; the error then says so
// and Recover retries.
func (in *Injector) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	err := in.dir.Inject(ctx, key, func() error {
		topo, gpuNode, err := in.placement(ctx, ref.GPU)
		if err != nil {
			return err
		}
		st := state{Version: stateVersion, Key: key, Fault: in.fault, GPU: ref.GPU, GPUNode: gpuNode, Created: time.Now().UTC()}
		switch in.fault {
		case "numa.remote-memory":
			return in.injectPages(ctx, st, topo, ref, v)
		case "numa.wrong-affinity":
			return in.injectAffinity(ctx, st, topo, ref, v)
		default:
			return in.injectHog(ctx, st, topo, v)
		}
	})
	if err != nil {
		return fmt.Errorf("inject %s on gpu %d: %w", in.fault, ref.GPU, err)
	}
	return nil
}

// Recover undoes what the key's state file records and removes it. It
// works from the state file alone, so a fresh injector in a fresh process
// recovers what a crashed one did. No state file is success. A hog is
// stopped, the recorded one and any other process carrying the key's mark
// (one started by an injector that died before recording it), and the
// fault is then undone. A rank that has ended (procfind.Proc.Gone: its pid
// absent, another process's, or a zombie with no thread running) took its
// pages and threads with it: that is fault.ErrTargetGone with the proof. A
// reused pid is never touched. When the search for hogs cannot look into
// every process that may be one, the state file stays and the error wraps
// fault.ErrUnproven.
func (in *Injector) Recover(ctx context.Context, key string) error {
	var proof string
	err := statedir.Recover(in.dir, key, parseState, func(st state) (err error) {
		switch {
		case in.fault == "numa.memory-pressure" || in.fault == "numa.cpu-saturation":
			err = in.stopHogs(ctx, key, st.Child)
		case st.Target != nil && st.Fault == "numa.wrong-affinity":
			proof, err = in.restoreAffinity(st)
		case st.Target != nil:
			proof, err = in.migrateBack(st)
		}
		if err != nil {
			return fmt.Errorf("gpu %d: %w", st.GPU, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recover %s: %w", in.fault, err)
	}
	if proof != "" {
		return fmt.Errorf("recover %s: %s: %w", in.fault, proof, fault.ErrTargetGone)
	}
	return nil
}

// placement reads the topology and the GPU's node. An unknown GPU node is
// node 0 on a one-node machine, where nothing else is possible, and an
// error on a machine with more.
func (in *Injector) placement(ctx context.Context, gpu int) (numa.Topology, int, error) {
	topo, err := numa.ReadTopology(in.opts.SysNodeDir)
	if err != nil {
		return numa.Topology{}, -1, err
	}
	node := -1
	if in.opts.GPUNode != nil {
		if node, err = in.opts.GPUNode(ctx, gpu); err != nil {
			return numa.Topology{}, -1, fmt.Errorf("numa node of gpu %d: %w", gpu, err)
		}
	}
	if node < 0 {
		if len(topo.Nodes) != 1 {
			return numa.Topology{}, -1, fmt.Errorf("numa node of gpu %d is unknown on a machine with %d nodes", gpu, len(topo.Nodes))
		}
		node = topo.Nodes[0].ID
	}
	if _, ok := topo.Node(node); !ok {
		return numa.Topology{}, -1, fmt.Errorf("gpu %d is on numa node %d, which is not online (online: %s)", gpu, node, numa.FormatCPUList(topo.IDs()))
	}
	return topo, node, nil
}

// remoteNode picks the node a rank's pages or threads go to: the node
// parameter when set (it must qualify, be allowed and not be the GPU's
// own), else the qualifying node farthest from the GPU's among those
// allowed. A machine with fewer than two qualifying nodes is refused with
// the count; a choice the rank's cpuset rules out, with what the cpuset
// allows (why, one line: the cpuset is not ours to widen).
func remoteNode(topo numa.Topology, gpuNode int, param int64, keep func(numa.Node) bool, what string, allowed func(numa.Node) bool, why string) (int, error) {
	var ok []int
	for _, n := range topo.Nodes {
		if keep(n) {
			ok = append(ok, n.ID)
		}
	}
	if why != "" {
		why = "; " + why
	}
	if len(ok) < 2 {
		return -1, fmt.Errorf("needs two NUMA nodes with %s; this machine has %d (node %s)%s", what, len(ok), numa.FormatCPUList(ok), why)
	}
	if param < 0 {
		n, err := topo.Farthest(gpuNode, func(n numa.Node) bool { return keep(n) && allowed(n) })
		if err != nil && why != "" {
			return -1, fmt.Errorf("no NUMA node with %s other than the gpu's (node %d) is allowed%s", what, gpuNode, why)
		}
		return n, err
	}
	n, found := topo.Node(int(param))
	switch {
	case !found:
		return -1, fmt.Errorf("node %d is not online (online: %s)", param, numa.FormatCPUList(topo.IDs()))
	case !keep(n):
		return -1, fmt.Errorf("node %d has no %s", param, what)
	case n.ID == gpuNode:
		return -1, fmt.Errorf("node %d is the gpu's own node, which is no fault", param)
	case !allowed(n):
		return -1, fmt.Errorf("node %d is not allowed%s", param, why)
	}
	return n.ID, nil
}

// rankPID returns the rank's pid: the pid parameter, or the process whose
// environment names the target's job and rank.
func rankPID(ref inventory.Ref, v catalog.Values) (int, error) {
	if pid := v.Int("pid"); pid > 0 {
		if pid == int64(os.Getpid()) {
			return 0, errors.New("pid is gpuchaos itself")
		}
		return int(pid), nil
	}
	return findRank(ref.Job, ref.Rank)
}

func (in *Injector) logf(format string, args ...any) {
	if in.opts.Log == nil {
		return
	}
	in.logMu.Lock()
	defer in.logMu.Unlock()
	fmt.Fprintf(in.opts.Log, format+"\n", args...)
}
