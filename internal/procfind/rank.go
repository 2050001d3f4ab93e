package procfind

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
)

// Environment variables that mark a rank of a training job. gpuchaos'
// own launcher and torchrun-style launchers set RANK, LOCAL_RANK and
// WORLD_SIZE; GPUCHAOS_JOB is the job's name, set by our supervisor or by
// whoever starts a job that experiments should be able to find.
const (
	EnvJob       = "GPUCHAOS_JOB"
	EnvRank      = "RANK"
	EnvLocalRank = "LOCAL_RANK"
	EnvWorldSize = "WORLD_SIZE"
)

// Environ is one process's environment as /proc/PID/environ holds it:
// NUL-terminated KEY=VALUE entries.
type Environ []byte

// Lookup returns the value of key, and false when the environment has no
// such entry. When a key appears twice the first wins, as getenv(3) does.
func (e Environ) Lookup(key string) (string, bool) {
	prefix := append([]byte(key), '=')
	for rest := []byte(e); len(rest) > 0; {
		entry := rest
		if i := bytes.IndexByte(rest, 0); i >= 0 {
			entry, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if bytes.HasPrefix(entry, prefix) {
			return string(entry[len(prefix):]), true
		}
	}
	return "", false
}

// Rank is one process of a job found on this node.
type Rank struct {
	Proc
	Job  string
	Rank int
	// LocalRank and WorldSize are -1 when the environment lacks them.
	LocalRank, WorldSize int
	// Env is the environment Ranks read the rank from (as a string, so
	// that Rank stays comparable), for callers that need more of it, such
	// as a checkpoint directory; not recorded.
	Env string `json:"-"`
}

// ParseRank reads the rank variables from an environment. ok is false when
// the environment carries no GPUCHAOS_JOB or no RANK; a RANK that is not a
// non-negative integer is an error, since a job that sets one means it.
func ParseRank(env Environ) (r Rank, ok bool, err error) {
	job, hasJob := env.Lookup(EnvJob)
	rank, hasRank := env.Lookup(EnvRank)
	if !hasJob || !hasRank || job == "" {
		return Rank{}, false, nil
	}
	r = Rank{Job: job, LocalRank: -1, WorldSize: -1}
	if r.Rank, err = nonNegative(EnvRank, rank); err != nil {
		return Rank{}, false, err
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{EnvLocalRank, &r.LocalRank}, {EnvWorldSize, &r.WorldSize}} {
		if s, ok := env.Lookup(f.key); ok {
			if *f.dst, err = nonNegative(f.key, s); err != nil {
				return Rank{}, false, err
			}
		}
	}
	return r, true, nil
}

func nonNegative(key, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q is not a non-negative integer", key, s)
	}
	return n, nil
}

// maxEnviron bounds how much of one environment is read: the kernel caps
// a process's arguments and environment together at a quarter of its
// stack limit, 2 MiB by default.
const maxEnviron = 4 << 20

// ReadEnviron reads pid's environment as it was at exec; changes the
// process made since with setenv(3) are not visible, which suits
// variables a launcher sets.
func ReadEnviron(pid int) (Environ, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 0, 4096)
	for len(b) < maxEnviron {
		if len(b) == cap(b) {
			b = slices.Grow(b, cap(b))
		}
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil || n == 0 {
			if errors.Is(err, syscall.ESRCH) {
				return nil, os.ErrNotExist
			}
			break
		}
	}
	return Environ(b), nil
}

// ErrNoRank reports that no process on this node is the asked-for rank.
var ErrNoRank = errors.New("no such rank on this node")

// Ranks lists the processes of job on this node, ordered by rank and then
// start time. A process of a job's rank that itself starts children
// with the same environment (data-loader workers, a shell wrapper) shows
// as several processes of one rank; RankProcess picks the eldest.
// Processes that exit during the scan, or whose environment cannot be
// read, are left out.
func Ranks(job string) ([]Rank, error) {
	if job == "" {
		return nil, errors.New("find ranks: empty job name")
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("find ranks of job %s: %w", job, err)
	}
	self := os.Getpid()
	var out []Rank
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == self {
			continue
		}
		env, err := ReadEnviron(pid)
		if err != nil {
			continue // gone, or a kernel thread
		}
		r, ok, err := ParseRank(env)
		if err != nil || !ok || r.Job != job {
			continue
		}
		st, err := ReadStat(pid)
		if err != nil || st.State == 'Z' || st.State == 'X' {
			continue
		}
		r.Proc, r.Env = Proc{PID: pid, StartTicks: st.StartTicks}, string(env)
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Rank) int {
		if a.Rank != b.Rank {
			return a.Rank - b.Rank
		}
		if a.StartTicks != b.StartTicks {
			if a.StartTicks < b.StartTicks {
				return -1
			}
			return 1
		}
		return a.PID - b.PID
	})
	return out, nil
}

// RankProcess returns the process of one rank of job: among the
// processes carrying that rank, the eldest whose parent does not carry
// it too, so that a rank's own workers are never mistaken for it. It
// wraps ErrNoRank when there is none.
func RankProcess(job string, rank int) (Rank, error) {
	all, err := Ranks(job)
	if err != nil {
		return Rank{}, err
	}
	var mine []Rank
	for _, r := range all {
		if r.Rank == rank {
			mine = append(mine, r)
		}
	}
	for _, r := range mine {
		st, err := r.Stat()
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(mine, func(o Rank) bool { return o.PID == st.PPID }) {
			return r, nil
		}
	}
	return Rank{}, fmt.Errorf("job %s rank %d: %w", job, rank, ErrNoRank)
}
