package gpuproc

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

// fileStem turns a key into a file name stem: letters, digits, '-', '_'
// and '.' stay, every other byte becomes %XX, so distinct keys never share
// a file and none can leave StateDir. A stem too long for a file name keeps
// a readable prefix and adds a hash of the whole key.
func fileStem(key string) string {
	var b strings.Builder
	for i := range len(key) {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	s := b.String()
	// Keys cannot be empty, but "%" alone would still be a safe stem.
	const maxStem = 200 // leaves room for ".json.tmp" and a random suffix under 255
	if len(s) > maxStem {
		sum := sha256.Sum256([]byte(key))
		s = s[:maxStem-33] + "~" + hex.EncodeToString(sum[:16])
	}
	return s
}

// readState loads the key's state; a missing file is fs.ErrNotExist.
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

// writeState replaces the state file atomically: a temporary file in the
// same directory, written and synced, renamed over the old one, then the
// directory synced so the rename itself survives a power cut. A reader
// therefore sees the old state or the new one, never a mix.
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

// removeState deletes the state file, durably; a missing one is fine.
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
