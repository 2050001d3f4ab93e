package procfault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc"
)

// podQuota is a cgroup-cpu straggler on a rank in a Kubernetes pod: the
// quota is set on the group kubelet made for the rank's container,
// because moving the rank's threads into a group of ours would take them
// out of that group, from under the pod's own limits and kubelet's
// accounting. Before holds the group's own quota files as they were, in
// the order they are written back.
type podQuota struct {
	cgroup.Hierarchy
	// Dir is the container's group, relative to the mount.
	Dir    string        `json:"dir"`
	Before []cgroup.File `json:"before"`
	Files  []cgroup.File `json:"files"`
}

// validate checks that a record could only have come from planPodQuota:
// the group is a container's in kubelet's layout inside a clean mount,
// and every file is a cpu quota file. Recovery writes into the group, so
// a record must never make it write anywhere else.
func (q *podQuota) validate() error {
	if q.Version != cgroup.V1 && q.Version != cgroup.V2 {
		return fmt.Errorf("cgroup version %d", q.Version)
	}
	if !filepath.IsAbs(q.Mount) || filepath.Clean(q.Mount) != q.Mount || q.Mount == "/" {
		return fmt.Errorf("mount %q is not a clean absolute path", q.Mount)
	}
	if !strings.HasPrefix(q.Dir, "/") || path.Clean(q.Dir) != q.Dir {
		return fmt.Errorf("group %q is not a clean absolute path", q.Dir)
	}
	if g, ok := podproc.ParseGroupPath(q.Dir); !ok || g.ContainerID == "" || containerGroup(q.Dir) != q.Dir {
		return fmt.Errorf("group %q is not a pod container's", q.Dir)
	}
	want := quotaFileNames(q.Version)
	for _, fs := range [][]cgroup.File{q.Before, q.Files} {
		if len(fs) != len(want) {
			return fmt.Errorf("%d quota files, want %d", len(fs), len(want))
		}
		for i, f := range fs {
			if f.Name != want[i] || f.Value == "" || strings.ContainsAny(f.Value, "\n\x00") {
				return fmt.Errorf("quota file %q = %q", f.Name, f.Value)
			}
		}
	}
	return nil
}

// quotaFileNames are the files of a group's own CFS quota, in the order
// they are written.
func quotaFileNames(v cgroup.Version) []string {
	if v == cgroup.V1 {
		return []string{"cpu.cfs_period_us", "cpu.cfs_quota_us"}
	}
	return []string{"cpu.max"}
}

// containerGroup returns the group of the container that group (a
// process's group) is in or below: the shallowest ancestor that names a
// container, since a container may make groups of its own below kubelet's.
// It returns "" when group is not in a pod's container.
func containerGroup(group string) string {
	var found string
	for dir := group; ; dir = path.Dir(dir) {
		g, ok := podproc.ParseGroupPath(dir)
		if !ok || g.ContainerID == "" || g.Conmon {
			break
		}
		found = dir
		if dir == "/" {
			break
		}
	}
	return found
}

// podContainer returns the cpu hierarchy and the container group the
// rank runs in when the rank is a pod's (Options.PodCgroups), "" when it
// is not in a pod's container.
func (in *Injector) podContainer(p procfind.Proc) (cgroup.Hierarchy, string, error) {
	if !in.opts.PodCgroups {
		return cgroup.Hierarchy{}, "", nil
	}
	h, err := cgroup.Find("cpu")
	if err != nil {
		return cgroup.Hierarchy{}, "", err
	}
	g, err := cgroup.GroupOf(h, p.PID, p.PID)
	if err != nil {
		return cgroup.Hierarchy{}, "", fmt.Errorf("cpu group of pid %d: %w", p.PID, err)
	}
	return h, containerGroup(g), nil
}

// straggleInPod throttles the rank's container through the quota of the
// container's own group, recording the group's previous quota first.
// Every process of the container shares that quota, so a container that
// runs another rank beside this one (torchrun's several ranks) is refused:
// a straggler is one rank.
func (in *Injector) straggleInPod(ctx context.Context, key string, st state, h cgroup.Hierarchy, dir string, window time.Duration) error {
	abs := filepath.Join(h.Mount, dir)
	pids, err := groupProcs(abs)
	if err != nil {
		return err
	}
	if err := oneRank(st, pids, dir); err != nil {
		return err
	}
	if st.CPUs == 0 {
		cpus, err := measureGroup(ctx, pids, window)
		if err != nil {
			return err
		}
		st.CPUs = cpus
	}
	quota := max(time.Duration(float64(cfsPeriod)*st.CPUs/st.Slowdown), minQuota)
	q := &podQuota{Hierarchy: h, Dir: dir}
	for _, name := range quotaFileNames(h.Version) {
		b, err := os.ReadFile(filepath.Join(abs, name))
		if err != nil {
			return fmt.Errorf("read the quota of container group %s: %w", dir, err)
		}
		q.Before = append(q.Before, cgroup.File{Name: name, Value: strings.TrimSpace(string(b))})
	}
	if h.Version == cgroup.V1 {
		q.Files = []cgroup.File{
			{Name: "cpu.cfs_period_us", Value: strconv.FormatInt(cfsPeriod.Microseconds(), 10)},
			{Name: "cpu.cfs_quota_us", Value: strconv.FormatInt(quota.Microseconds(), 10)},
		}
	} else {
		q.Files = []cgroup.File{{Name: "cpu.max", Value: fmt.Sprintf("%d %d", quota.Microseconds(), cfsPeriod.Microseconds())}}
	}
	if err := q.validate(); err != nil {
		return fmt.Errorf("container group %s: %w", dir, err)
	}
	st.PodQuota = q
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record before acting: %w", err)
	}
	if err := q.write(q.Files); err != nil {
		if rerr := q.write(q.Before); rerr != nil {
			return fmt.Errorf("%w (left for recovery: %w)", err, rerr)
		}
		if rerr := in.dir.Remove(key); rerr != nil {
			return fmt.Errorf("%w (record not removed: %w)", err, rerr)
		}
		return err
	}
	in.log.Info("throttled rank's container", "key", key, "pid", st.Proc.PID, "group", dir, "cpus", st.CPUs, "slowdown", st.Slowdown, "quota", quota)
	return nil
}

// write writes files into the container's group and reads them back. On
// v1 the quota is lifted before the period changes: a child's quota may
// not exceed its parent's, which an old quota over a new period could.
func (q *podQuota) write(files []cgroup.File) error {
	abs := filepath.Join(q.Mount, q.Dir)
	if q.Version == cgroup.V1 {
		if err := cgroup.WriteFile(filepath.Join(abs, "cpu.cfs_quota_us"), "-1"); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := cgroup.WriteFile(filepath.Join(abs, f.Name), f.Value); err != nil {
			return err
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(abs, f.Name))
		if err != nil {
			return fmt.Errorf("read back %s of %s: %w", f.Name, q.Dir, err)
		}
		if got := strings.TrimSpace(string(b)); got != f.Value {
			return fmt.Errorf("%s of %s reads %q after writing %q", f.Name, q.Dir, got, f.Value)
		}
	}
	return nil
}

// releasePod writes the container group's previous quota back. A group
// that is gone while its hierarchy is still mounted where the record
// says proves the container gone, and its quota with it.
func (in *Injector) releasePod(key string, st state) (proof string, err error) {
	q := st.PodQuota
	if err := q.Mounted(); err != nil {
		return "", fmt.Errorf("cannot tell whether container group %s is gone: %w: %w", q.Dir, fault.ErrUnproven, err)
	}
	abs := filepath.Join(q.Mount, q.Dir)
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("container group %s is gone from the cgroup v%d hierarchy mounted at %s (pid %d was its rank)", q.Dir, q.Version, q.Mount, st.Proc.PID), nil
	}
	if err := q.write(q.Before); err != nil {
		if _, serr := os.Stat(abs); errors.Is(serr, os.ErrNotExist) {
			return fmt.Sprintf("container group %s went from the cgroup v%d hierarchy mounted at %s while its quota was restored", q.Dir, q.Version, q.Mount), nil
		}
		return "", err
	}
	in.log.Info("restored the quota of rank's container", "key", key, "pid", st.Proc.PID, "group", q.Dir)
	return "", nil
}

// groupProcs lists the processes of a group and every group below it.
func groupProcs(abs string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(abs, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("%s/cgroup.procs: %q is not a pid", p, f)
			}
			pids = append(pids, pid)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("processes of container group %s: %w", abs, err)
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// oneRank refuses a container in which a process other than the rank's
// own says it is another rank.
func oneRank(st state, pids []int, dir string) error {
	env, err := procfind.ReadEnviron(st.Proc.PID)
	if err != nil {
		return fmt.Errorf("pid %d: %w", st.Proc.PID, err)
	}
	mine, ok, _ := procfind.ParseRank(env)
	for _, pid := range pids {
		if pid == st.Proc.PID {
			continue
		}
		env, err := procfind.ReadEnviron(pid)
		if err != nil {
			continue // gone, or a zombie: it runs nothing
		}
		r, has, _ := procfind.ParseRank(env)
		if has && (!ok || r.Rank != mine.Rank) {
			return fmt.Errorf("container group %s also runs rank %d (pid %d), which a quota on the container would slow too; use mechanism duty-cycle", dir, r.Rank, pid)
		}
	}
	return nil
}

// measureGroup returns how many CPUs the processes used on average over
// the window, with measureCPUs's floor.
func measureGroup(ctx context.Context, pids []int, window time.Duration) (float64, error) {
	ticks := func() map[int]procfind.Stat {
		m := map[int]procfind.Stat{}
		for _, pid := range pids {
			if s, err := procfind.ReadStat(pid); err == nil {
				m[pid] = s
			}
		}
		return m
	}
	before := ticks()
	t0 := time.Now()
	timer := time.NewTimer(window)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return 0, fmt.Errorf("measure the CPU of the container: %w", ctx.Err())
	case <-timer.C:
	}
	var used float64
	for pid, a := range ticks() {
		if b, ok := before[pid]; ok && b.StartTicks == a.StartTicks {
			used += float64(a.UTime + a.STime - b.UTime - b.STime)
		}
	}
	return max(used/procfind.ClockTicks/time.Since(t0).Seconds(), 0.1), nil
}
