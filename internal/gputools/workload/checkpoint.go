package workload

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/model/limitread"
)

// ManifestFormat is the format string every manifest carries; a manifest
// with another one is rejected, so a later incompatible layout cannot be
// misread.
const ManifestFormat = "gpuchaos-ckpt/1"

// maxManifestBytes bounds what ReadManifest reads: a manifest is a few
// hundred bytes, and a corrupted or hostile one must not exhaust memory.
const maxManifestBytes = 64 << 10

// Manifest is the sidecar ckpt-<step>.json written after the data file
// ckpt-<step>.pt is complete. It is what makes the data file trustworthy.
type Manifest struct {
	// Format is ManifestFormat.
	Format string `json:"format"`
	// Step is the training step the checkpoint holds (steps completed).
	Step int64 `json:"step"`
	// File is the data file's name, ckpt-<step>.pt.
	File string `json:"file"`
	// Size is the data file's length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the lower-case hex SHA-256 of the data file's bytes.
	SHA256 string `json:"sha256"`
	// Time is when the data file was complete, in Unix seconds.
	Time float64 `json:"time"`
	// WorldSize is the number of ranks of the run that wrote it.
	WorldSize int `json:"world_size"`
	// Mode is "sync" or "async", how it was written.
	Mode string `json:"mode"`
}

// ErrInvalid is wrapped by every error that says a checkpoint is not
// usable (as opposed to an error reading the directory).
var ErrInvalid = errors.New("invalid checkpoint")

// DataName is the data file's name for step: ckpt-<step>.pt.
func DataName(step int64) string { return "ckpt-" + strconv.FormatInt(step, 10) + ".pt" }

// ManifestName is the manifest's name for step: ckpt-<step>.json.
func ManifestName(step int64) string { return "ckpt-" + strconv.FormatInt(step, 10) + ".json" }

// ParseName reads a checkpoint directory entry's name. kind is "data" for
// ckpt-<step>.pt, "manifest" for ckpt-<step>.json and "temp" for either
// with .tmp appended (an unfinished write); ok is false for anything else.
// The step is canonical decimal (no sign, no leading zeros), as the writer
// names files, so one step has exactly one name.
func ParseName(name string) (step int64, kind string, ok bool) {
	rest, found := strings.CutPrefix(name, "ckpt-")
	if !found {
		return 0, "", false
	}
	temp := false
	if r, cut := strings.CutSuffix(rest, ".tmp"); cut {
		rest, temp = r, true
	}
	var num string
	switch {
	case strings.HasSuffix(rest, ".pt"):
		num, kind = strings.TrimSuffix(rest, ".pt"), "data"
	case strings.HasSuffix(rest, ".json"):
		num, kind = strings.TrimSuffix(rest, ".json"), "manifest"
	default:
		return 0, "", false
	}
	if num == "" || (len(num) > 1 && num[0] == '0') || strings.TrimLeft(num, "0123456789") != "" {
		return 0, "", false
	}
	step, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, "", false
	}
	if temp {
		kind = "temp"
	}
	return step, kind, true
}

// ParseManifest decodes and checks a manifest: the format, a non-negative
// step, the file name that step gives, a non-negative size and a 64-digit
// lower-case hex SHA-256. Unknown fields are allowed, so later writers can
// add to it.
func ParseManifest(b []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest is not JSON: %w", ErrInvalid, err)
	}
	switch {
	case m.Format != ManifestFormat:
		return Manifest{}, fmt.Errorf("%w: manifest format %q, want %q", ErrInvalid, m.Format, ManifestFormat)
	case m.Step < 0:
		return Manifest{}, fmt.Errorf("%w: manifest step %d is negative", ErrInvalid, m.Step)
	case m.File != DataName(m.Step):
		return Manifest{}, fmt.Errorf("%w: manifest of step %d names file %q", ErrInvalid, m.Step, m.File)
	case m.Size < 0:
		return Manifest{}, fmt.Errorf("%w: manifest size %d is negative", ErrInvalid, m.Size)
	case !isHexSHA256(m.SHA256):
		return Manifest{}, fmt.Errorf("%w: manifest sha256 %q is not 64 lower-case hex digits", ErrInvalid, m.SHA256)
	}
	return m, nil
}

func isHexSHA256(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Checkpoint is one step's checkpoint in a directory, with the verdict of
// Verify.
type Checkpoint struct {
	// Step is the training step it holds.
	Step int64
	// Path is the data file's path.
	Path string
	// Manifest is the parsed manifest, when it could be read.
	Manifest Manifest
	// Err is nil for a checkpoint that verifies, and otherwise says why
	// it is rejected (wrapping ErrInvalid when the files are at fault).
	Err error
}

// Valid reports whether the checkpoint verified.
func (c Checkpoint) Valid() bool { return c.Err == nil }

// Verify checks the checkpoint of step in dir the way the training script
// does before resuming from it, and one step further: the manifest must
// parse and name step, the data file's size and SHA-256 must match it, and
// the data file must be a zip archive holding a pickle (torch.save's
// format), so a file replaced whole, manifest and all, by something that
// is not a checkpoint is caught too.
func Verify(dir string, step int64) (Manifest, error) {
	mb, err := readLimited(filepath.Join(dir, ManifestName(step)), maxManifestBytes)
	if errors.Is(err, os.ErrNotExist) {
		return Manifest{}, fmt.Errorf("%w: no manifest %s: the write did not complete", ErrInvalid, ManifestName(step))
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("verify step %d: %w", step, err)
	}
	m, err := ParseManifest(mb)
	if err != nil {
		return Manifest{}, err
	}
	if m.Step != step {
		return m, fmt.Errorf("%w: manifest %s names step %d", ErrInvalid, ManifestName(step), m.Step)
	}
	f, err := os.Open(filepath.Join(dir, DataName(step)))
	if errors.Is(err, os.ErrNotExist) {
		return m, fmt.Errorf("%w: data file %s is missing", ErrInvalid, DataName(step))
	}
	if err != nil {
		return m, fmt.Errorf("verify step %d: %w", step, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return m, fmt.Errorf("verify step %d: read %s: %w", step, DataName(step), err)
	}
	if n != m.Size {
		return m, fmt.Errorf("%w: %s is %d bytes, manifest says %d (torn or truncated)", ErrInvalid, DataName(step), n, m.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != m.SHA256 {
		return m, fmt.Errorf("%w: %s has sha256 %s, manifest says %s (corrupted)", ErrInvalid, DataName(step), sum, m.SHA256)
	}
	if err := checkTorchZip(f, n); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrInvalid, DataName(step), err)
	}
	return m, nil
}

// checkTorchZip checks that r is a zip archive with a data.pkl member, as
// torch.save (the zip format, PyTorch 1.6 and later) writes.
func checkTorchZip(r io.ReaderAt, size int64) error {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return fmt.Errorf("not a torch.save zip archive: %w", err)
	}
	for _, f := range zr.File {
		if f.Name == "data.pkl" || strings.HasSuffix(f.Name, "/data.pkl") {
			return nil
		}
	}
	return errors.New("zip archive without data.pkl: not written by torch.save")
}

func readLimited(path string, limit int64) ([]byte, error) {
	b, err := limitread.File(path, limit)
	if tl := (*limitread.TooLargeError)(nil); errors.As(err, &tl) {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalid, filepath.Base(path), limit)
	}
	return b, err
}

// Scan verifies every checkpoint in dir, newest first. A step counts as
// present when its data file is; leftover temporary files are listed in
// temps, by name, for the caller to report. A missing directory holds no
// checkpoints.
func Scan(dir string) (cps []Checkpoint, temps []string, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("scan checkpoints: %w", err)
	}
	var steps []int64
	for _, e := range entries {
		step, kind, ok := ParseName(e.Name())
		switch {
		case !ok:
		case kind == "data":
			steps = append(steps, step)
		case kind == "temp":
			temps = append(temps, e.Name())
		}
	}
	slices.Sort(steps)
	slices.Reverse(steps)
	for _, s := range steps {
		m, verr := Verify(dir, s)
		cps = append(cps, Checkpoint{Step: s, Path: filepath.Join(dir, DataName(s)), Manifest: m, Err: verr})
	}
	return cps, temps, nil
}

// Newest returns the newest checkpoint in dir that verifies, which is the
// one the training script resumes from; ok is false when there is none
// (a fresh start).
func Newest(dir string) (cp Checkpoint, ok bool, err error) {
	cps, _, err := Scan(dir)
	if err != nil {
		return Checkpoint{}, false, err
	}
	for _, c := range cps {
		if c.Valid() {
			return c, true, nil
		}
	}
	return Checkpoint{}, false, nil
}
