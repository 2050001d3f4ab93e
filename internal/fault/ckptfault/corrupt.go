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

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
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
	newest, err := newestCheckpoint(st.at(st.Dir))
	if err != nil {
		return fmt.Errorf("%w (as seen in %s)", err, st.Dir)
	}
	st.File = filepath.Join(st.Dir, filepath.Base(newest))
	f, err := os.OpenFile(st.at(st.File), os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open the checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat the checkpoint: %w", err)
	}
	st.Size = fi.Size()
	if st.Ref, err = refOf(f); err != nil {
		return err
	}
	st.Inode = st.Ref.Inode
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
			// Undoing what was done goes on when the injection is cancelled.
			if _, rerr := restore(context.WithoutCancel(ctx), st); rerr != nil {
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

// restore writes the recorded bytes back into the checkpoint, wherever
// it lives now (openRef: at its path, renamed, moved, deleted but held
// open). It returns a proof instead when the corruption is gone without
// it: the inode freed, or every flipped byte overwritten since. A file
// rewritten since (another size, or bytes at the recorded offsets that
// are neither the original nor its inverse) that still holds flipped
// bytes is neither: restoring could damage the new content, leaving them
// may leave the corruption, so it touches nothing and fails with
// fault.ErrUnproven.
func restore(ctx context.Context, st state) (proof string, err error) {
	ref := st.Ref
	if ref == nil {
		// A version 1 record names the inode alone; the checkpoint was on
		// the directory's filesystem.
		var ds unix.Stat_t
		if err := unix.Stat(st.at(st.Dir), &ds); err != nil {
			return "", fmt.Errorf("find inode %d of %s: %w: %w", st.Inode, st.File, fault.ErrUnproven, err)
		}
		ref = &fileRef{Dev: ds.Dev, Inode: st.Inode}
	}
	f, where, err := openRef(ctx, ref, st.at(st.File), st.at(st.Dir), os.O_RDWR)
	if errors.Is(err, errFreed) {
		return err.Error(), nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("stat the checkpoint: %w", err)
	}
	size := fi.Size()
	var flipped, original, other, beyond int
	cur := make([]byte, len(st.Offsets))
	one := make([]byte, 1)
	for i, o := range st.Offsets {
		if o >= size {
			beyond++
			continue
		}
		if _, err := f.ReadAt(one, o); err != nil {
			return "", fmt.Errorf("read %s at %d: %w", where, o, err)
		}
		switch cur[i] = one[0]; cur[i] {
		case st.Original[i]:
			original++
		case ^st.Original[i]:
			flipped++
		default:
			other++
		}
	}
	n := len(st.Offsets)
	rewritten := size != st.Size || other > 0
	switch {
	case rewritten && flipped == 0:
		return fmt.Sprintf("%s (%s) was rewritten since the injection (%d bytes, was %d): none of the %d flipped bytes is left (%d hold the original, %d other content, %d lie past its end)",
			where, ref, size, st.Size, n, original, other, beyond), nil
	case rewritten:
		return "", fmt.Errorf("%s was rewritten since the injection (%d bytes, was %d; %d of the %d offsets hold new content or lie past its end) yet %d still hold the flipped byte: "+
			"restoring could damage the new content, so look at the file and forget the entry: %w", where, size, st.Size, other+beyond, n, flipped, fault.ErrUnproven)
	}
	for i, o := range st.Offsets {
		if cur[i] == st.Original[i] {
			continue
		}
		one[0] = st.Original[i]
		if _, err := f.WriteAt(one, o); err != nil {
			return "", fmt.Errorf("restore the byte of %s at %d: %w", where, o, err)
		}
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("sync %s: %w", where, err)
	}
	return "", nil
}
