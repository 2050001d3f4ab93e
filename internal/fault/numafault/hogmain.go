package numafault

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/node/numa"
)

// HogCommand is the hidden gpuchaos subcommand that runs RunHog; the
// injectors start `gpuchaos numa-hog FLAGS`.
const HogCommand = "numa-hog"

// Memory-policy constants of set_mempolicy(2) and mbind(2).
const (
	mpolBind = 2
	// mpolMFStrict makes mbind fail rather than leave pages that are
	// already elsewhere where they are; the mapping is new, so it only
	// guards against a kernel that ignores the policy.
	mpolMFStrict = 1
)

// hogTouchChunk is how much memory the hog touches between looks at ctx,
// so a cancelled hog stops within a fraction of a second.
const hogTouchChunk = 64 << 20

// RunHog is the hog child the memory-pressure and cpu-saturation
// injectors start: gpuchaos's hidden numa-hog command calls it with the
// flags after the command name. It returns the exit code: 0 after
// --duration or once ctx ends (the command's SIGTERM), 1 on a failure, 2
// on bad flags.
//
// --mode=memory maps --bytes of anonymous memory, binds it to --node with
// mbind(MPOL_BIND) and writes to every page. --mode=cpu runs --threads
// busy threads, each locked to an OS thread pinned to one of --cpus in
// turn. Either then writes "ready\n" on the descriptor --ready-fd (-1:
// none) and holds until the end.
func RunHog(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(HogCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		mode     = fs.String("mode", "", "memory or cpu")
		node     = fs.Int("node", -1, "node to bind the memory to")
		size     = fs.Uint64("bytes", 0, "bytes of memory to hold")
		cpuList  = fs.String("cpus", "", "cpus to pin the busy threads to")
		threads  = fs.Int("threads", 0, "busy threads")
		duration = fs.Duration("duration", 0, "how long to hold")
		readyFD  = fs.Int("ready-fd", -1, "descriptor to write ready to")
	)
	// The key is only there for ps to show whose hog this is.
	fs.String("key", "", "the injection key")
	var groups []string
	fs.Func("cgroup", "cgroup directory to move into first (repeatable)", func(s string) error {
		if !filepath.IsAbs(s) || filepath.Clean(s) != s {
			return fmt.Errorf("%q is not a clean absolute path", s)
		}
		groups = append(groups, s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", HogCommand, err)
		return code
	}
	// Before anything is taken: memory is charged to the group that
	// faults it in, and v1 does not move charges along with a process.
	for _, g := range groups {
		if err := joinCgroup(g); err != nil {
			return fail(1, err)
		}
	}
	if *duration <= 0 {
		return fail(2, errors.New("--duration must be positive"))
	}
	var ready *os.File
	if *readyFD >= 0 {
		if *readyFD < 3 {
			return fail(2, fmt.Errorf("--ready-fd %d: must be 3 or more", *readyFD))
		}
		ready = os.NewFile(uintptr(*readyFD), "ready-fd")
		defer ready.Close()
	}
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var release func()
	var err error
	switch *mode {
	case "memory":
		release, err = holdMemory(ctx, *node, *size)
	case "cpu":
		release, err = holdCPUs(*cpuList, *threads)
	default:
		return fail(2, fmt.Errorf("--mode %q: want memory or cpu", *mode))
	}
	if err != nil {
		return fail(1, err)
	}
	defer release()
	if ready != nil {
		if _, err := ready.WriteString("ready\n"); err != nil {
			return fail(1, fmt.Errorf("write ready: %w", err))
		}
		_ = ready.Close()
	}
	<-ctx.Done()
	return 0
}

// holdMemory maps size bytes, binds them to node and touches every page.
func holdMemory(ctx context.Context, node int, size uint64) (func(), error) {
	if node < 0 || node > numa.MaxNode {
		return nil, fmt.Errorf("--node %d: want 0-%d", node, numa.MaxNode)
	}
	page := uint64(os.Getpagesize())
	if size < page || size > 1<<50 {
		return nil, fmt.Errorf("--bytes %d: want a page (%d) to 1 PiB", size, page)
	}
	size = (size + page - 1) / page * page
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes: %w", size, err)
	}
	release := func() { _ = unix.Munmap(mem) }
	mask, err := maskOf([]int{node})
	if err != nil {
		release()
		return nil, err
	}
	// The policy is set on the mapping before any page exists, so every
	// page is allocated on node, or the hog is OOM-killed trying: that
	// node's memory, and no other, is what it must take.
	if _, _, e := unix.Syscall6(unix.SYS_MBIND, uintptr(unsafe.Pointer(&mem[0])), uintptr(size), mpolBind,
		uintptr(unsafe.Pointer(&mask[0])), nodeMaskWords*64+1, mpolMFStrict); e != 0 {
		release()
		return nil, fmt.Errorf("bind %d bytes to node %d: %w", size, node, e)
	}
	for off := uint64(0); off < size; off += page {
		if off%hogTouchChunk == 0 && ctx.Err() != nil {
			release()
			return nil, ctx.Err()
		}
		mem[off] = 1
	}
	// The kernel's word, not the request's: a hog whose memory is not
	// where the fault says fails rather than reports ready.
	p, err := placementOf(mem, hogSamples)
	if err == nil {
		err = p.checkBound(node)
	}
	if err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// hogSamples is how many of the hog's pages it asks the kernel about.
const hogSamples = 64

// holdCPUs starts threads busy threads pinned to cpus in turn. The other
// threads of the process are first confined to cpus too, so the hog as a
// whole stays on the node.
func holdCPUs(cpuList string, threads int) (func(), error) {
	cpus, err := numa.ParseCPUList(cpuList)
	if err != nil {
		return nil, fmt.Errorf("--cpus: %w", err)
	}
	if len(cpus) == 0 {
		return nil, errors.New("--cpus: empty")
	}
	if threads <= 0 || threads > 4096 {
		return nil, fmt.Errorf("--threads %d: want 1-4096", threads)
	}
	all, err := numa.SetOf(cpus)
	if err != nil {
		return nil, err
	}
	tids, err := numa.Threads(os.Getpid())
	if err != nil {
		return nil, err
	}
	for _, tid := range tids {
		if err := unix.SchedSetaffinity(tid, &all); err != nil && !errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("confine thread %d to cpus %s: %w", tid, cpuList, err)
		}
	}
	// One P per busy thread and one to spare, so the thread that waits
	// for the end still gets to run.
	runtime.GOMAXPROCS(threads + 1)
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, threads)
	for i := range threads {
		cpu := cpus[i%len(cpus)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Locked for good: the pinned thread must not go back to the
			// runtime's pool with a one-cpu mask.
			runtime.LockOSThread()
			var one unix.CPUSet
			one.Set(cpu)
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				errs <- fmt.Errorf("pin a busy thread to cpu %d: %w", cpu, err)
				return
			}
			errs <- nil
			spin(&stop)
		}()
	}
	release := func() { stop.Store(true); wg.Wait() }
	for range threads {
		if err := <-errs; err != nil {
			release()
			return nil, err
		}
	}
	return release, nil
}

// spin burns CPU until stop is set, looking at it every few microseconds.
func spin(stop *atomic.Bool) {
	x := uint64(1)
	for !stop.Load() {
		for range 4096 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	runtime.KeepAlive(x)
}

// joinCgroup moves this whole process (every thread, on v1 too) into the
// cgroup directory dir.
func joinCgroup(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("--cgroup: %w", err)
	}
	_, err = f.WriteString(strconv.Itoa(os.Getpid()))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--cgroup: move into %s: %w", dir, err)
	}
	return nil
}
