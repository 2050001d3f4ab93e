package workload

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/gpuchaos/gpuchaos/internal/procfind"
)

// RankProcess is a process that carries a job's rank environment.
type RankProcess struct {
	// Pid is the process id.
	Pid int
	// Rank is its RANK.
	Rank int
	// Job and Run are its GPUCHAOS_JOB and GPUCHAOS_RUN.
	Job, Run string
	// Restart is its GPUCHAOS_RESTART: the attempt it belongs to.
	Restart int
	// Main is true for the rank's own process, false for a process it
	// started (a data-loader worker inherits the environment too): the
	// main one is the topmost, whose parent is not of the same job and
	// rank.
	Main bool
}

// FindRanks lists the processes under procRoot (normally "/proc") whose
// environment has GPUCHAOS_JOB=job and a numeric RANK, ordered by rank and
// then pid. This is how a fault injector finds a job's ranks. Processes
// that end or cannot be read while it scans are skipped: reading another
// user's environ needs the privilege to ptrace it.
func FindRanks(procRoot, job string) ([]RankProcess, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("find ranks of job %q: %w", job, err)
	}
	var found []RankProcess
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "environ"))
		if err != nil {
			continue
		}
		rp, ok := parseRankEnviron(b, job)
		if !ok {
			continue
		}
		rp.Pid = pid
		found = append(found, rp)
		if b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat")); err == nil {
			if st, err := procfind.ParseStat(b); err == nil {
				parent[pid] = st.PPID
			}
		}
	}
	byPid := map[int]RankProcess{}
	for _, rp := range found {
		byPid[rp.Pid] = rp
	}
	for i := range found {
		pp, ok := byPid[parent[found[i].Pid]]
		found[i].Main = !ok || pp.Rank != found[i].Rank || pp.Run != found[i].Run
	}
	slices.SortFunc(found, func(a, b RankProcess) int {
		if a.Rank != b.Rank {
			return a.Rank - b.Rank
		}
		return a.Pid - b.Pid
	})
	return found, nil
}

// parseRankEnviron reads a NUL-separated environ block and reports whether
// it belongs to a rank of job.
func parseRankEnviron(b []byte, job string) (RankProcess, bool) {
	env := procfind.Environ(b)
	var rp RankProcess
	rp.Job, _ = env.Lookup(EnvJob)
	v, gotRank := env.Lookup(EnvRank)
	r, err := strconv.Atoi(v)
	rp.Rank = r
	gotRank = gotRank && err == nil && r >= 0
	rp.Run, _ = env.Lookup(EnvRun)
	if v, ok := env.Lookup(EnvRestart); ok {
		rp.Restart, _ = strconv.Atoi(v)
	}
	return rp, rp.Job == job && gotRank
}

// groupLive reports whether any process of process group pgid under
// procRoot is still running: present and not a zombie. A zombie has
// released everything but its pid; one whose parent is gone waits for
// init to reap it, which can take a while in a container.
func groupLive(procRoot string, pgid int) bool {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue
		}
		if st, err := procfind.ParseStat(b); err == nil && st.PGRP == pgid && st.State != 'Z' && st.State != 'X' {
			return true
		}
	}
	return false
}
