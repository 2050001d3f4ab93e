package ckptfault

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
)

// checkpointName matches a complete checkpoint: ckpt-STEP.pt, never the
// .tmp it is written as.
var checkpointName = regexp.MustCompile(`^ckpt-([0-9]{1,19})\.pt$`)

// newestCheckpoint returns the checkpoint with the highest step in dir.
// The step, not the modification time, says which is newest: a copy or
// a restore can touch an old file.
func newestCheckpoint(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("list checkpoints: %w", err)
	}
	best, bestStep := "", int64(-1)
	for _, e := range ents {
		m := checkpointName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		step, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			continue
		}
		if step > bestStep {
			best, bestStep = e.Name(), step
		}
	}
	if best == "" {
		return "", fmt.Errorf("no checkpoint (ckpt-STEP.pt) in %s", dir)
	}
	return filepath.Join(dir, best), nil
}

// pickOffsets chooses n distinct offsets in [0, size) with a generator
// seeded from seed, sorted; all of them when n ≥ size.
func pickOffsets(seed uint64, n, size int64) []int64 {
	if n >= size {
		out := make([]int64, size)
		for i := range out {
			out[i] = int64(i)
		}
		return out
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc909))
	seen := make(map[int64]bool, n)
	out := make([]int64, 0, n)
	for int64(len(out)) < n {
		o := rng.Int64N(size)
		if !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// corrupt inverts bytes of the newest checkpoint, recording them first.
func (in *Injector) corrupt(ctx context.Context, key string, st state, v catalog.Values) (err error) {
	n := v.Int("bytes")
	if n < 1 {
		return fmt.Errorf("bytes %d is not positive", n)
	}
	if st.File, err = newestCheckpoint(st.Dir); err != nil {
		return err
	}
	f, err := os.OpenFile(st.File, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open the checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat the checkpoint: %w", err)
	}
	st.Size, st.Inode = fi.Size(), fi.Sys().(*syscall.Stat_t).Ino
	if st.Size == 0 {
		return fmt.Errorf("checkpoint %s is empty", st.File)
	}
	seed := uint64(v.Int("seed"))
	if seed == 0 {
		h := fnv.New64a()
		h.Write([]byte(key))
		seed = h.Sum64()
	}
	st.Offsets = pickOffsets(seed, n, st.Size)
	st.Original = make([]byte, len(st.Offsets))
	one := make([]byte, 1)
	for i, o := range st.Offsets {
		if _, err := f.ReadAt(one, o); err != nil {
			return fmt.Errorf("read the checkpoint at %d: %w", o, err)
		}
		st.Original[i] = one[0]
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("corrupting %s: %w", st.File, err)
	}
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record before acting: %w", err)
	}
	for i, o := range st.Offsets {
		one[0] = ^st.Original[i]
		if _, err := f.WriteAt(one, o); err != nil {
			werr := fmt.Errorf("flip the byte at %d: %w", o, err)
			if _, rerr := restore(st); rerr != nil {
				return fmt.Errorf("%w (left for recovery: %w)", werr, rerr)
			}
			if rerr := in.dir.Remove(key); rerr != nil {
				return fmt.Errorf("%w (record not removed: %w)", werr, rerr)
			}
			return werr
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync the checkpoint: %w", err)
	}
	in.log.Info("corrupted checkpoint", "key", key, "file", st.File, "bytes", len(st.Offsets))
	return nil
}

// restore writes the recorded bytes back. It first checks that the file
// is the one corrupted (same inode and size) and that every recorded byte
// is either the original or its inverse; otherwise the file was replaced
// or rewritten since, and restoring would damage the new content, so it
// reports gone and touches nothing.
func restore(st state) (gone bool, err error) {
	f, err := os.OpenFile(st.File, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("open the checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat the checkpoint: %w", err)
	}
	if fi.Size() != st.Size || fi.Sys().(*syscall.Stat_t).Ino != st.Inode {
		return true, nil
	}
	cur := make([]byte, len(st.Offsets))
	one := make([]byte, 1)
	for i, o := range st.Offsets {
		if _, err := f.ReadAt(one, o); err != nil {
			return false, fmt.Errorf("read the checkpoint at %d: %w", o, err)
		}
		if one[0] != st.Original[i] && one[0] != ^st.Original[i] {
			return true, nil
		}
		cur[i] = one[0]
	}
	for i, o := range st.Offsets {
		if cur[i] == st.Original[i] {
			continue
		}
		one[0] = st.Original[i]
		if _, err := f.WriteAt(one, o); err != nil {
			return false, fmt.Errorf("restore the byte at %d: %w", o, err)
		}
	}
	if err := f.Sync(); err != nil {
		return false, fmt.Errorf("sync the checkpoint: %w", err)
	}
	return false, nil
}
