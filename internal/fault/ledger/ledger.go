// Package ledger records every injection before it acts, so that whatever a
// crash leaves injected is recovered on the next start. The file ledger is
// an append-only JSON-lines journal; the memory ledger serves targets whose
// state dies with the process (the twin). RecoverPending recovers what a
// ledger still holds through the injectors of the kind of target that
// recorded it.
package ledger

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// Entry is one injection.
type Entry struct {
	Key        string            `json:"key"`
	Run        string            `json:"run"`
	Target     string            `json:"target"`
	Fault      string            `json:"fault"`
	Mechanism  string            `json:"mechanism"`
	Params     map[string]string `json:"params,omitempty"`
	Ref        inventory.Ref     `json:"ref"`
	InjectedAt time.Time         `json:"injected_at"`
	// Expires is when the injection must be recovered even if its run is
	// still alive (the time-to-live a watchdog enforces).
	Expires time.Time `json:"expires"`
}

// Ledger is a durable record of injections.
//
// Record must be durable when it returns: the caller acts only after it.
// Done marks a key recovered; marking an unknown or already-done key is not
// an error. Pending returns the recorded keys not yet done, in record order.
// Implementations are safe for concurrent use.
type Ledger interface {
	Record(ctx context.Context, e Entry) error
	Done(ctx context.Context, key string) error
	Pending(ctx context.Context) ([]Entry, error)
}

// Memory is a Ledger that lives in memory. The zero value is ready to use.
type Memory struct {
	mu      sync.Mutex
	entries []Entry
}

// Record keeps e until Done.
func (m *Memory) Record(_ context.Context, e Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.ContainsFunc(m.entries, func(x Entry) bool { return x.Key == e.Key }) {
		m.entries = append(m.entries, e)
	}
	return nil
}

// Done forgets key.
func (m *Memory) Done(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries = slices.DeleteFunc(m.entries, func(x Entry) bool { return x.Key == key })
	return nil
}

// Pending returns the entries not yet done.
func (m *Memory) Pending(context.Context) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.entries), nil
}

// File is a Ledger journalled to one file: each Record and Done appends a
// JSON line and syncs it. Open replays the journal.
type File struct {
	mu   sync.Mutex
	path string
	f    *os.File
	mem  Memory
}

type op struct {
	Op    string `json:"op"` // "record" or "done"
	Entry *Entry `json:"entry,omitempty"`
	Key   string `json:"key,omitempty"`
}

// Open opens or creates the journal at path and replays it. A torn last line
// (a crash mid-append) is ignored and cut off, so that the next append
// starts a line of its own.
func Open(path string) (*File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	l := &File{path: path}
	whole, err := l.replay()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	// The torn line's Record never returned, so nobody acted on it;
	// appending after it would glue the next line to it and make the
	// journal unreadable.
	if err := f.Truncate(whole); err != nil {
		f.Close()
		return nil, fmt.Errorf("open ledger: cut torn line: %w", err)
	}
	l.f = f
	return l, nil
}

// StateDir is where mechanisms record what they did to the node: beside
// the ledger at ledgerPath that says it was done, so one directory holds a
// node's recovery.
func StateDir(ledgerPath string) string { return filepath.Join(filepath.Dir(ledgerPath), "state") }

// replay reads the journal into memory and returns the length of its
// complete lines.
func (l *File) replay() (int64, error) {
	f, err := os.Open(l.path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("open ledger: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var whole int64
	for n := 1; ; n++ {
		line, err := readLine(r)
		if errors.Is(err, errLongLine) {
			return 0, fmt.Errorf("ledger %s: line %d is longer than %d KiB; an entry is under 1 KiB, so the file is not a ledger or is damaged", l.path, n, maxLine>>10)
		}
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var o op
			if jerr := json.Unmarshal(line, &o); jerr != nil {
				return 0, fmt.Errorf("ledger %s: line %d: %w", l.path, n, jerr)
			}
			whole += int64(len(line))
			switch {
			case o.Op == "record" && o.Entry != nil:
				_ = l.mem.Record(context.Background(), *o.Entry)
			case o.Op == "done":
				_ = l.mem.Done(context.Background(), o.Key)
			}
		}
		if errors.Is(err, io.EOF) {
			return whole, nil // possibly after a torn line
		}
		if err != nil {
			return 0, fmt.Errorf("read ledger %s: line %d: %w", l.path, n, err)
		}
	}
}

// maxLine bounds one journal line. An entry is a few hundred bytes; a
// line past this is damage, and buffering it would let a corrupt file
// fill memory before the next start could recover anything.
const maxLine = 1 << 20

var errLongLine = errors.New("line too long")

// readLine reads up to and including the next newline, or what is left at
// EOF, failing with errLongLine past maxLine bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > maxLine {
			return nil, errLongLine
		}
		line = append(line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func (l *File) append(o op) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write ledger %s: %w", l.path, err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync ledger %s: %w", l.path, err)
	}
	return nil
}

// Record journals e durably.
func (l *File) Record(ctx context.Context, e Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.append(op{Op: "record", Entry: &e}); err != nil {
		return err
	}
	return l.mem.Record(ctx, e)
}

// Done journals that key was recovered.
func (l *File) Done(ctx context.Context, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.append(op{Op: "done", Key: key}); err != nil {
		return err
	}
	return l.mem.Done(ctx, key)
}

// Pending returns the entries recorded and not done.
func (l *File) Pending(ctx context.Context) ([]Entry, error) { return l.mem.Pending(ctx) }

// Close closes the journal file.
func (l *File) Close() error { return l.f.Close() }
