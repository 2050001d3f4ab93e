package ckptfault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// fillerPrefix starts the filler's name; the rest is the key's record
// name, so a filler is found from the key alone.
const fillerPrefix = ".gpuchaos-fill-"

// fillSlack is how many blocks above the target free space fill stops at:
// extent metadata for the filler takes a few blocks of its own, which the
// last allocation cannot predict.
const fillSlack = 8

// freeBytes is the space left to a root writer (statfs' f_bfree): a
// checkpoint writer running as root, as most do in containers, can use
// the blocks the filesystem reserves for root, so counting only f_bavail
// would leave it room.
func freeBytes(dir string) (free, block int64, err error) {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(s.Bfree) * s.Bsize, s.Bsize, nil
}

// fill allocates the filler so that about free bytes stay free.
//
// The filler is made nameless (O_TMPFILE), recorded by its reference,
// filled, and only then linked under its name: a crash before the record
// leaves nothing (the kernel frees a nameless inode with its last holder),
// and every record names the inode that may hold space. Where the
// filesystem has no O_TMPFILE the filler is created by name after a
// record without a reference, and a crash between the two records leaves
// an empty filler that only its name finds.
func (in *Injector) fill(ctx context.Context, key string, st state, v catalog.Values) (err error) {
	st.Free = v.Int("free")
	if st.Free < 0 {
		return fmt.Errorf("free %d bytes is negative", st.Free)
	}
	st.File = filepath.Join(st.Dir, fillerPrefix+in.dir.Name(key))
	recorded := false
	defer func() {
		if err == nil || !recorded {
			return
		}
		// Undoing what was done goes on when the injection is cancelled.
		if _, rerr := removeFiller(context.WithoutCancel(ctx), st); rerr != nil {
			err = fmt.Errorf("%w (left for recovery: %w)", err, rerr)
			return
		}
		if rerr := in.dir.Remove(key); rerr != nil {
			err = fmt.Errorf("%w (record not removed: %w)", err, rerr)
		}
	}()
	f, err := os.OpenFile(st.at(st.Dir), os.O_WRONLY|unix.O_TMPFILE, 0o600)
	named := errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL)
	if named {
		if err := in.dir.Write(key, st); err != nil {
			return fmt.Errorf("record before acting: %w", err)
		}
		recorded = true
		// O_NOFOLLOW and O_EXCL: the filler is a new regular file in the
		// directory itself, never something a symlink planted there names.
		f, err = os.OpenFile(st.at(st.File), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	}
	if err != nil {
		return fmt.Errorf("create the filler: %w", err)
	}
	defer f.Close()
	if st.Ref, err = refOf(f); err != nil {
		return err
	}
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record the filler before it takes space: %w", err)
	}
	recorded = true
	if err := in.allocate(ctx, key, st, f); err != nil {
		return err
	}
	if named {
		return nil
	}
	// linkat refuses a name that exists, a symlink planted there included,
	// as O_EXCL would.
	if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.AT_FDCWD, st.at(st.File), unix.AT_SYMLINK_FOLLOW); err != nil {
		return fmt.Errorf("name the filler %s: %w", st.File, err)
	}
	return nil
}

// allocate grows the filler f until about st.Free bytes stay free.
func (in *Injector) allocate(ctx context.Context, key string, st state, f *os.File) error {
	var size int64
	for attempt := 0; attempt < 64; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("filling %s: %w", st.Dir, err)
		}
		avail, block, err := freeBytes(st.at(st.Dir))
		if err != nil {
			return err
		}
		excess := avail - st.Free
		if excess <= fillSlack*block {
			in.log.Info("filled volume", "key", key, "dir", st.Dir, "filler", st.File, "size", size, "free", avail)
			return nil
		}
		// Ask for all but the slack; on ENOSPC (metadata, other writers)
		// ask for half as much and look again.
		want := excess - fillSlack*block/2
		for want >= block {
			err = unix.Fallocate(int(f.Fd()), 0, size, want)
			if err == nil {
				size += want
				break
			}
			if !errors.Is(err, unix.ENOSPC) {
				return fmt.Errorf("fallocate %d bytes in %s: %w", want, st.Dir, err)
			}
			want /= 2
		}
		if want < block {
			return fmt.Errorf("fill %s: the filesystem refuses even one more block with %d bytes free", st.Dir, avail)
		}
	}
	return fmt.Errorf("fill %s: free space did not settle near %d bytes", st.Dir, st.Free)
}

// removeFiller deletes the filler, wherever it lives now (openRef: at
// its path, renamed, moved, deleted but held open, never named): emptied
// first, so its space is free whatever becomes of its name, then
// unlinked. It returns a proof instead when the filler is gone without
// it: its inode freed. A record without a reference was written before
// a named filler (no O_TMPFILE) was created: the file at its path, if
// any, is removed, and none there cannot tell an injection stopped before
// it created the filler from an empty filler moved since.
func removeFiller(ctx context.Context, st state) (proof string, err error) {
	if st.Ref == nil && st.handleOnly {
		return "", fmt.Errorf("the pod is gone and the record names no filler inode to look for on the volume: an empty %s* file may be left in %s: %w", fillerPrefix, st.Dir, fault.ErrUnproven)
	}
	if st.Ref == nil {
		err := os.Remove(st.at(st.File))
		switch {
		case err == nil:
			return "", nil
		case !errors.Is(err, os.ErrNotExist):
			return "", fmt.Errorf("remove the filler: %w", err)
		}
		if st.Version < 2 {
			return "", fmt.Errorf("no filler at %s, and a version 1 record names no inode to look for it elsewhere: the filler, and the space it takes, may be left: %w", st.File, fault.ErrUnproven)
		}
		return "", fmt.Errorf("no filler at %s, and the injection stopped before it recorded the filler's inode: an empty %s* file may be left elsewhere: %w",
			st.File, fillerPrefix, fault.ErrUnproven)
	}
	f, where, err := openRef(ctx, st.Ref, st.at(st.File), st.at(st.Dir), os.O_WRONLY)
	if errors.Is(err, errFreed) {
		return "the filler " + err.Error(), nil
	}
	if err != nil {
		return "", fmt.Errorf("find the filler: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		return "", fmt.Errorf("empty the filler %s: %w", where, err)
	}
	if strings.HasSuffix(where, " (deleted)") {
		return "", nil // unlinked, and empty now: gone once its holder closes it
	}
	if st.access != "" && !strings.HasPrefix(where, st.access+"/") {
		// Found by its handle in a pod's volume: the kernel prints its
		// name from a mount namespace this process does not share, so
		// the name cannot be told from one of the node's. The filler is
		// empty, so the space it took is free, which is the fault
		// undone; its empty name may stay.
		return "", nil
	}
	var st2 unix.Stat_t
	if err := unix.Lstat(where, &st2); err != nil || st2.Dev != st.Ref.Dev || st2.Ino != st.Ref.Inode {
		return "", fmt.Errorf("emptied the filler, but cannot tell its name to remove it (the kernel says %q)", where)
	}
	if err := os.Remove(where); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("remove the filler %s: %w", where, err)
	}
	return "", nil
}
