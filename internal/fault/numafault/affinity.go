package numafault

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/numa"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// affinityPasses bounds how often injectAffinity lists the rank's threads
// again to catch threads started while it worked: a thread started after a
// pass began inherits its creator's mask, which a pass has set or will.
const affinityPasses = 4

// injectAffinity pins every thread of the rank to the remote node's CPUs,
// recording each thread's mask in the state file before changing it.
func (in *Injector) injectAffinity(ctx context.Context, st state, topo numa.Topology, ref inventory.Ref, v catalog.Values) error {
	pid, err := rankPID(ref, v)
	if err != nil {
		return err
	}
	cs, err := cpusetOf(pid)
	if err != nil {
		return err
	}
	to, err := remoteNode(topo, st.GPUNode, v.Int("node"), numa.HasCPUs, "CPUs",
		func(n numa.Node) bool { return len(cs.cpusOn(n)) > 0 }, cs.describe(pid))
	if err != nil {
		return err
	}
	n, _ := topo.Node(to)
	// Within the cpuset: the kernel would narrow a wider mask to it
	// anyway, and the record and log then say what the rank really got.
	cpus := cs.cpusOn(n)
	set, err := numa.SetOf(cpus)
	if err != nil {
		return err
	}
	id, err := identify(pid)
	if err != nil {
		return err
	}
	st.Target, st.ToNode = &id, to
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := in.dir.Write(st.Key, st); err != nil {
		return err
	}
	fail := func(cause error) error {
		if _, err := in.restoreAffinity(st); err != nil {
			return errors.Join(cause, fmt.Errorf("restore (Recover retries): %w", err))
		}
		return errors.Join(cause, in.dir.Remove(st.Key))
	}
	done := map[int]bool{}
	for pass := 0; pass < affinityPasses; pass++ {
		tids, err := numa.Threads(pid)
		if err != nil {
			return fail(err)
		}
		var fresh []threadMask
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			cpus, err := numa.ThreadAffinity(tid)
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			if err != nil {
				return fail(err)
			}
			ts, err := procfind.ReadThreadStat(pid, tid)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return fail(err)
			}
			fresh = append(fresh, threadMask{TID: tid, StartTicks: ts.StartTicks, CPUs: numa.FormatCPUList(cpus)})
		}
		if len(fresh) == 0 {
			break
		}
		// Recorded before any of them changes.
		st.Threads = append(st.Threads, fresh...)
		if err := in.dir.Write(st.Key, st); err != nil {
			return fail(err)
		}
		for _, th := range fresh {
			done[th.TID] = true
			if err := unix.SchedSetaffinity(th.TID, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fail(fmt.Errorf("set cpu affinity of thread %d of pid %d to node %d (cpus %s): %w", th.TID, pid, to, numa.FormatCPUList(cpus), err))
			}
		}
	}
	in.logf("numafault: %s: pinned %d threads of pid %d to node %d (cpus %s)", st.Key, len(st.Threads), pid, to, numa.FormatCPUList(cpus))
	return nil
}

// restoreAffinity gives every recorded thread that still runs its own
// mask back. Threads born during the fault inherited the remote mask and
// are not in the state file; they get the mask the rank's main thread had.
// One of them may start a thread of its own before it is restored, which
// inherits the remote mask too, so the rank's threads are listed again
// until no new one turns up, as injectAffinity does. A rank that has
// ended is reported with the proof instead: a mask lives and dies with its
// thread.
func (in *Injector) restoreAffinity(st state) (proof string, err error) {
	proof, gone, err := st.Target.Gone()
	if err != nil || gone {
		return proof, err
	}
	pid := st.Target.PID
	done := map[int]bool{}
	var mainMask *unix.CPUSet
	var errs []error
	for _, th := range st.Threads {
		cpus, err := numa.ParseCPUList(th.CPUs)
		if err != nil {
			errs = append(errs, fmt.Errorf("thread %d: %w", th.TID, err))
			continue
		}
		set, err := numa.SetOf(cpus)
		if err != nil {
			errs = append(errs, fmt.Errorf("thread %d: %w", th.TID, err))
			continue
		}
		if th.TID == pid {
			mainMask = &set
		}
		if !threadAlive(pid, th) {
			continue
		}
		done[th.TID] = true
		if err := unix.SchedSetaffinity(th.TID, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("restore cpu affinity of thread %d: %w", th.TID, err))
		}
	}
	for pass := 0; mainMask != nil && pass < affinityPasses; pass++ {
		tids, err := numa.Threads(pid)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			done[tid], fresh = true, fresh+1
			if err := unix.SchedSetaffinity(tid, mainMask); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("restore cpu affinity of new thread %d: %w", tid, err))
			}
		}
		if fresh == 0 {
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", fmt.Errorf("pid %d: %w", pid, err)
	}
	in.logf("numafault: %s: restored the cpu affinity of pid %d", st.Key, pid)
	return "", nil
}
