package ckptfault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/fault"
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
func (in *Injector) fill(ctx context.Context, key string, st state, v catalog.Values) (err error) {
	st.Free = v.Int("free")
	if st.Free < 0 {
		return fmt.Errorf("free %d bytes is negative", st.Free)
	}
	st.File = filepath.Join(st.Dir, fillerPrefix+in.dir.Name(key))
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record before acting: %w", err)
	}
	defer func() {
		if err == nil {
			return
		}
		if _, rerr := removeFiller(st); rerr != nil {
			err = fmt.Errorf("%w (left for recovery: %w)", err, rerr)
			return
		}
		if rerr := in.dir.Remove(key); rerr != nil {
			err = fmt.Errorf("%w (record not removed: %w)", err, rerr)
		}
	}()
	// O_NOFOLLOW and O_EXCL: the filler is a new regular file in the
	// directory itself, never something a symlink planted there names.
	f, err := os.OpenFile(st.File, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("create the filler: %w", err)
	}
	defer f.Close()
	// The reference is recorded before the first byte is allocated, so a
	// record without one proves the filler never took space.
	if st.Ref, err = refOf(f); err != nil {
		return err
	}
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record the filler: %w", err)
	}
	var size int64
	for attempt := 0; attempt < 64; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("filling %s: %w", st.Dir, err)
		}
		avail, block, err := freeBytes(st.Dir)
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
// its path, renamed, moved, deleted but held open): emptied first, so its
// space is free whatever becomes of its name, then unlinked. It returns a
// proof instead when the filler is gone without it: its inode freed. A
// record without a reference was written before the filler took any
// space: the file at its path, if any, is removed, and none is success.
func removeFiller(st state) (proof string, err error) {
	if st.Ref == nil {
		err := os.Remove(st.File)
		switch {
		case err == nil:
			return "", nil
		case !errors.Is(err, os.ErrNotExist):
			return "", fmt.Errorf("remove the filler: %w", err)
		case st.Version >= 2:
			return "", nil // the injection stopped before it created the filler
		}
		return "", fmt.Errorf("no filler at %s, and a version %d record names no inode to look for it elsewhere: %w", st.File, st.Version, fault.ErrUnproven)
	}
	f, where, err := openRef(st.Ref, st.File, st.Dir, os.O_WRONLY)
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
	var st2 unix.Stat_t
	if err := unix.Lstat(where, &st2); err != nil || st2.Dev != st.Ref.Dev || st2.Ino != st.Ref.Inode {
		return "", fmt.Errorf("emptied the filler, but cannot tell its name to remove it (the kernel says %q)", where)
	}
	if err := os.Remove(where); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("remove the filler %s: %w", where, err)
	}
	return "", nil
}
