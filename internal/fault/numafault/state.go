package numafault

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
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

// procID names a process or thread beyond doubt: a pid alone may be
// reused once the process is gone, the pair with its start time (clock
// ticks since boot) not until the next boot.
type procID struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
}

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
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return state{}, fmt.Errorf("decode: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return state{}, errors.New("decode: data after the state object")
	}
	if st.Version != stateVersion {
		return state{}, fmt.Errorf("version %d: this build reads version %d", st.Version, stateVersion)
	}
	if st.Key == "" {
		return state{}, errors.New("no key")
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

// fileStem turns a key into a file name: letters, digits, '-', '_' and
// '.' stay, other bytes become %XX, so distinct keys never share a file
// and none leaves StateDir; a long one keeps a prefix and adds a hash.
func fileStem(key string) string {
	var b strings.Builder
	for i := range len(key) {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	s := b.String()
	const maxStem = 200
	if len(s) > maxStem {
		sum := sha256.Sum256([]byte(key))
		s = s[:maxStem-33] + "~" + hex.EncodeToString(sum[:16])
	}
	return s
}

func readState(path string) (state, error) {
	f, err := os.Open(path)
	if err != nil {
		return state{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStateBytes+1))
	if err != nil {
		return state{}, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxStateBytes {
		return state{}, fmt.Errorf("read %s: over %d bytes", path, maxStateBytes)
	}
	st, err := parseState(b)
	if err != nil {
		return state{}, fmt.Errorf("state file %s: %w", path, err)
	}
	return st, nil
}

// writeState replaces the state file atomically (temporary file, sync,
// rename, directory sync): a reader sees the old state or the new one.
func writeState(path string, st state) (err error) {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write state: sync: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return syncDir(dir)
}

func removeState(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove state: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync state dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync state dir %s: %w", dir, err)
	}
	return nil
}
