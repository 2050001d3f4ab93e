package numa

import (
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// Threads returns the thread IDs of process pid, from /proc/PID/task,
// sorted.
func Threads(pid int) ([]int, error) {
	out, err := procfind.Threads(pid)
	if err != nil {
		return nil, fmt.Errorf("list threads of pid %d: %w", pid, err)
	}
	slices.Sort(out)
	return out, nil
}

// ThreadAffinity returns the CPUs thread tid may run on.
func ThreadAffinity(tid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err != nil {
		return nil, fmt.Errorf("read cpu affinity of thread %d: %w", tid, err)
	}
	return CPUsOf(&set), nil
}

// CPUsOf lists the CPUs in set, sorted.
func CPUsOf(set *unix.CPUSet) []int {
	var out []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// SetOf builds a CPU set; CPUs beyond what unix.CPUSet holds (1024) are
// an error.
func SetOf(cpus []int) (unix.CPUSet, error) {
	var set unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= len(set)*64 {
			return set, fmt.Errorf("cpu %d is outside the %d a cpu set holds", c, len(set)*64)
		}
		set.Set(c)
	}
	return set, nil
}

// Affinity returns the CPUs any thread of process pid may run on: the
// union of its threads' masks, since one thread left on the far socket
// (a data loader, NCCL's proxy thread) is enough to hurt. Threads that
// exit while they are read are skipped; a process that has exited is an
// error wrapping os.ErrNotExist or unix.ESRCH.
func Affinity(pid int) ([]int, error) {
	tids, err := Threads(pid)
	if err != nil {
		return nil, err
	}
	var all []int
	for _, tid := range tids {
		c, err := ThreadAffinity(tid)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read cpu affinity of pid %d: %w", pid, err)
		}
		all = append(all, c...)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("read cpu affinity of pid %d: %w", pid, unix.ESRCH)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}
