package numafault

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/numa"
)

// nodeMaskWords is the size of the node masks passed to the kernel: 1024
// nodes, Linux's largest MAX_NUMNODES.
const nodeMaskWords = (numa.MaxNode + 1) / 64

// nodeMask is a node set as the memory-policy syscalls take it.
type nodeMask [nodeMaskWords]uint64

func maskOf(nodes []int) (nodeMask, error) {
	var m nodeMask
	for _, n := range nodes {
		if n < 0 || n > numa.MaxNode {
			return m, fmt.Errorf("node %d is outside 0-%d", n, numa.MaxNode)
		}
		m[n/64] |= 1 << (n % 64)
	}
	return m, nil
}

// migratePages moves the pages of process pid that are on the nodes in
// from to the nodes in to, with migrate_pages(2); with one node in to,
// every page goes there. It returns how many pages the kernel could not
// move (pinned, or in use by a device).
func migratePages(pid int, from, to []int) (int, error) {
	fm, err := maskOf(from)
	if err != nil {
		return 0, err
	}
	tm, err := maskOf(to)
	if err != nil {
		return 0, err
	}
	// maxnode counts one more than the bits the kernel reads (it
	// decrements it first), as libnuma passes it.
	n, _, e := unix.Syscall6(unix.SYS_MIGRATE_PAGES, uintptr(pid), nodeMaskWords*64+1,
		uintptr(unsafe.Pointer(&fm[0])), uintptr(unsafe.Pointer(&tm[0])), 0, 0)
	if e != 0 {
		return 0, fmt.Errorf("migrate_pages pid %d from nodes %s to %s: %w", pid, numa.FormatCPUList(from), numa.FormatCPUList(to), e)
	}
	return int(n), nil
}

// injectPages moves the rank's pages to the remote node, recording first
// where they were and where recovery brings them.
func (in *Injector) injectPages(ctx context.Context, st state, topo numa.Topology, ref inventory.Ref, v catalog.Values) error {
	pid, err := rankPID(ref, v)
	if err != nil {
		return err
	}
	cs, err := cpusetOf(pid)
	if err != nil {
		return err
	}
	to, err := remoteNode(topo, st.GPUNode, v.Int("node"), numa.HasMemory, "memory", cs.memOn, cs.describe(pid))
	if err != nil {
		return err
	}
	id, err := identify(pid)
	if err != nil {
		return err
	}
	ms, err := numa.ReadNUMAMaps(pid)
	if err != nil {
		return err
	}
	before := numa.Sum(ms)
	st.Target, st.ToNode, st.Before = &id, to, before.Bytes
	st.BackNode = backNode(before, to, st.GPUNode)
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := in.dir.Write(st.Key, st); err != nil {
		return err
	}
	var from []int
	for _, n := range topo.Nodes {
		if n.ID != to && numa.HasMemory(n) {
			from = append(from, n.ID)
		}
	}
	left, err := migratePages(pid, from, []int{to})
	if err != nil {
		// A failed migrate_pages may have moved some pages already.
		if _, uerr := migratePages(pid, []int{to}, []int{st.BackNode}); uerr != nil && !errors.Is(uerr, unix.ESRCH) {
			return errors.Join(err, fmt.Errorf("move back (Recover retries): %w", uerr))
		}
		return errors.Join(err, in.dir.Remove(st.Key))
	}
	in.logf("numafault: %s: moved the pages of pid %d to node %d (%d could not move)", st.Key, pid, to, left)
	return nil
}

// backNode is where recovery moves the pages: the node, other than to,
// that held most of them before the fault, or the GPU's node when none
// did. Pages that were already on the remote node before the fault come
// back too; migrate_pages cannot tell them apart.
func backNode(before numa.Placement, to, gpuNode int) int {
	best, most := gpuNode, uint64(0)
	nodes := make([]int, 0, len(before.Bytes))
	for n := range before.Bytes {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		if b := before.Bytes[n]; n != to && b > most {
			best, most = n, b
		}
	}
	return best
}

// migrateBack is remote-memory's recovery. A rank that has ended is
// reported with the proof instead: its pages were freed with it.
func (in *Injector) migrateBack(st state) (proof string, err error) {
	proof, gone, err := st.Target.Gone()
	if err != nil || gone {
		return proof, err
	}
	left, err := migratePages(st.Target.PID, []int{st.ToNode}, []int{st.BackNode})
	if errors.Is(err, unix.ESRCH) {
		// Ended between the look and the call; the look again says how.
		if proof, gone, gerr := st.Target.Gone(); gerr == nil && gone {
			return proof, nil
		}
	}
	if err != nil {
		return "", err
	}
	in.logf("numafault: %s: moved the pages of pid %d back to node %d (%d could not move)", st.Key, st.Target.PID, st.BackNode, left)
	return "", nil
}
