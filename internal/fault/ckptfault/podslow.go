package ckptfault

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc"
)

// The files a pod's block-I/O limit is written to.
const (
	fileIOMax    = "io.max"
	fileReadBPS  = "blkio.throttle.read_bps_device"
	fileWriteBPS = "blkio.throttle.write_bps_device"
	v2Unlimited  = "rbps=max wbps=max"
	v1Unlimited  = "0"
	controllerV1 = "blkio"
)

// podLimit is one block-I/O limit slow-storage wrote on a pod's own
// group, with the device's values it replaced.
type podLimit struct {
	cgroup.Hierarchy
	// Dir is the pod's group, relative to Mount.
	Dir string `json:"dir"`
	// File is io.max (v2) or a blkio.throttle file (v1).
	File   string `json:"file"`
	Device string `json:"device"`
	// Set is what was written after the device ("rbps=N wbps=N" on v2,
	// "N" on v1); Prev what the device had before ("rbps=max wbps=max"
	// or "0" for no limit).
	Set  string `json:"set"`
	Prev string `json:"prev"`
}

var (
	deviceRE = regexp.MustCompile(`^[0-9]{1,10}:[0-9]{1,10}$`)
	v2RE     = regexp.MustCompile(`^rbps=([0-9]{1,20}|max) wbps=([0-9]{1,20}|max)$`)
	v1RE     = regexp.MustCompile(`^[0-9]{1,20}$`)
)

func (l podLimit) validate() error {
	if !filepath.IsAbs(l.Mount) || filepath.Clean(l.Mount) != l.Mount || l.Mount == "/" {
		return fmt.Errorf("mount %q is not a clean absolute path", l.Mount)
	}
	if !filepath.IsAbs(l.Dir) || filepath.Clean(l.Dir) != l.Dir || l.Dir == "/" {
		return fmt.Errorf("group %q is not a clean absolute path below the mount", l.Dir)
	}
	if !deviceRE.MatchString(l.Device) {
		return fmt.Errorf("device %q is not MAJ:MIN", l.Device)
	}
	var re *regexp.Regexp
	switch {
	case l.Version == cgroup.V2 && l.File == fileIOMax:
		re = v2RE
	case l.Version == cgroup.V1 && (l.File == fileReadBPS || l.File == fileWriteBPS):
		re = v1RE
	default:
		return fmt.Errorf("file %q on cgroup v%d", l.File, l.Version)
	}
	if !re.MatchString(l.Set) || !re.MatchString(l.Prev) {
		return fmt.Errorf("values %q and %q of %s", l.Set, l.Prev, l.File)
	}
	return nil
}

func (l podLimit) path() string { return filepath.Join(l.Mount, l.Dir, l.File) }

// current reads the device's values in l's file (limitOf).
func (l podLimit) current() (string, error) {
	b, err := os.ReadFile(l.path())
	if err != nil {
		return "", err
	}
	return limitOf(string(b), l.Version, l.Device), nil
}

// limitOf returns device's values in the text of an io.max file (v2: the
// rbps and wbps of its line, "max" for one missing) or of a blkio
// throttle file (v1: the number of its line). No line for the device is
// no limit: "rbps=max wbps=max" or "0".
func limitOf(text string, v cgroup.Version, device string) string {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != device {
			continue
		}
		if v == cgroup.V1 {
			return f[1]
		}
		r, w := "max", "max"
		for _, kv := range f[1:] {
			if x, ok := strings.CutPrefix(kv, "rbps="); ok {
				r = x
			} else if x, ok := strings.CutPrefix(kv, "wbps="); ok {
				w = x
			}
		}
		return "rbps=" + r + " wbps=" + w
	}
	if v == cgroup.V1 {
		return v1Unlimited
	}
	return v2Unlimited
}

func (l podLimit) write(value string) error {
	if err := os.WriteFile(l.path(), []byte(l.Device+" "+value), 0); err != nil {
		return fmt.Errorf("write %q to %s: %w", l.Device+" "+value, l.path(), err)
	}
	return nil
}

// podSlow caps the pod's block I/O to the checkpoint directory's device
// at factor × its bandwidth, on the pod's own group.
//
// The limit goes on the pod's group, not into a group of ours as on a
// node: kubelet and the container runtime own a pod's groups, and a
// process moved out of them escapes the pod's CPU and memory limits and
// its accounting, and may be moved back or killed by them at any time.
// io.max (v2) or the blkio throttle (v1) applies to every group below the
// one written, so the pod's group caps every container of the pod,
// containers restarted since included (a container's own group is made
// anew on each restart, and the runtime may write its own io.max there).
// Kubelet sets no io.max on a pod's group, so ours meets no other
// writer; the value it replaces is recorded, and restored by Recover
// only while it still reads as ours.
func (in *Injector) podSlow(ctx context.Context, key string, st state, v catalog.Values) (err error) {
	factor := v.Float("factor")
	if factor <= 0 || factor > 1 || math.IsNaN(factor) {
		return fmt.Errorf("factor %v is not in (0, 1]", factor)
	}
	if pid := v.Int("pid"); pid != 0 {
		return fmt.Errorf("pid %d: the target is pod %s, whose processes are found by its uid", pid, st.Pod.UID)
	}
	if st.Device, err = blockDevice(st.at(st.Dir)); err != nil {
		return fmt.Errorf("%s in pod %s: %w", st.Dir, st.Pod.UID, err)
	}
	bw := v.Int("bandwidth")
	if bw == 0 {
		if bw, err = measureBandwidth(ctx, st.at(st.Dir)); err != nil {
			return err
		}
	}
	st.BPS = max(int64(float64(bw)*factor), 4096)
	if st.Limits, err = planPodLimits(st.Pod.Pod, st.Device, st.BPS); err != nil {
		return err
	}
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record before acting: %w", err)
	}
	defer func() {
		if err == nil {
			return
		}
		if _, rerr := restoreLimits(st.Limits); rerr != nil {
			err = fmt.Errorf("%w (left for recovery: %w)", err, rerr)
			return
		}
		if rerr := in.dir.Remove(key); rerr != nil {
			err = fmt.Errorf("%w (record not removed: %w)", err, rerr)
		}
	}()
	for _, l := range st.Limits {
		if err := l.write(l.Set); err != nil {
			return err
		}
	}
	in.log.Info("throttled a pod's checkpoint storage", "key", key, "pod", st.Pod.UID, "dir", st.Dir, "device", st.Device, "bps", st.BPS, "group", st.Limits[0].Dir)
	return nil
}

// planPodLimits finds the pod's group in the hierarchy that throttles
// block I/O (v2 with the io controller enabled for it, else v1's blkio)
// and reads the device's values there.
func planPodLimits(p Pod, device string, bps int64) ([]podLimit, error) {
	hs, err := podproc.Hierarchies(p.CgroupRoot)
	if err != nil {
		return nil, err
	}
	var tried []string
	for _, h := range hs {
		var files []string
		var set string
		switch {
		case h.Version == cgroup.V2:
			files, set = []string{fileIOMax}, fmt.Sprintf("rbps=%d wbps=%d", bps, bps)
		case slices.Contains(strings.Split(h.Controller, ","), controllerV1):
			files, set = []string{fileReadBPS, fileWriteBPS}, strconv.FormatInt(bps, 10)
		default:
			continue
		}
		pod, err := podproc.Find([]cgroup.Hierarchy{h}, p.UID)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		var out []podLimit
		for _, f := range files {
			l := podLimit{Hierarchy: h, Dir: pod.Dir, File: f, Device: device, Set: set}
			if l.Controller == "" {
				l.Controller = "io"
			}
			if l.Prev, err = l.current(); errors.Is(err, fs.ErrNotExist) {
				break // the io controller is not enabled for the pod's group
			} else if err != nil {
				return nil, err
			}
			if err := l.validate(); err != nil {
				return nil, fmt.Errorf("%s: %w", l.path(), err)
			}
			out = append(out, l)
		}
		if len(out) == len(files) {
			return out, nil
		}
		tried = append(tried, fmt.Sprintf("%s: no %s in the pod's group %s", h.Mount, files[0], pod.Dir))
	}
	return nil, fmt.Errorf("pod %s has no group that throttles block I/O (io.max on cgroup v2, blkio on v1): %s", p.UID, strings.Join(tried, "; "))
}

// restoreLimits writes back each limit's previous value while the file
// still holds ours. A group that is gone (its hierarchy still mounted)
// or a value changed since by another writer has nothing of ours left:
// proof says so when that is true of every limit. A hierarchy no longer
// mounted where recorded cannot tell, and fails with fault.ErrUnproven.
func restoreLimits(ls []podLimit) (proof string, err error) {
	var errs []error
	var proofs []string
	for _, l := range ls {
		if err := l.Hierarchy.Mounted(); err != nil {
			errs = append(errs, fmt.Errorf("cannot tell whether group %s still holds the limit: %w: %w", l.Dir, fault.ErrUnproven, err))
			continue
		}
		cur, err := l.current()
		if errors.Is(err, fs.ErrNotExist) {
			proofs = append(proofs, fmt.Sprintf("group %s is gone from %s", l.Dir, l.Mount))
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cur != l.Set {
			proofs = append(proofs, fmt.Sprintf("%s reads %q for %s, not the %q written: changed since", l.path(), cur, l.Device, l.Set))
			continue
		}
		if err := l.write(l.Prev); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	if len(proofs) == len(ls) && len(ls) > 0 {
		return strings.Join(proofs, "; "), nil
	}
	return "", nil
}
