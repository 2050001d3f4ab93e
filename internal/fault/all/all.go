// Package all is the one place that lists every injector, by mechanism
// name, so the wiring of mechanisms to code can be read in one file.
package all

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ckptfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/gpuproc"
	"github.com/gpuchaos/gpuchaos/internal/fault/kmsgxid"
	"github.com/gpuchaos/gpuchaos/internal/fault/netfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/numafault"
	"github.com/gpuchaos/gpuchaos/internal/fault/procfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/storagefault"
	"github.com/gpuchaos/gpuchaos/internal/fault/twinfault"
)

// Env carries what injectors need from their target.
type Env struct {
	// Twin is set when the target is the digital twin.
	Twin twinfault.Player
	// Kmsg writes kernel log records for the kernel-log mechanism; a
	// kmsg.Writer on a local target. Nil refuses the mechanism.
	Kmsg kmsgxid.Writer
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
}

// Injector returns the injector implementing mechanism m of fault f.
// Mechanisms the catalogue declares for the local and k8s targets arrive in
// later releases; asking for one says so.
func Injector(f *catalog.Fault, m *catalog.Mechanism, env Env) (fault.Injector, error) {
	switch m.Name {
	case "twin":
		if env.Twin == nil {
			return nil, fmt.Errorf("mechanism twin of %s needs the twin target", f.ID)
		}
		return twinfault.New(f, env.Twin), nil
	case "kernel-log":
		if env.Kmsg == nil {
			return nil, fmt.Errorf("mechanism kernel-log of %s needs the kernel log of a local node", f.ID)
		}
		return kmsgxid.New(f, env.Kmsg)
	case "tc-tbf", "cls-bpf", "netem":
		if env.StateDir == "" {
			return nil, fmt.Errorf("mechanism %s of %s needs a state directory for network faults on a local node", m.Name, f.ID)
		}
		if f.ID == storagefault.FaultID {
			return storagefault.New(f, m, storagefault.Options{StateDir: filepath.Join(env.StateDir, "storage")})
		}
		return netfault.New(f, m.Name, filepath.Join(env.StateDir, "net"))
	case "migrate-pages", "sched-setaffinity", "memory-hog", "cpu-hog":
		if env.StateDir == "" {
			return nil, fmt.Errorf("mechanism %s of %s needs a state directory on a local node", m.Name, f.ID)
		}
		return numafault.New(f, m, numafault.Options{StateDir: filepath.Join(env.StateDir, "numa"), GPUNode: env.GPUNode, Exec: env.Exec})
	case "signal", "cgroup-cpu", "duty-cycle":
		if env.StateDir == "" {
			return nil, fmt.Errorf("mechanism %s of %s needs a state directory on a local node", m.Name, f.ID)
		}
		switch f.ID {
		case "workload.kill-rank", "workload.hang-rank", "workload.straggler":
			return procfault.New(f, m, procfault.Options{StateDir: filepath.Join(env.StateDir, "rank"), Exec: env.Exec})
		case "checkpoint.kill-writer":
			return ckptfault.New(f, m, ckptfault.Options{StateDir: filepath.Join(env.StateDir, "ckpt")})
		}
	case "fallocate", "cgroup-io", "byte-flip":
		if env.StateDir == "" {
			return nil, fmt.Errorf("mechanism %s of %s needs a state directory on a local node", m.Name, f.ID)
		}
		return ckptfault.New(f, m, ckptfault.Options{StateDir: filepath.Join(env.StateDir, "ckpt")})
	case "burn", "cuda-malloc", "cuda-memcpy":
		if env.StateDir == "" {
			return nil, fmt.Errorf("mechanism %s of %s needs a state directory for its processes on a local node", m.Name, f.ID)
		}
		return gpuproc.New(f, m, gpuproc.Options{Exec: env.Exec, StateDir: filepath.Join(env.StateDir, "proc")})
	}
	return nil, fmt.Errorf("mechanism %s of %s has no injector in this build", m.Name, f.ID)
}
