package gpuproc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// procStat is what a recovery needs from /proc/PID/stat.
type procStat struct {
	// State is the one-letter process state (R, S, D, Z, X, …).
	State byte
	// StartTicks is field 22, the start time in clock ticks since boot.
	StartTicks uint64
}

// parseStat reads /proc/PID/stat. The second field, the command name in
// parentheses, may itself hold spaces and parentheses, so the fields are
// counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 || bytes.IndexByte(b, '(') < 0 {
		return procStat{}, errors.New("no command name in parentheses")
	}
	// After ") " come field 3 (state) to the end: field 22 is the 20th.
	rest := bytes.Fields(b[end+1:])
	if len(rest) < 20 {
		return procStat{}, fmt.Errorf("%d fields after the command name, want at least 20", len(rest))
	}
	if c := rest[0]; len(c) != 1 || !('A' <= c[0] && c[0] <= 'Z' || 'a' <= c[0] && c[0] <= 'z') {
		return procStat{}, fmt.Errorf("state %q is not one letter", c)
	}
	ticks, err := strconv.ParseUint(string(rest[19]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("start time: %w", err)
	}
	return procStat{State: rest[0][0], StartTicks: ticks}, nil
}

// readStat reads a process's stat; a process that does not exist is
// os.ErrNotExist.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	st, err := parseStat(b)
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// running reports whether the recorded child still runs: the pid exists,
// has the recorded start time (so it was not reused) and is not a zombie
// (a zombie is dead; only its exit status waits for its parent).
func running(c childRecord) (bool, error) {
	st, err := readStat(c.PID)
	// ESRCH: the process went away between the open and the read.
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return st.StartTicks == c.StartTicks && st.State != 'Z' && st.State != 'X', nil
}
