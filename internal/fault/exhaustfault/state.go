package exhaustfault

import (
	"fmt"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
)

// stateVersion is the version of the state file's layout.
const stateVersion = 1

// maxStateBytes bounds what the loader reads: a state file holds a few
// children, so anything larger is not one of ours.
const maxStateBytes = 1 << 20

// state is what StateDir/KEY.json records of one injected key.
type state struct {
	Version int    `json:"version"`
	Key     string `json:"key"`
	Fault   string `json:"fault"`
	GPU     int    `json:"gpu"`
	// Created is when the injection began.
	Created time.Time `json:"created"`
	// Children are the processes started so far, in order.
	Children []childRecord `json:"children"`
}

// childRecord names one child process beyond doubt: a pid alone may be
// reused by an unrelated process once the child has been reaped, but the
// pair of pid and start time (field 22 of /proc/PID/stat, in clock ticks
// since boot) is unique until the next boot.
type childRecord struct {
	PID        int      `json:"pid"`
	StartTicks uint64   `json:"start_ticks"`
	Argv       []string `json:"argv"`
}

// parseState reads a state file's bytes and checks every field a recovery
// relies on, above all that no pid could make a signal reach a process
// group that is not a child's (0, 1 and negative pids mean "my group",
// "init" and "every process" to kill(2)).
func parseState(b []byte) (state, error) {
	var st state
	if err := statedir.Decode(b, &st); err != nil {
		return state{}, err
	}
	if err := statedir.CheckHeader(st.Version, stateVersion, st.Key); err != nil {
		return state{}, err
	}
	for i, c := range st.Children {
		switch {
		case c.PID <= 1:
			return state{}, fmt.Errorf("child %d: pid %d is not a child's", i, c.PID)
		case c.StartTicks == 0:
			return state{}, fmt.Errorf("child %d: no start time", i)
		case len(c.Argv) == 0:
			return state{}, fmt.Errorf("child %d: no argv", i)
		}
	}
	return st, nil
}

// openState opens the state directory. File names are the escaped key
// (statedir.Escaped, a leading '.' kept), as before this package used
// statedir, so state files written by an earlier version are found.
func openState(path string) (*statedir.Dir, error) {
	return statedir.Open(path, "", statedir.WithNames(fileStem), statedir.WithMaxRecord(maxStateBytes))
}

// fileStem names a key's files: StateDir/STEM.json and StateDir/STEM.log.
func fileStem(key string) string { return statedir.Escaped(key, false) }
