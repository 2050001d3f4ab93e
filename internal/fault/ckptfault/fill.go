package ckptfault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
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
		if rerr := removeFiller(st.File); rerr != nil {
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

// removeFiller deletes the filler; one already gone is fine.
func removeFiller(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the filler: %w", err)
	}
	return nil
}
