package ckptfault

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/node/mountinfo"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc"
)

// Pod names the Kubernetes pod whose checkpoint directory a fault acts
// on. The node agent passes it with WithPod for a NodeFault aimed at a
// job's pod on its node; the injector then takes the directory, its
// writers and its cgroup from the pod rather than from the environment
// of bare-metal ranks.
type Pod struct {
	// UID is the pod's uid, which its cgroup on the node carries.
	UID string `json:"uid"`
	// CgroupRoot is where the node's cgroup hierarchies are mounted
	// (podproc.Hierarchies); empty means podproc.DefaultRoot.
	CgroupRoot string `json:"cgroup_root,omitempty"`
}

type podKey struct{}

// WithPod returns ctx carrying p: the injections made with it act on the
// pod's checkpoint directory as the pod's containers see it.
func WithPod(ctx context.Context, p Pod) context.Context {
	return context.WithValue(ctx, podKey{}, p)
}

// PodFrom returns the pod WithPod put in ctx.
func PodFrom(ctx context.Context) (Pod, bool) {
	p, ok := ctx.Value(podKey{}).(Pod)
	return p, ok && p.UID != ""
}

// podDir is what a record keeps of a pod's checkpoint directory: the pod
// and the device of the directory's filesystem; state.Dir is then the
// path in the pod's containers, not on the node.
//
// Why the pod's uid and not the pid or a host-side path: the directory
// is a path in the containers' mount namespace, reached through
// /proc/PID/root of one of their processes, and that process may be gone
// by the time of recovery (kill-writer kills it, a restart replaces it).
// The uid finds the pod's processes again through its cgroup, whoever
// they are now, and the device checks that the directory found is on the
// same filesystem. Were the pod gone from the node altogether, the
// recorded file handle still opens the file through any mount of the
// device left in the node's mount table (an emptyDir's disk, a volume
// still attached), and proves it freed when it is not there; only a
// filesystem no longer mounted on the node (a PersistentVolume detached
// with the pod) cannot be looked at, and stays unproven. A host-side path
// (/var/lib/kubelet/pods/UID/volumes/...) read from mountinfo would need
// the volume's layout (its mount's root relative to the host's mount of
// the same device, which differs for CSI, hostPath and emptyDir on
// tmpfs) to be mapped back, for no more than the handle gives.
type podDir struct {
	Pod
	Dev uint64 `json:"dev"`
}

// errSymlink marks a checkpoint directory with a symlink on its way.
var errSymlink = errors.New("a symlink on the path")

// findPod finds the pod's group and processes on this node.
func findPod(p Pod) (podproc.Pod, error) {
	hs, err := podproc.Hierarchies(p.CgroupRoot)
	if err != nil {
		return podproc.Pod{}, err
	}
	return podproc.Find(hs, p.UID)
}

// podApps lists the pod's app-container processes, pinned by start time.
func podApps(p Pod) ([]procfind.Proc, error) {
	pod, err := findPod(p)
	if err != nil {
		return nil, err
	}
	var out []procfind.Proc
	for _, a := range pod.Apps() {
		if pr, err := procfind.Identify(a.PID); err == nil {
			out = append(out, pr)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pod %s: %w", p.UID, podproc.ErrNoContainer)
	}
	return out, nil
}

// podCheckpointDir is the path parameter, or GPUCHAOS_CKPT_DIR of the
// first of the pod's app processes that carries it: a path in the
// containers' mount namespace.
func podCheckpointDir(p Pod, v catalog.Values) (string, error) {
	dir := v.String("path")
	if dir == "" {
		procs, err := podApps(p)
		if err != nil {
			return "", fmt.Errorf("find the checkpoint directory: %w", err)
		}
		for _, pr := range procs {
			env, err := procfind.ReadEnviron(pr.PID)
			if err != nil {
				continue
			}
			if d, ok := env.Lookup(EnvCheckpointDir); ok && d != "" {
				dir = d
				break
			}
		}
		if dir == "" {
			return "", fmt.Errorf("no path parameter and no process of pod %s carries %s", p.UID, EnvCheckpointDir)
		}
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return "", fmt.Errorf("checkpoint directory %q is not a clean absolute path", dir)
	}
	return dir, nil
}

// openInRoot opens dir (O_PATH) as process pr sees it: resolved inside
// its root (/proc/PID/root) by the kernel (openat2 RESOLVE_IN_ROOT), so
// that nothing in the path, ".." or a symlink, can lead out of the
// container's root, and with no symlink at all (RESOLVE_NO_SYMLINKS), as
// on a node: the directory named is the directory acted on. pr's start
// time is checked after the root is opened, so a pid reused meanwhile is
// refused rather than its root taken.
func openInRoot(pr procfind.Proc, dir string) (*os.File, error) {
	root, err := unix.Open("/proc/"+strconv.Itoa(pr.PID)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("root of pid %d: %w", pr.PID, err)
	}
	defer unix.Close(root)
	if ok, _ := pr.Alive(); !ok {
		return nil, fmt.Errorf("pid %d exited", pr.PID)
	}
	return openat2Dir(root, dir, fmt.Sprintf("pid %d", pr.PID))
}

func openat2Dir(root int, dir, whose string) (*os.File, error) {
	fd, err := unix.Openat2(root, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("checkpoint directory %s as %s sees it: %w; name the real directory", dir, whose, errSymlink)
	case err != nil:
		return nil, fmt.Errorf("checkpoint directory %s as %s sees it: %w", dir, whose, err)
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// reachPod makes st's directory reachable from this process for one call
// (st.access names it, /proc/self/fd/N), and returns what closes it.
// It tries the pod's app processes, taking the first that sees the
// directory on the recorded device (any, at injection). At recovery,
// when none does (the pod is gone, or between restarts), it falls back to
// any mount of the device in the node's mount table, through which only
// the recorded file handles find files (st.handleOnly).
func reachPod(st *state, inject bool) (func(), error) {
	procs, err := podApps(st.Pod.Pod)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, pr := range procs {
		f, err := openInRoot(pr, st.Dir)
		if err != nil {
			if inject && errors.Is(err, errSymlink) {
				return nil, fmt.Errorf("pod %s: %w", st.Pod.UID, err)
			}
			errs = append(errs, err)
			continue
		}
		var s unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &s); err != nil {
			f.Close()
			errs = append(errs, err)
			continue
		}
		if !inject && s.Dev != st.Pod.Dev {
			f.Close()
			errs = append(errs, fmt.Errorf("pid %d sees %s on device %s, not on %s as at the injection", pr.PID, st.Dir, devName(s.Dev), devName(st.Pod.Dev)))
			continue
		}
		st.Pod.Dev = s.Dev
		st.access = "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
		return func() { f.Close() }, nil
	}
	if inject {
		return nil, fmt.Errorf("no process of pod %s reaches %s: %w", st.Pod.UID, st.Dir, errors.Join(errs...))
	}
	release, derr := reachDevice(st)
	if derr != nil {
		return nil, fmt.Errorf("no process of pod %s reaches %s (%w), and %w: %w", st.Pod.UID, st.Dir, errors.Join(errs...), derr, fault.ErrUnproven)
	}
	return release, nil
}

// nodeViews are where the node's mounts are looked for when no process
// of the pod reaches the directory: pid 1's mount table and root (the
// node's, seen with hostPID), then this process's own, for an agent that
// may not look into pid 1's root (no CAP_SYS_PTRACE) but shares the
// node's mount namespace or has the kubelet's volumes mounted into its own.
var nodeViews = []struct{ table, root string }{
	{"/proc/1/mountinfo", "/proc/1/root"},
	{"/proc/self/mountinfo", "/"},
}

// reachDevice opens a mount of st.Pod.Dev from the node's mount table.
func reachDevice(st *state) (func(), error) {
	want := devName(st.Pod.Dev)
	var errs []error
	for _, v := range nodeViews {
		d, err := mountOf(v.table, v.root, want, st.Pod.Dev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st.access, st.handleOnly = "/proc/self/fd/"+strconv.Itoa(int(d.Fd())), true
		return func() { d.Close() }, nil
	}
	return nil, errors.Join(errs...)
}

// mountOf opens, through root, the mount point of the first mount of
// device dev (MAJ:MIN want) in table.
func mountOf(table, root, want string, dev uint64) (*os.File, error) {
	f, err := os.Open(table)
	if err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	defer f.Close()
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", root, err)
	}
	defer unix.Close(rfd)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 4)
		if len(fields) < 4 || fields[2] != want {
			continue
		}
		m, err := mountinfo.ParseLine(sc.Text())
		if err != nil {
			continue
		}
		d, err := openat2Dir(rfd, m.Point, "the node")
		if err != nil {
			continue
		}
		var s unix.Stat_t
		if unix.Fstat(int(d.Fd()), &s) != nil || s.Dev != dev {
			d.Close()
			continue
		}
		return d, nil
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	return nil, fmt.Errorf("device %s is mounted nowhere in %s: a volume detached from the node with the pod may still hold the change", want, table)
}

func devName(d uint64) string { return fmt.Sprintf("%d:%d", unix.Major(d), unix.Minor(d)) }

// at is where this process reaches p, a path in st.Dir or st.Dir itself:
// p itself on a node, below st.access for a pod's directory.
func (st *state) at(p string) string {
	if st.access == "" {
		return p
	}
	return st.access + strings.TrimPrefix(p, st.Dir)
}

// podWriterFinder lists the pod's app-container processes, found again on
// every rescan so that a container restarted meanwhile is watched too:
// in a pod the ranks are the pod's processes, whatever their environment.
func podWriterFinder(p Pod, v catalog.Values) (func() ([]procfind.Proc, error), error) {
	if pid := v.Int("pid"); pid != 0 {
		return nil, fmt.Errorf("pid %d: the target is pod %s, whose processes are found by its uid", pid, p.UID)
	}
	return func() ([]procfind.Proc, error) {
		procs, err := podApps(p)
		if errors.Is(err, podproc.ErrNoContainer) {
			return nil, nil // between a container's death and its restart
		}
		return procs, err
	}, nil
}

// PodMountTable returns the pod's checkpoint directory (the path
// parameter, or GPUCHAOS_CKPT_DIR of its app processes), a path in its
// containers, and the mount table they see it through: /proc/PID/mountinfo
// of the first app process, whose mount points are paths in the
// container's root. Nothing under the directory is touched, so a storage
// that already hangs does not hang the caller (storagefault).
func PodMountTable(p Pod, v catalog.Values) (dir, table string, err error) {
	if dir, err = podCheckpointDir(p, v); err != nil {
		return "", "", err
	}
	procs, err := podApps(p)
	if err != nil {
		return "", "", err
	}
	return dir, "/proc/" + strconv.Itoa(procs[0].PID) + "/mountinfo", nil
}
