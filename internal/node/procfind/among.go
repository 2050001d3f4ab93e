package procfind

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/prometheus/procfs"
)

// RankAmong returns the process that is rank among pids, a set found by
// other means than a scan of /proc (a pod's processes, from its cgroup):
// of those whose environment sets RANK to rank, the one Ranks' rule marks
// Main (see the package doc), the eldest of several. GPUCHAOS_JOB is not
// required, since a pod's launcher (torchrun, a training operator) sets
// RANK alone; when job is not empty, a process that sets GPUCHAOS_JOB to
// another job is left out. Processes that exit meanwhile, or whose
// environment cannot be read, are left out. None wraps ErrNoRank; carried
// reports whether any process of pids set RANK at all, so that a caller
// can tell a pod that is not the rank from one that does not say.
func RankAmong(pids []int, job string, rank int) (r Rank, carried bool, err error) {
	return rankAmongUnder(procfs.DefaultMountPoint, pids, job, rank)
}

func rankAmongUnder(root string, pids []int, job string, rank int) (Rank, bool, error) {
	fsys, err := procfs.NewFS(root)
	if err != nil {
		return Rank{}, false, fmt.Errorf("find rank %d: %w", rank, err)
	}
	var (
		found   []member
		carried bool
	)
	for _, pid := range pids {
		p, err := fsys.Proc(pid)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return Rank{}, false, fmt.Errorf("find rank %d: pid %d: %w", rank, pid, err)
		}
		env, err := environOf(p)
		if err != nil {
			continue
		}
		s, ok := env.Lookup(EnvRank)
		if !ok {
			continue
		}
		carried = true
		n, err := nonNegative(EnvRank, s)
		if err != nil || n != rank {
			continue
		}
		if j, ok := env.Lookup(EnvJob); ok && job != "" && j != job {
			continue
		}
		r, ok, err := ParseRank(env)
		if err != nil || !ok {
			// Not a gpuchaos job (no GPUCHAOS_JOB): the rank is RANK's alone.
			r = Rank{Rank: rank, LocalRank: -1, WorldSize: -1}
		}
		ps, err := p.Stat()
		if err != nil || ps.State == "Z" || ps.State == "X" {
			continue
		}
		r.Proc, r.Env = Proc{PID: p.PID, StartTicks: ps.Starttime}, string(env)
		found = append(found, member{Rank: r, ppid: ps.PPID, stack: ps.StartStack})
	}
	markMain(found)
	var mains []Rank
	for _, m := range found {
		if m.Main {
			mains = append(mains, m.Rank)
		}
	}
	if len(mains) == 0 {
		return Rank{}, carried, fmt.Errorf("rank %d among %d processes: %w", rank, len(pids), ErrNoRank)
	}
	slices.SortFunc(mains, func(a, b Rank) int {
		if a.StartTicks != b.StartTicks {
			if a.StartTicks < b.StartTicks {
				return -1
			}
			return 1
		}
		return a.PID - b.PID
	})
	return mains[0], carried, nil
}
