// Package statedir keeps the per-key records that let a fresh injector,
// in a fresh process, recover what a crashed one injected. Each key has
// one JSON file, named from a hash of the key (keys are free text), written
// atomically: a temporary file, synced, renamed over the old one, then the
// directory synced, so a reader sees the old record or the new one and a
// power cut keeps the rename. The record's meaning and its validation
// belong to the injector that writes it.
package statedir

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// MaxRecord bounds what Read loads: a record describes one injection, so
// anything larger is not one of ours.
const MaxRecord = 16 << 20

// Dir is a directory of records, all of one injector family. It is safe
// for concurrent use.
type Dir struct {
	path   string
	prefix string

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// Open returns the records under path whose file names start with prefix,
// creating path (mode 0700) when missing. Every injector of one family on
// a node must use the same path and prefix, so that one process recovers
// what another injected.
func Open(path, prefix string) (*Dir, error) {
	if path == "" {
		return nil, errors.New("state directory: empty path")
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	return &Dir{path: path, prefix: prefix, locks: map[string]*sync.Mutex{}}, nil
}

// Name returns the stem of key's files: the prefix and a hash of the key,
// fixed length and free of path separators whatever the key holds.
func (d *Dir) Name(key string) string {
	sum := sha256.Sum256([]byte(key))
	return d.prefix + hex.EncodeToString(sum[:12])
}

// File is the path of key's record.
func (d *Dir) File(key string) string { return filepath.Join(d.path, d.Name(key)+".json") }

// Lock serialises the calls for one key and returns the unlock.
func (d *Dir) Lock(key string) func() {
	d.mu.Lock()
	l, ok := d.locks[key]
	if !ok {
		l = &sync.Mutex{}
		d.locks[key] = l
	}
	d.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Exists reports whether key has a record.
func (d *Dir) Exists(key string) (bool, error) {
	_, err := os.Stat(d.File(key))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("state of %q: %w", key, err)
	}
	return true, nil
}

// Read returns key's record; a missing one is os.ErrNotExist.
func (d *Dir) Read(key string) ([]byte, error) {
	f, err := os.Open(d.File(key))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxRecord+1))
	if err != nil {
		return nil, fmt.Errorf("read state %s: %w", f.Name(), err)
	}
	if len(b) > MaxRecord {
		return nil, fmt.Errorf("read state %s: over %d bytes", f.Name(), MaxRecord)
	}
	return b, nil
}

// Write replaces key's record with v encoded as JSON, atomically and
// durably.
func (d *Dir) Write(key string, v any) (err error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	f, err := os.CreateTemp(d.path, "."+d.Name(key)+".tmp*")
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
	if err := os.Rename(f.Name(), d.File(key)); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return d.sync()
}

// Remove deletes key's record, durably; a missing one is fine.
func (d *Dir) Remove(key string) error {
	if err := os.Remove(d.File(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove state: %w", err)
	}
	return d.sync()
}

func (d *Dir) sync() error {
	f, err := os.Open(d.path)
	if err != nil {
		return fmt.Errorf("sync state directory: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync state directory %s: %w", d.path, err)
	}
	return nil
}
