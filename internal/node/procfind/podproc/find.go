package podproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
)

// DefaultRoot is where cgroup hierarchies are mounted on a node.
const DefaultRoot = "/sys/fs/cgroup"

// Hierarchies lists the cgroup hierarchies at root (DefaultRoot when
// empty): root itself when it is a cgroup2 mount, else every cgroup or
// cgroup2 mount directly below it (a v1 or hybrid node), by the file
// system's magic rather than the mount table, so that a root bind-mounted
// into the agent's container (a hostPath) reads the same. The v2
// hierarchy comes first, then v1 ones in the order kubelet is sure to
// have made a pod's group in (pids, memory, cpu, the name=systemd one),
// then the rest by name. A v1 hierarchy's Controller is its directory's
// name ("cpu,cpuacct", "systemd"); links to one ("cpu" -> "cpu,cpuacct")
// are left out.
func Hierarchies(root string) ([]cgroup.Hierarchy, error) {
	if root == "" {
		root = DefaultRoot
	}
	if v, ok, err := cgroupVersion(root); err != nil {
		return nil, fmt.Errorf("cgroup hierarchies at %s: %w", root, err)
	} else if ok && v == cgroup.V2 {
		return []cgroup.Hierarchy{{Version: cgroup.V2, Mount: root}}, nil
	} else if ok {
		return []cgroup.Hierarchy{{Version: cgroup.V1, Mount: root, Controller: filepath.Base(root)}}, nil
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("cgroup hierarchies at %s: %w", root, err)
	}
	var out []cgroup.Hierarchy
	for _, e := range ents {
		if !e.IsDir() {
			continue // links included: ReadDir does not follow them
		}
		dir := filepath.Join(root, e.Name())
		v, ok, err := cgroupVersion(dir)
		if err != nil || !ok {
			continue
		}
		out = append(out, cgroup.Hierarchy{Version: v, Mount: dir, Controller: e.Name()})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cgroup hierarchies at %s: neither a cgroup mount nor a directory of them", root)
	}
	rank := func(h cgroup.Hierarchy) int {
		if h.Version == cgroup.V2 {
			return 0
		}
		for i, c := range []string{"pids", "memory", "cpu,cpuacct", "cpuacct,cpu", "cpu", "systemd"} {
			if h.Controller == c {
				return i + 1
			}
		}
		return 100
	}
	slices.SortStableFunc(out, func(a, b cgroup.Hierarchy) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a.Controller, b.Controller)
	})
	for i := range out {
		if out[i].Version == cgroup.V2 {
			out[i].Controller = ""
		}
	}
	return out, nil
}

// cgroupVersion reports which cgroup file system is mounted at dir; ok is
// false for another file system.
func cgroupVersion(dir string) (v cgroup.Version, ok bool, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, err
	}
	switch int64(st.Type) {
	case unix.CGROUP2_SUPER_MAGIC:
		return cgroup.V2, true, nil
	case unix.CGROUP_SUPER_MAGIC:
		return cgroup.V1, true, nil
	}
	return 0, false, nil
}

// Process is one process of a pod.
type Process struct {
	PID int `json:"pid"`
	// Group is what the process's group says: its container, if any.
	Group
	// Dir is the process's group, relative to the hierarchy's mount.
	Dir string `json:"dir"`
}

// Pod is a pod's group on this node and the processes in it.
type Pod struct {
	UID string `json:"uid"`
	QoS string `json:"qos"`
	// Hierarchy is the one the pod was found in.
	Hierarchy cgroup.Hierarchy `json:"hierarchy"`
	// Dir is the pod's group, relative to the hierarchy's mount.
	Dir string `json:"dir"`
	// Processes are those of the pod's group and every group below it,
	// group by group in directory order, each group's by pid.
	Processes []Process `json:"processes"`
}

// ErrNoPod reports that no hierarchy holds a group of the pod: it is not
// on this node, or has not started, or is gone.
var ErrNoPod = errors.New("no cgroup of the pod on this node")

// maxDepth bounds the walk for a pod's group: kubepods sits at most a
// few levels down (under --cgroup-root, and under the node's own
// container with kind), the pod two below it.
const maxDepth = 8

// Find returns the processes of the pod podUID from the first of hs that
// holds its group. The usual places are tried first; failing those, each
// hierarchy is walked to maxDepth for a group ParseGroupPath reads as the
// pod's, which covers any --cgroup-root. Groups and processes that vanish
// during the walk are left out. A pod found nowhere wraps ErrNoPod.
func Find(hs []cgroup.Hierarchy, podUID string) (Pod, error) {
	if !isUID(podUID) {
		return Pod{}, fmt.Errorf("pod uid %q is not a UUID or hex hash", podUID)
	}
	for _, h := range hs {
		dir, g, ok, err := locate(h.Mount, podUID)
		if err != nil {
			return Pod{}, fmt.Errorf("find pod %s in %s: %w", podUID, h.Mount, err)
		}
		if !ok {
			continue
		}
		p := Pod{UID: podUID, QoS: g.QoS, Hierarchy: h, Dir: dir}
		if p.Processes, err = processesUnder(h.Mount, dir); err != nil {
			return Pod{}, fmt.Errorf("find pod %s in %s: %w", podUID, h.Mount, err)
		}
		return p, nil
	}
	mounts := make([]string, len(hs))
	for i, h := range hs {
		mounts[i] = h.Mount
	}
	return Pod{}, fmt.Errorf("pod %s: %w (searched %s)", podUID, ErrNoPod, strings.Join(mounts, ", "))
}

// knownDirs are the pod's group under the default --cgroup-root, for
// each driver and QoS class.
func knownDirs(uid string) []string {
	esc := strings.ReplaceAll(uid, "-", "_")
	return []string{
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + esc + ".slice",
		"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + esc + ".slice",
		"/kubepods.slice/kubepods-pod" + esc + ".slice",
		"/kubepods/burstable/pod" + uid,
		"/kubepods/besteffort/pod" + uid,
		"/kubepods/pod" + uid,
	}
}

// locate finds the pod's group below mount, as a path relative to it.
func locate(mount, uid string) (string, Group, bool, error) {
	for _, d := range knownDirs(uid) {
		if st, err := os.Stat(filepath.Join(mount, d)); err == nil && st.IsDir() {
			g, _ := ParseGroupPath(d)
			return d, g, true, nil
		}
	}
	var (
		found string
		group Group
	)
	err := filepath.WalkDir(mount, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(path, mount), "/")
		if strings.Count(rel, "/") > maxDepth {
			return fs.SkipDir
		}
		g, ok := ParseGroupPath(rel)
		if !ok {
			return nil
		}
		if g.PodUID == uid {
			found, group = rel, g
			return fs.SkipAll
		}
		return fs.SkipDir // another pod's: nothing of ours below
	})
	if err != nil {
		return "", Group{}, false, err
	}
	return found, group, found != "", nil
}

// processesUnder reads cgroup.procs of the group dir and every group
// below it.
func processesUnder(mount, dir string) ([]Process, error) {
	var out []Process
	err := filepath.WalkDir(filepath.Join(mount, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		pids, err := readProcs(filepath.Join(path, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EOPNOTSUPP) {
			return nil // removed, or a v2 threaded group, whose procs are its domain's
		}
		if err != nil {
			return err
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(path, mount), "/")
		g, _ := ParseGroupPath(rel)
		for _, pid := range pids {
			out = append(out, Process{PID: pid, Group: g, Dir: rel})
		}
		return nil
	})
	return out, err
}

// readProcs reads a cgroup.procs file: one pid a line, sorted.
func readProcs(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pids []int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		pid, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("%s: %q is not a pid", path, sc.Text())
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids, nil
}
