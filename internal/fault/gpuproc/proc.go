package gpuproc

import (
	"errors"
	"os"

	"github.com/gpuchaos/gpuchaos/internal/procfind"
)

// readStat reads a process's stat; a process that does not exist is
// os.ErrNotExist. The parser lives in internal/procfind, shared with the
// workload and checkpoint injectors.
func readStat(pid int) (procfind.Stat, error) { return procfind.ReadStat(pid) }

// running reports whether the recorded child still runs: the pid exists,
// has the recorded start time (so it was not reused) and is not a zombie
// (a zombie is dead; only its exit status waits for its parent).
func running(c childRecord) (bool, error) {
	st, err := readStat(c.PID)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return st.StartTicks == c.StartTicks && st.State != 'Z' && st.State != 'X', nil
}
