package ckptfault

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// probeBytes is how much the bandwidth probe writes: enough to get past
// the device's cache and queue start-up on a disk, little next to a
// checkpoint.
const probeBytes = 64 << 20

// ErrNoBlockDevice reports that a directory's filesystem has no block
// device to throttle.
var ErrNoBlockDevice = errors.New("no block device under the filesystem")

// blockDevice returns the MAJ:MIN of the whole disk under dir's
// filesystem. A partition is throttled through its disk, which is where
// the kernel's block-I/O cgroup accounts it.
func blockDevice(dir string) (string, error) {
	var s unix.Stat_t
	if err := unix.Stat(dir, &s); err != nil {
		return "", fmt.Errorf("stat %s: %w", dir, err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(s.Dev), unix.Minor(s.Dev))
	sys := "/sys/dev/block/" + dev
	if _, err := os.Stat(sys); err != nil {
		var fs unix.Statfs_t
		_ = unix.Statfs(dir, &fs)
		return "", fmt.Errorf("%s is on device %s (filesystem magic %#x), which is not a block device: %w; "+
			"tmpfs, overlay, NFS and FUSE need the fuse-latency mechanism instead, or a checkpoint directory on a local disk",
			dir, dev, fs.Type, ErrNoBlockDevice)
	}
	if _, err := os.Stat(sys + "/partition"); err == nil {
		b, err := os.ReadFile(sys + "/../dev")
		if err != nil {
			return "", fmt.Errorf("disk of partition %s: %w", dev, err)
		}
		dev = strings.TrimSpace(string(b))
	}
	return dev, nil
}

// measureBandwidth writes probeBytes to a file in dir with O_DIRECT (the
// page cache would report memory speed) and returns bytes per second.
func measureBandwidth(ctx context.Context, dir string) (int64, error) {
	f, err := os.CreateTemp(dir, ".gpuchaos-probe-*")
	if err != nil {
		return 0, fmt.Errorf("bandwidth probe: %w", err)
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	fd, err := unix.Open(name, unix.O_WRONLY|unix.O_DIRECT|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, fmt.Errorf("bandwidth probe: open with O_DIRECT: %w", err)
	}
	defer unix.Close(fd)
	// O_DIRECT wants a buffer aligned to the logical block; a page-aligned
	// mmap is aligned for every device.
	const chunk = 1 << 20
	buf, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return 0, fmt.Errorf("bandwidth probe: %w", err)
	}
	defer unix.Munmap(buf)
	start := time.Now()
	for done := 0; done < probeBytes; done += chunk {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("bandwidth probe: %w", err)
		}
		if _, err := unix.Write(fd, buf); err != nil {
			return 0, fmt.Errorf("bandwidth probe: write: %w", err)
		}
	}
	if err := unix.Fsync(fd); err != nil {
		return 0, fmt.Errorf("bandwidth probe: fsync: %w", err)
	}
	return int64(float64(probeBytes) / time.Since(start).Seconds()), nil
}

// slow confines every rank of the job in a block-I/O group capped at
// factor × the device's bandwidth.
func (in *Injector) slow(ctx context.Context, key string, st state, ref inventory.Ref, v catalog.Values) (err error) {
	factor := v.Float("factor")
	if factor <= 0 || factor > 1 || math.IsNaN(factor) {
		return fmt.Errorf("factor %v is not in (0, 1]", factor)
	}
	if st.Device, err = blockDevice(st.Dir); err != nil {
		return err
	}
	bw := v.Int("bandwidth")
	if bw == 0 {
		if bw, err = measureBandwidth(ctx, st.Dir); err != nil {
			return err
		}
	}
	st.BPS = max(int64(float64(bw)*factor), 4096)
	procs, err := jobProcs(ref, v)
	if err != nil {
		return err
	}
	h, err := cgroup.Find("blkio")
	if err != nil {
		return err
	}
	var files []cgroup.File
	switch h.Version {
	case cgroup.V1:
		files = []cgroup.File{
			{Name: "blkio.throttle.write_bps_device", Value: fmt.Sprintf("%s %d", st.Device, st.BPS)},
			{Name: "blkio.throttle.read_bps_device", Value: fmt.Sprintf("%s %d", st.Device, st.BPS)},
		}
	case cgroup.V2:
		files = []cgroup.File{{Name: "io.max", Value: fmt.Sprintf("%s rbps=%d wbps=%d", st.Device, st.BPS, st.BPS)}}
	}
	for i, p := range procs {
		c, err := cgroup.Plan(h, p, fmt.Sprintf("%s%s-%d", cgroup.NamePrefix, in.dir.Name(key), i), files)
		if err != nil {
			return err
		}
		st.Confinements = append(st.Confinements, c)
	}
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record before acting: %w", err)
	}
	defer func() {
		if err == nil {
			return
		}
		if rerr := releaseAll(st.Confinements); rerr != nil {
			err = fmt.Errorf("%w (left for recovery: %w)", err, rerr)
			return
		}
		if rerr := in.dir.Remove(key); rerr != nil {
			err = fmt.Errorf("%w (record not removed: %w)", err, rerr)
		}
	}()
	for _, c := range st.Confinements {
		if err := c.Apply(); err != nil {
			return err
		}
	}
	in.log.Info("throttled checkpoint storage", "key", key, "dir", st.Dir, "device", st.Device, "bps", st.BPS, "ranks", len(procs))
	return nil
}

// jobProcs lists the processes to throttle: the pid parameter's, or every
// rank of the job.
func jobProcs(ref inventory.Ref, v catalog.Values) ([]procfind.Proc, error) {
	find, err := writerFinder(ref, v)
	if err != nil {
		return nil, err
	}
	procs, err := find()
	if err != nil {
		return nil, err
	}
	if len(procs) == 0 {
		return nil, fmt.Errorf("job %s has no rank on this node", ref.Job)
	}
	return procs, nil
}

// releaseAll releases every confinement, going on past failures. A group
// already missing proves it released only while its hierarchy is still
// mounted where the record says; otherwise that confinement fails with
// fault.ErrUnproven.
func releaseAll(cs []*cgroup.Confinement) error {
	var errs []error
	for _, c := range cs {
		if err := c.Mounted(); err != nil {
			errs = append(errs, fmt.Errorf("cannot tell whether group %s is gone: %w: %w", c.Dir, fault.ErrUnproven, err))
			continue
		}
		if err := c.Release(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
