package numafault

import (
	"errors"
	"fmt"
	"os"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// identify returns the process's identity for a state file; a zombie is
// os.ErrNotExist, since its memory and threads, which these faults move,
// are gone.
func identify(pid int) (procID, error) {
	id, err := procfind.Identify(pid)
	if err == nil {
		_, err = id.Stat() // refuses a zombie
	}
	if err != nil {
		return procID{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return id, nil
}

// threadAlive reports whether thread th of process pid still runs under
// its recorded start time.
func threadAlive(pid int, th threadMask) bool {
	st, err := procfind.ReadThreadStat(pid, th.TID)
	return err == nil && st.StartTicks == th.StartTicks && st.State != 'Z' && st.State != 'X'
}

// Environment variables that name a rank, as gpuchaos exec and the usual
// launchers (torchrun, mpirun wrappers) set them.
const (
	JobEnv  = procfind.EnvJob
	RankEnv = procfind.EnvRank
)

// findRank returns the pid of the process that is rank of job, as
// procfind decides it (a launcher carrying the rank's environment is not
// the rank; the process it exec'd is). None, or more than one, is an
// error: a fault must touch one rank exactly.
func findRank(job string, rank int) (int, error) {
	if job == "" {
		return 0, errors.New("no pid parameter and no job to find the rank by")
	}
	all, err := procfind.Ranks(job)
	if err != nil {
		return 0, fmt.Errorf("find rank %d of job %s: %w", rank, job, err)
	}
	var hits []int
	for _, r := range all {
		if r.Rank == rank && r.Main {
			hits = append(hits, r.PID)
		}
	}
	switch len(hits) {
	case 0:
		return 0, fmt.Errorf("find rank %d of job %s: no process has %s=%s and %s=%d: %w", rank, job, JobEnv, job, RankEnv, rank, os.ErrNotExist)
	case 1:
		return hits[0], nil
	}
	return 0, fmt.Errorf("find rank %d of job %s: %d processes match (pids %v); give the pid parameter", rank, job, len(hits), hits)
}
