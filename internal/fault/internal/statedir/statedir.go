package statedir

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gpuchaos/gpuchaos/internal/model/limitread"
)

// MaxRecord bounds what Read loads unless WithMaxRecord says otherwise: a
// record describes one injection, so anything larger is not one of ours.
const MaxRecord = 16 << 20

// Dir is a directory of records, all of one injector family. It is safe
// for concurrent use.
type Dir struct {
	path   string
	prefix string
	// name turns a key into the part of its file name after prefix.
	name func(key string) string
	// max bounds what Read loads.
	max int

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// Option changes one default of Open.
type Option func(*Dir)

// WithNames names key's files prefix+name(key) instead of prefix and a
// hash. It exists for injectors whose records predate this package: a
// node upgraded with records on disk must find them under the names the
// previous version wrote. name must give distinct keys distinct results,
// each a valid file name without path separators.
func WithNames(name func(key string) string) Option {
	return func(d *Dir) { d.name = name }
}

// WithMaxRecord makes Read refuse records over n bytes instead of
// MaxRecord, for a family whose records are known to be smaller.
func WithMaxRecord(n int) Option {
	return func(d *Dir) { d.max = n }
}

// Open returns the records under path whose file names start with prefix,
// creating path (mode 0700) when missing. Every injector of one family on
// a node must use the same path, prefix and options, so that one process
// recovers what another injected.
func Open(path, prefix string, opts ...Option) (*Dir, error) {
	if path == "" {
		return nil, errors.New("state directory: empty path")
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	d := &Dir{path: path, prefix: prefix, name: hashName, max: MaxRecord, locks: map[string]*sync.Mutex{}}
	for _, o := range opts {
		o(d)
	}
	return d, nil
}

// Path is the directory the records are in, for files an injector keeps
// beside them (a child's log, say).
func (d *Dir) Path() string { return d.path }

// Name returns the stem of key's files: the prefix and, by default, a
// hash of the key, fixed length and free of path separators whatever the
// key holds.
func (d *Dir) Name(key string) string { return d.prefix + d.name(key) }

func hashName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:12])
}

// maxEscaped bounds Escaped's results, leaving room under the 255 bytes
// of a file name for ".json", ".log" and a temporary file's suffix.
const maxEscaped = 200

// Escaped is a naming for WithNames that keeps the key readable: ASCII
// letters, digits, '-', '_' and '.' stay, every other byte becomes %XX,
// so distinct keys never share a name and none holds a path separator. A
// result over 200 bytes keeps a readable start and ends in '~' and a hash
// of the whole key. With escapeLeadingDot a '.' that starts the key is
// written %2E too, so that no name is hidden or "." or "..".
func Escaped(key string, escapeLeadingDot bool) string {
	var b strings.Builder
	for i := range len(key) {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		case c == '.' && (i > 0 || !escapeLeadingDot):
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	s := b.String()
	if len(s) > maxEscaped {
		sum := sha256.Sum256([]byte(key))
		s = s[:maxEscaped-33] + "~" + hex.EncodeToString(sum[:16])
	}
	return s
}

// File is the path of key's record.
func (d *Dir) File(key string) string { return filepath.Join(d.path, d.Name(key)+".json") }

// Mark names key's record for the processes an injector starts for it
// (childproc.Spec.Mark): the record's absolute path, the same in every
// process that shares the directory, so a recovery in a fresh process
// finds the children of key that no record names.
func (d *Dir) Mark(key string) string {
	f := d.File(key)
	if abs, err := filepath.Abs(f); err == nil {
		return abs
	}
	return f
}

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
	b, err := limitread.File(d.File(key), int64(d.max))
	if tl := (*limitread.TooLargeError)(nil); errors.As(err, &tl) {
		return nil, fmt.Errorf("read state %s: over %d bytes", d.File(key), d.max)
	}
	return b, err
}

// Inject runs apply for key under key's lock, unless key already has a
// record. Injectors record an injection before they act, so a record
// means the key was injected (or a crash cut the injection short, which
// Recover undoes) and applying again would stack the fault. An empty key,
// or a ctx that is done, is refused before anything.
func (d *Dir) Inject(ctx context.Context, key string, apply func() error) error {
	if key == "" {
		return errors.New("empty key")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	unlock := d.Lock(key)
	defer unlock()
	switch ok, err := d.Exists(key); {
	case err != nil:
		return err
	case ok:
		return nil
	}
	return apply()
}

// Recover undoes key's injection under key's lock and then removes its
// record: undo gets the record as parse decodes and checks it. No record
// is success and calls nothing. When undo fails the record stays, so that
// a later call retries; its error is returned as it is.
func Recover[T any](d *Dir, key string, parse func([]byte) (T, error), undo func(T) error) error {
	if key == "" {
		return errors.New("empty key")
	}
	unlock := d.Lock(key)
	defer unlock()
	rec, err := Load(d, key, parse)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := undo(rec); err != nil {
		return err
	}
	return d.Remove(key)
}

// Decode decodes one JSON record into v strictly: an unknown field or
// anything after the object is an error, so a record of another layout is
// refused rather than half read.
func Decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("decode: data after the record")
	}
	return nil
}

// OpenFor opens the directory where package pkg's injector of faultID
// records its injections (Open with the prefix "pkg-"), and refuses an
// empty path: an injector that could not record what it did must not act,
// since nothing would recover it after a crash.
func OpenFor(pkg, faultID, path string) (*Dir, error) {
	if path == "" {
		return nil, fmt.Errorf("%s: %s needs a state directory to recover after a crash", pkg, faultID)
	}
	d, err := Open(path, pkg+"-")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
	}
	return d, nil
}

// CheckHeader refuses a decoded record of another layout version than
// want, or one without its key: the checks every package's parser starts
// with before its own.
func CheckHeader(version, want int, key string) error {
	if version != want {
		return fmt.Errorf("version %d: this build reads version %d", version, want)
	}
	if key == "" {
		return errors.New("no key")
	}
	return nil
}

// Load reads key's record and decodes it with parse, which is where an
// injector checks everything its recovery relies on. A missing record is
// os.ErrNotExist; a record parse refuses is an error naming its file.
func Load[T any](d *Dir, key string, parse func([]byte) (T, error)) (T, error) {
	var zero T
	b, err := d.Read(key)
	if err != nil {
		return zero, err
	}
	rec, err := parse(b)
	if err != nil {
		return zero, fmt.Errorf("record %s: %w", d.File(key), err)
	}
	return rec, nil
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
