package numafault

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/gpuchaos/gpuchaos/internal/procfind"
)

// readStat reads the stat of a process, or with tid > 0 of one of its
// threads; a process that does not exist is os.ErrNotExist.
func readStat(pid, tid int) (procfind.Stat, error) {
	if tid <= 0 {
		return procfind.ReadStat(pid)
	}
	path := "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/stat"
	b, err := os.ReadFile(path)
	if errors.Is(err, syscall.ESRCH) {
		err = os.ErrNotExist // gone between the open and the read
	}
	if err != nil {
		return procfind.Stat{}, err
	}
	st, err := procfind.ParseStat(b)
	if err != nil {
		return procfind.Stat{}, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

// identify returns the process's identity for a state file.
func identify(pid int) (procID, error) {
	st, err := readStat(pid, 0)
	if err != nil {
		return procID{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	if st.State == 'Z' || st.State == 'X' {
		return procID{}, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
	}
	return procID{PID: pid, StartTicks: st.StartTicks}, nil
}

// threadAlive reports whether thread th of process pid still runs under
// its recorded start time.
func threadAlive(pid int, th threadMask) bool {
	st, err := readStat(pid, th.TID)
	return err == nil && st.StartTicks == th.StartTicks && st.State != 'Z' && st.State != 'X'
}

// Environment variables that name a rank, as gpuchaos exec and the usual
// launchers (torchrun, mpirun wrappers) set them.
const (
	JobEnv  = "GPUCHAOS_JOB"
	RankEnv = "RANK"
)

// environHas reports whether a NUL-separated environment block holds
// every want[k]=v.
func environHas(block []byte, want map[string]string) bool {
	found := map[string]bool{}
	for kv := range bytes.SplitSeq(block, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok {
			continue
		}
		if w, in := want[string(k)]; in && w == string(v) {
			found[string(k)] = true
		}
	}
	return len(want) > 0 && len(found) == len(want)
}

// findRank returns the pid of the process whose environment names job and
// rank. None, or more than one that are not each other's threads, is an
// error: a fault must touch one rank exactly.
func findRank(job string, rank int) (int, error) {
	if job == "" {
		return 0, errors.New("no pid parameter and no job to find the rank by")
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("find rank %d of job %s: %w", rank, job, err)
	}
	want := map[string]string{JobEnv: job, RankEnv: strconv.Itoa(rank)}
	var hits []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone, or a kernel thread
		}
		if environHas(b, want) {
			hits = append(hits, pid)
		}
	}
	// A launcher (torchrun, a shell) may carry the same environment as its
	// rank; the rank is the one whose parent is not also a hit.
	hits = leaves(hits)
	switch len(hits) {
	case 0:
		return 0, fmt.Errorf("find rank %d of job %s: no process has %s=%s and %s=%d: %w", rank, job, JobEnv, job, RankEnv, rank, os.ErrNotExist)
	case 1:
		return hits[0], nil
	}
	return 0, fmt.Errorf("find rank %d of job %s: %d processes match (pids %v); give the pid parameter", rank, job, len(hits), hits)
}

// leaves drops every pid that is the parent of another in pids.
func leaves(pids []int) []int {
	parent := map[int]bool{}
	for _, p := range pids {
		if pp, err := ppid(p); err == nil {
			parent[pp] = true
		}
	}
	var out []int
	for _, p := range pids {
		if !parent[p] {
			out = append(out, p)
		}
	}
	return out
}

func ppid(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	end := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[end+1:])
	if end < 0 || len(f) < 2 {
		return 0, errors.New("short stat")
	}
	return strconv.Atoi(string(f[1]))
}
