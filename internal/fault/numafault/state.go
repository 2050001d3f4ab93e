package numafault

import (
	"fmt"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// stateVersion is the version of the state file's layout.
const stateVersion = 1

// maxStateBytes bounds what the loader reads: a rank with many thousand
// threads still fits.
const maxStateBytes = 4 << 20

// state is what StateDir/KEY.json records of one injected key.
type state struct {
	Version int       `json:"version"`
	Key     string    `json:"key"`
	Fault   string    `json:"fault"`
	GPU     int       `json:"gpu"`
	GPUNode int       `json:"gpu_node"`
	Created time.Time `json:"created"`

	// Target is the rank whose pages or threads were moved (remote-memory,
	// wrong-affinity).
	Target *procID `json:"target,omitempty"`
	// ToNode is the node the rank's pages or threads were moved to.
	ToNode int `json:"to_node"`
	// BackNode is where remote-memory's recovery moves the pages: the node
	// that held most of the rank's memory off ToNode before the fault.
	BackNode int `json:"back_node"`
	// Before is the rank's resident bytes per node before the fault.
	Before map[int]uint64 `json:"before,omitempty"`
	// Threads are wrong-affinity's threads with their original masks.
	Threads []threadMask `json:"threads,omitempty"`
	// Child is the hog process (memory-pressure, cpu-saturation).
	Child *procID `json:"child,omitempty"`
}

// procID names a process beyond doubt: a pid alone may be reused once
// the process is gone, the pair with its start time (clock ticks since
// boot) not until the next boot. Its JSON is the state file's as before.
type procID = procfind.Proc

// threadMask is one thread's CPU affinity before the fault.
type threadMask struct {
	TID        int    `json:"tid"`
	StartTicks uint64 `json:"start_ticks"`
	CPUs       string `json:"cpus"` // kernel list syntax
}

// parseState decodes a state file and checks what recovery relies on,
// above all that no pid could make a signal or a syscall reach something
// that is not a target (0, 1 and negative pids mean "me", "init" and
// "everyone" to kill(2)).
func parseState(b []byte) (state, error) {
	var st state
	if err := statedir.Decode(b, &st); err != nil {
		return state{}, err
	}
	if err := statedir.CheckHeader(st.Version, stateVersion, st.Key); err != nil {
		return state{}, err
	}
	for what, p := range map[string]*procID{"target": st.Target, "child": st.Child} {
		if p != nil && (p.PID <= 1 || p.StartTicks == 0) {
			return state{}, fmt.Errorf("%s pid %d start %d is not a process's", what, p.PID, p.StartTicks)
		}
	}
	for _, th := range st.Threads {
		if th.TID <= 1 || th.StartTicks == 0 {
			return state{}, fmt.Errorf("thread %d start %d is not a thread's", th.TID, th.StartTicks)
		}
	}
	return st, nil
}

// openState opens the state directory. File names are the escaped key
// with a leading '.' escaped too (statedir.Escaped), as before this
// package used statedir, so state files written by an earlier version are
// found.
func openState(path string) (*statedir.Dir, error) {
	return statedir.Open(path, "", statedir.WithNames(fileStem), statedir.WithMaxRecord(maxStateBytes))
}

// fileStem names a key's files: StateDir/STEM.json and StateDir/STEM.log.
func fileStem(key string) string { return statedir.Escaped(key, true) }
