package procfind

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/prometheus/procfs"
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
	// Main is true for the process that is the rank, false for a
	// launcher of it or a worker it forked that carry its environment
	// too (see the package doc); set by Ranks, not recorded.
	Main bool `json:"-"`
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

// ReadEnviron reads pid's environment as it was at exec; changes the
// process made since with setenv(3) are not visible, which suits
// variables a launcher sets. procfs reads at most the first MiB of it,
// beyond what any launcher sets (the kernel caps arguments and
// environment together at a quarter of the stack limit, 2 MiB by
// default).
func ReadEnviron(pid int) (Environ, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return nil, err
	}
	return environOf(p)
}

// environOf reads p's environment through procfs, which splits it at the
// NULs; Environ keeps it as the kernel's bytes.
func environOf(p procfs.Proc) (Environ, error) {
	kv, err := p.Environ()
	if err != nil {
		return nil, goneAsNotExist(err)
	}
	var b []byte
	for _, e := range kv {
		b = append(append(b, e...), 0)
	}
	return Environ(b), nil
}

// ErrNoRank reports that no process on this node is the asked-for rank.
var ErrNoRank = errors.New("no such rank on this node")

// Ranks lists the processes of job on this node, ordered by rank and then
// start time, each with Main set on the one that is the rank (see the
// package doc for the rule). Processes that exit during the scan, or whose
// environment cannot be read, are left out: reading another user's
// environ needs the privilege to ptrace it.
func Ranks(job string) ([]Rank, error) {
	return ranksUnder(procfs.DefaultMountPoint, job, os.Getpid())
}

// ranksUnder is Ranks over the proc file system at root, leaving out the
// process self (the caller, whose environment may name the job it is
// looking for).
func ranksUnder(root, job string, self int) ([]Rank, error) {
	if job == "" {
		return nil, errors.New("find ranks: empty job name")
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		return nil, fmt.Errorf("find ranks of job %s: %w", job, err)
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("find ranks of job %s: %w", job, err)
	}
	var found []member
	for _, p := range procs {
		if p.PID <= 1 || p.PID == self {
			continue
		}
		env, err := environOf(p)
		if err != nil {
			continue // gone, or a kernel thread
		}
		r, ok, err := ParseRank(env)
		if err != nil || !ok || r.Job != job {
			continue
		}
		ps, err := p.Stat()
		if err != nil || ps.State == "Z" || ps.State == "X" {
			continue
		}
		r.Proc, r.Env = Proc{PID: p.PID, StartTicks: ps.Starttime}, string(env)
		found = append(found, member{Rank: r, ppid: ps.PPID, stack: ps.StartStack})
	}
	markMain(found)
	out := make([]Rank, len(found))
	for i, m := range found {
		out[i] = m.Rank
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

// member is a process of a job with what markMain needs of its stat.
type member struct {
	Rank
	// ppid is the parent's pid, stack the start of the stack (stat field
	// 28), which fork copies and exec lays out anew.
	ppid  int
	stack uint64
}

// markMain sets Main on the process that is its rank: of the processes
// carrying one rank, those whose parent carries it too hang under that
// parent. A child with its parent's start of stack is a fork of it (a
// loader worker), and it and everything under it are the parent's; a
// child with a stack of its own was exec'd, so its parent only launched
// it (a shell, torchrun) and the child is the rank. The rank is thus the
// deepest process reached from the top by exec alone. A start of stack of
// 0 (the kernel hides it from a reader that may not ptrace the process)
// counts as exec'd, which makes the leaf the rank.
func markMain(ms []member) {
	type key struct{ pid, rank int }
	at := make(map[key]int, len(ms))
	for i, m := range ms {
		at[key{m.PID, m.Rank.Rank}] = i
	}
	parent := func(i int) (int, bool) {
		j, ok := at[key{ms[i].ppid, ms[i].Rank.Rank}]
		return j, ok && j != i
	}
	forked := func(i, parent int) bool { return ms[i].stack != 0 && ms[i].stack == ms[parent].stack }
	launcher := make([]bool, len(ms))
	for i := range ms {
		if p, ok := parent(i); ok && !forked(i, p) {
			launcher[p] = true
		}
	}
	for i := range ms {
		// Walk up to the top; the bound guards against a parent loop,
		// which only a made-up /proc could hold.
		underFork := false
		for c, n := i, 0; n < len(ms); n++ {
			p, ok := parent(c)
			if !ok {
				break
			}
			if forked(c, p) {
				underFork = true
				break
			}
			c = p
		}
		ms[i].Main = !underFork && !launcher[i]
	}
}

// RankProcess returns the process of one rank of job: the eldest of those
// Ranks marks Main, so that neither a launcher of the rank nor one of its
// workers is taken for it. It wraps ErrNoRank when there is none.
func RankProcess(job string, rank int) (Rank, error) {
	all, err := Ranks(job)
	if err != nil {
		return Rank{}, err
	}
	for _, r := range all {
		if r.Rank == rank && r.Main {
			return r, nil
		}
	}
	return Rank{}, fmt.Errorf("job %s rank %d: %w", job, rank, ErrNoRank)
}

// GroupLive reports whether any process of process group pgid is still
// running: present and not a zombie. A zombie has released everything but
// its pid; one whose parent is gone waits for init to reap it, which can
// take a while in a container.
func GroupLive(pgid int) bool { return groupLiveUnder(procfs.DefaultMountPoint, pgid) }

func groupLiveUnder(root string, pgid int) bool {
	fs, err := procfs.NewFS(root)
	if err != nil {
		return false
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return false
	}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && st.PGRP == pgid && st.State != "Z" && st.State != "X" {
			return true
		}
	}
	return false
}
