package ckptfault

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// stateVersion is the layout of state; a reader refuses others but 1,
// the layout before file references (Ref), which it reads with what it
// lacks: a version 1 fill record without a filler at its path cannot tell
// whether the filler was moved, where a version 2 one proves it never took
// space (the reference is recorded before the first allocation).
const stateVersion = 2

// state is what Inject records for one key before it acts.
type state struct {
	Version int       `json:"version"`
	Key     string    `json:"key"`
	Fault   string    `json:"fault"`
	Dir     string    `json:"dir"`
	Created time.Time `json:"created"`

	// kill-writer: the process signalled and the file it was writing
	// (empty while still watching).
	Killed *procfind.Proc `json:"killed,omitempty"`
	File   string         `json:"file,omitempty"`
	Pos    int64          `json:"pos,omitempty"`
	Signal string         `json:"signal,omitempty"`

	// fill-volume: the filler (File) and the free bytes asked for.
	Free int64 `json:"free,omitempty"`

	// slow-storage: the device, the cap and the ranks confined.
	Device       string                `json:"device,omitempty"`
	BPS          int64                 `json:"bps,omitempty"`
	Confinements []*cgroup.Confinement `json:"confinements,omitempty"`

	// Ref is the filler (fill-volume) or the checkpoint (corrupt-newest)
	// beyond its path, so that recovery finds it renamed, moved or
	// deleted but held open, and proves it gone when its inode is freed.
	// Nil in a fill record written before the filler was created.
	Ref *fileRef `json:"ref,omitempty"`

	// corrupt-newest: the checkpoint (File), its inode and size, and
	// every inverted offset with the byte it held.
	Inode    uint64  `json:"inode,omitempty"`
	Size     int64   `json:"size,omitempty"`
	Offsets  []int64 `json:"offsets,omitempty"`
	Original []byte  `json:"original,omitempty"`

	// Pod is set when the directory is a pod's: Dir and File are then
	// paths in its containers, reached through one of its processes
	// (see podDir).
	Pod *podDir `json:"pod,omitempty"`
	// Limits are slow-storage's limits on a pod's own group, each with
	// the value it replaced (see podslow.go).
	Limits []podLimit `json:"limits,omitempty"`

	// access is where this process reaches a pod's Dir during one call
	// (/proc/self/fd/N); empty on a node, where Dir is reached as it is.
	access string
	// handleOnly says access is a mount of the filesystem, not Dir:
	// files are found by their handle there, never by name.
	handleOnly bool
}

// parseState decodes a record and checks what Recover relies on: files
// inside the directory, confinements of ours, offsets inside the file.
func parseState(b []byte) (state, error) {
	var st state
	if err := statedir.Decode(b, &st); err != nil {
		return state{}, err
	}
	want := stateVersion
	if st.Version == 1 {
		want = 1
	}
	if err := statedir.CheckHeader(st.Version, want, st.Key); err != nil {
		return state{}, err
	}
	if !filepath.IsAbs(st.Dir) || filepath.Clean(st.Dir) != st.Dir {
		return state{}, fmt.Errorf("directory %q is not a clean absolute path", st.Dir)
	}
	inDir := func(f string) error {
		if filepath.Dir(f) != st.Dir || filepath.Clean(f) != f {
			return fmt.Errorf("file %q is not directly in %s", f, st.Dir)
		}
		return nil
	}
	if st.Pod != nil && st.Pod.UID == "" {
		return state{}, errors.New("pod without a uid")
	}
	switch st.Fault {
	case idKillWriter:
		if st.Killed != nil && !st.Killed.Valid() {
			return state{}, fmt.Errorf("process %+v", *st.Killed)
		}
	case idFill:
		if err := inDir(st.File); err != nil {
			return state{}, err
		}
		if !strings.HasPrefix(filepath.Base(st.File), fillerPrefix) {
			return state{}, fmt.Errorf("file %q is not a filler of ours", st.File)
		}
		if st.Ref != nil && st.Ref.Inode == 0 {
			return state{}, errors.New("filler reference without an inode")
		}
	case idSlow:
		for _, c := range st.Confinements {
			if c == nil {
				return state{}, errors.New("empty confinement")
			}
			if err := c.Validate(); err != nil {
				return state{}, fmt.Errorf("confinement: %w", err)
			}
		}
		for _, l := range st.Limits {
			if err := l.validate(); err != nil {
				return state{}, fmt.Errorf("limit: %w", err)
			}
		}
	case idCorrupt:
		if err := inDir(st.File); err != nil {
			return state{}, err
		}
		if st.Ref != nil && st.Ref.Inode != st.Inode {
			return state{}, fmt.Errorf("reference to inode %d for a checkpoint of inode %d", st.Ref.Inode, st.Inode)
		}
		if len(st.Offsets) != len(st.Original) {
			return state{}, fmt.Errorf("%d offsets but %d original bytes", len(st.Offsets), len(st.Original))
		}
		seen := make(map[int64]bool, len(st.Offsets))
		for _, o := range st.Offsets {
			if o < 0 || o >= st.Size || seen[o] {
				return state{}, fmt.Errorf("offset %d outside a file of %d bytes, or repeated", o, st.Size)
			}
			seen[o] = true
		}
	default:
		return state{}, fmt.Errorf("fault %q is not this package's", st.Fault)
	}
	return st, nil
}
