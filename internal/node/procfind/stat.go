package procfind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// ClockTicks is USER_HZ, the unit of the times in /proc/PID/stat. The
// kernel fixes it at 100 on every architecture Linux exports it for, so it
// is a constant rather than a sysconf call (which would need cgo).
const ClockTicks = 100

// Stat is what the injectors need from /proc/PID/stat.
type Stat struct {
	// State is the one-letter process state (R, S, D, T, t, Z, X, …).
	State byte
	// PPID is field 4, the parent's pid.
	PPID int
	// PGRP is field 5, the process group.
	PGRP int
	// UTime and STime are fields 14 and 15, the CPU time spent in user
	// and kernel mode by every thread, in ClockTicks.
	UTime, STime uint64
	// StartTicks is field 22, the start time in clock ticks since boot.
	StartTicks uint64
}

// ParseStat parses the bytes of /proc/PID/stat (or /proc/PID/task/TID/stat)
// for a caller that has them already; the readers here go through
// procfs instead.
// The second field, the command name in parentheses, may itself hold
// spaces and parentheses, so the fields are counted from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 || bytes.IndexByte(b, '(') < 0 {
		return Stat{}, errors.New("no command name in parentheses")
	}
	// After ") " come field 3 (state) to the end: field N is rest[N-3].
	rest := bytes.Fields(b[end+1:])
	if len(rest) < 20 {
		return Stat{}, fmt.Errorf("%d fields after the command name, want at least 20", len(rest))
	}
	if c := rest[0]; len(c) != 1 || !('A' <= c[0] && c[0] <= 'Z' || 'a' <= c[0] && c[0] <= 'z') {
		return Stat{}, fmt.Errorf("state %q is not one letter", c)
	}
	st := Stat{State: rest[0][0]}
	for _, f := range []struct {
		name string
		n    int
		dst  *uint64
	}{{"user time", 14, &st.UTime}, {"system time", 15, &st.STime}, {"start time", 22, &st.StartTicks}} {
		v, err := strconv.ParseUint(string(rest[f.n-3]), 10, 64)
		if err != nil {
			return Stat{}, fmt.Errorf("%s: %w", f.name, err)
		}
		*f.dst = v
	}
	for _, f := range []struct {
		name string
		n    int
		dst  *int
	}{{"parent pid", 4, &st.PPID}, {"process group", 5, &st.PGRP}} {
		v, err := strconv.ParseInt(string(rest[f.n-3]), 10, 32)
		if err != nil {
			return Stat{}, fmt.Errorf("%s: %w", f.name, err)
		}
		*f.dst = int(v)
	}
	return st, nil
}

// ReadStat reads a process's stat (through procfs, whose parser fills
// every field); a process that does not exist is os.ErrNotExist.
func ReadStat(pid int) (Stat, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return Stat{}, err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return Stat{}, err
	}
	return readStatOf(p, "/proc/"+strconv.Itoa(pid)+"/stat")
}

// ReadThreadStat reads the stat of thread tid of process pid
// (/proc/PID/task/TID/stat); a thread that does not exist is
// os.ErrNotExist.
func ReadThreadStat(pid, tid int) (Stat, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return Stat{}, err
	}
	t, err := fs.Thread(pid, tid)
	if err != nil {
		return Stat{}, err
	}
	return readStatOf(t, "/proc/"+strconv.Itoa(pid)+"/task/"+strconv.Itoa(tid)+"/stat")
}

// readStatOf reads p's stat through procfs and keeps what Stat holds; path
// names the file in errors.
func readStatOf(p procfs.Proc, path string) (Stat, error) {
	ps, err := p.Stat()
	if err != nil {
		return Stat{}, goneAsNotExist(err)
	}
	return fromProcfs(ps, path)
}

// fromProcfs is the Stat of a procfs.ProcStat, refusing a state that is
// not one letter as ParseStat does.
func fromProcfs(ps procfs.ProcStat, path string) (Stat, error) {
	if s := ps.State; len(s) != 1 || !('A' <= s[0] && s[0] <= 'Z' || 'a' <= s[0] && s[0] <= 'z') {
		return Stat{}, fmt.Errorf("%s: state %q is not one letter", path, s)
	}
	return Stat{State: ps.State[0], PPID: ps.PPID, PGRP: ps.PGRP, UTime: uint64(ps.UTime), STime: uint64(ps.STime), StartTicks: ps.Starttime}, nil
}

// goneAsNotExist turns the ESRCH of a read from /proc/PID that began
// before the process went away into os.ErrNotExist, as an open after it
// would have said.
func goneAsNotExist(err error) error {
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrNotExist
	}
	return err
}

// Proc names one process beyond doubt: a pid alone may be reused by an
// unrelated process once the first has been reaped, but the pair of pid
// and start time is unique until the next boot.
type Proc struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
}

// Identify returns the identity of the process pid now has.
func Identify(pid int) (Proc, error) {
	st, err := ReadStat(pid)
	if err != nil {
		return Proc{}, err
	}
	return Proc{PID: pid, StartTicks: st.StartTicks}, nil
}

// Valid reports whether p could name a process that a signal may safely
// reach: kill(2) reads 0, -1 and negative pids as groups, and pid 1 is
// init.
func (p Proc) Valid() bool { return p.PID > 1 && p.StartTicks > 0 }

// Stat reads p's stat, and os.ErrNotExist when p has exited (a zombie
// counts as exited: only its exit status waits for its parent) or its pid
// now belongs to another process.
func (p Proc) Stat() (Stat, error) {
	st, err := ReadStat(p.PID)
	if err != nil {
		return Stat{}, err
	}
	if st.StartTicks != p.StartTicks || st.State == 'Z' || st.State == 'X' {
		return Stat{}, os.ErrNotExist
	}
	return st, nil
}

// Alive reports whether p still runs (or is stopped) under its pid.
func (p Proc) Alive() (bool, error) {
	_, err := p.Stat()
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Signal sends sig to p and to nothing else: it opens a pidfd on the pid
// first and checks the start time after, so a pid that was reused between
// the two is refused and the pidfd, which cannot follow a reuse, carries
// the signal. A process that is gone is os.ErrNotExist.
func (p Proc) Signal(sig syscall.Signal) error {
	if !p.Valid() {
		return fmt.Errorf("pid %d is not one a signal may reach", p.PID)
	}
	fd, err := unix.PidfdOpen(p.PID, 0)
	if err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrNotExist
		}
		return fmt.Errorf("pidfd of pid %d: %w", p.PID, err)
	}
	defer unix.Close(fd)
	if _, err := p.Stat(); err != nil {
		return err
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrNotExist
		}
		return fmt.Errorf("signal pid %d: %w", p.PID, err)
	}
	return nil
}

// Threads lists the thread ids of pid (from /proc/PID/task).
func Threads(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid > 0 {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// WaitGone waits until p has exited (a zombie counts), for at most limit
// or until ctx ends. A signal is delivered asynchronously, so a caller
// that killed p uses it to return only once the death shows.
func (p Proc) WaitGone(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		alive, err := p.Alive()
		if err != nil || !alive {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pid %d still alive after %s (in uninterruptible sleep?): %w", p.PID, limit, ctx.Err())
		case <-tick.C:
		}
	}
}
