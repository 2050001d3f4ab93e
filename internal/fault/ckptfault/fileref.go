package ckptfault

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// fileRef names the file an injection changed beyond its path, which a
// job may rename, replace or delete: the device and inode it had, and the
// kernel's handle for the inode (name_to_handle_at). The handle opens the
// inode wherever it lives now (renamed, moved within the filesystem,
// deleted but held open), and fails with ESTALE once the inode no longer
// exists, which is the proof that what was changed in it is gone.
type fileRef struct {
	Dev   uint64 `json:"dev"`
	Inode uint64 `json:"inode"`
	// HandleType and Handle are the file handle; empty when the
	// filesystem gives none (it does not export handles), so the file
	// can only be looked for by name.
	HandleType int32  `json:"handle_type,omitempty"`
	Handle     []byte `json:"handle,omitempty"`
}

// refOf returns the reference of an open file. A filesystem without file
// handles gives one without, which a recovery can follow only within
// the directory.
func refOf(f *os.File) (*fileRef, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	r := &fileRef{Dev: st.Dev, Inode: st.Ino}
	h, _, err := unix.NameToHandleAt(int(f.Fd()), "", unix.AT_EMPTY_PATH)
	if err == nil {
		r.HandleType, r.Handle = h.Type(), h.Bytes()
	}
	return r, nil
}

func (r *fileRef) String() string {
	return fmt.Sprintf("inode %d on device %d:%d", r.Inode, unix.Major(r.Dev), unix.Minor(r.Dev))
}

// errFreed marks a file whose inode no longer exists.
var errFreed = errors.New("inode freed")

// openRef opens the file r names with flags (O_NOFOLLOW added): through
// path when path still names it, else through the handle wherever it is
// now, else, without a handle, by looking for the inode among dir's
// entries. The file's path comes back with it (the kernel's, for a file
// found by handle; " (deleted)" ends it for an unlinked file). An inode
// that no longer exists is an error wrapping errFreed whose text says how
// that is known; a file that may live on where it cannot look wraps
// fault.ErrUnproven. ctx bounds the wait for an answer from the handle
// (openByHandle).
func openRef(ctx context.Context, r *fileRef, path, dir string, flags int) (*os.File, string, error) {
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	f, err := os.OpenFile(path, flags, 0)
	var at string
	switch {
	case err == nil:
		if same(f, r) {
			return f, path, nil
		}
		var st unix.Stat_t
		_ = unix.Fstat(int(f.Fd()), &st)
		f.Close()
		at = fmt.Sprintf("%s is now inode %d", path, st.Ino)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ELOOP):
		at = fmt.Sprintf("%s: %s", path, procfind.Reason(err))
	default:
		return nil, "", fmt.Errorf("open %s: %w", path, err)
	}
	if len(r.Handle) == 0 {
		return findInDir(r, dir, flags, at)
	}
	mnt, err := mountFD(r, dir)
	if err != nil {
		return nil, "", fmt.Errorf("%s, and %s cannot be opened by its handle: %w: %w", at, r, fault.ErrUnproven, err)
	}
	defer unix.Close(mnt)
	fd, err := openByHandle(ctx, mnt, unix.NewFileHandle(r.HandleType, r.Handle), flags)
	if errors.Is(err, unix.ESTALE) {
		return nil, "", fmt.Errorf("%s, and %s no longer exists (open_by_handle_at: stale file handle): %w", at, r, errFreed)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s, and %s cannot be opened by its handle: %w: %w", at, r, fault.ErrUnproven, err)
	}
	f = os.NewFile(uintptr(fd), path)
	if !same(f, r) {
		f.Close()
		return nil, "", fmt.Errorf("%s, and its handle opens another inode: %w", at, fault.ErrUnproven)
	}
	now, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		now = "an unknown path"
	}
	return f, now, nil
}

// Tries and pauses of openByHandle while the kernel answers ENOMEM: the
// pauses double from the first to the last and add up to 0.83 s, two
// hundred times the longest run of ENOMEM measured while one inode number
// was being reused on a loaded machine (4 ms).
const (
	handleTries      = 15
	handleFirstPause = time.Millisecond
	handleLastPause  = 100 * time.Millisecond
)

// openByHandle is open_by_handle_at(2), asked again while it fails with
// ENOMEM. For a freed inode ENOMEM is mostly no shortage: ext4 gives a
// freed inode's number to the next file it creates, and while that file
// is being created (I_CREATING) the inode cache's iget_locked returns
// nothing, which ext4's iget reports as ENOMEM and the handle decoder
// passes on where it would say ESTALE. Once the creation ends the new
// inode's generation differs from the handle's and the answer is ESTALE,
// the proof that the inode is gone. ENOMEM itself proves nothing (a real
// shortage says the same), so it comes back when it persists past the
// tries or ctx ends. Which directory mnt opens does not matter here: with
// CAP_DAC_READ_SEARCH it names only the filesystem.
func openByHandle(ctx context.Context, mnt int, h unix.FileHandle, flags int) (int, error) {
	pause := handleFirstPause
	for try := 1; ; try++ {
		fd, err := unix.OpenByHandleAt(mnt, h, flags)
		if !errors.Is(err, unix.ENOMEM) {
			return fd, err
		}
		if try == handleTries {
			return -1, fmt.Errorf("open_by_handle_at, %d times: %w", try, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return -1, fmt.Errorf("open_by_handle_at, %d times before %w: %w", try, context.Cause(ctx), err)
		case <-t.C:
		}
		pause = min(2*pause, handleLastPause)
	}
}

// findInDir looks for r's inode among dir's entries: where a filesystem
// gives no handles, a file renamed within its directory is still found,
// and anything else cannot be told from a file that is gone.
func findInDir(r *fileRef, dir string, flags int, at string) (*os.File, string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("%s; list %s: %w", at, dir, err)
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Ino == r.Inode && st.Dev == r.Dev {
			p := filepath.Join(dir, e.Name())
			f, err := os.OpenFile(p, flags, 0)
			if err == nil && same(f, r) {
				return f, p, nil
			}
			if f != nil {
				f.Close()
			}
		}
	}
	return nil, "", fmt.Errorf("%s, and no entry of %s is %s; the filesystem gives no file handle to look further: %w", at, dir, r, fault.ErrUnproven)
}

// mountFD opens a directory of r's filesystem for open_by_handle_at: dir
// or its nearest ancestor on r's device (dir itself may be gone). None
// means the filesystem is no longer mounted there.
func mountFD(r *fileRef, dir string) (int, error) {
	for d := dir; ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err == nil && st.Dev == r.Dev {
			return unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
		if d == "/" || d == "." {
			return -1, fmt.Errorf("device %d:%d is mounted at neither %s nor a directory above it", unix.Major(r.Dev), unix.Minor(r.Dev), dir)
		}
	}
}

// same reports whether f is r's inode.
func same(f *os.File, r *fileRef) bool {
	var st unix.Stat_t
	return unix.Fstat(int(f.Fd()), &st) == nil && st.Dev == r.Dev && st.Ino == r.Inode
}
