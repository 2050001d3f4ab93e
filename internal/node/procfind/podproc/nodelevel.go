package podproc

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
)

// NodeLevel returns the group above kubelet's node-allocatable group
// (kubepods, kubepods.slice, kubelet-kubepods.slice) that group (a path
// in one hierarchy) lies in, the level kubelet itself and the node's
// daemons run at; ok is false when group is not in a pod's.
func NodeLevel(group string) (string, bool) {
	if !strings.HasPrefix(group, "/") || path.Clean(group) != group {
		return "", false
	}
	levels := strings.Split(group, "/")
	for p := len(levels) - 1; p >= 1; p-- {
		if _, ok := podLevel(levels, p); !ok {
			continue
		}
		for i := p - 1; i >= 1; i-- {
			if l := levels[i]; l == "kubepods" || strings.HasSuffix(l, "kubepods.slice") {
				return path.Join(append([]string{"/"}, levels[:i]...)...), true
			}
		}
		return "", false
	}
	return "", false
}

// NodeGroups returns, for each hierarchy at cgroupRoot (DefaultRoot when
// empty) in which process pid runs in a pod's group, the directory of the
// group at that pod's node level (NodeLevel): where a process pid starts
// must go to be charged to the node rather than to pid's pod, as the
// node agent's NUMA hogs must (its pod's memory limit and cpuset are the
// agent's, not the node's). Hierarchies in which pid is not in a pod are
// left out, so a pid outside any pod gets none.
func NodeGroups(cgroupRoot string, pid int) ([]string, error) {
	hs, err := Hierarchies(cgroupRoot)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil, fmt.Errorf("groups of pid %d: %w", pid, err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var out []string
	for _, h := range hs {
		g, ok := groupIn(lines, h)
		if !ok {
			continue
		}
		level, ok := NodeLevel(g)
		if !ok {
			continue
		}
		dir := filepath.Join(h.Mount, level)
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("pid %d is in group %s of %s, but its node level %s is not there: is %s the host's cgroup hierarchy?", pid, g, h.Mount, level, h.Mount)
			}
			return nil, err
		}
		out = append(out, dir)
	}
	return out, nil
}

// groupIn returns the group of h among the lines of /proc/PID/cgroup:
// the v2 line for the v2 hierarchy, for a v1 one the line whose
// controllers are the hierarchy's directory name ("cpu,cpuacct";
// "systemd" for name=systemd).
func groupIn(lines []string, h cgroup.Hierarchy) (string, bool) {
	for _, l := range lines {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if h.Version == cgroup.V2 {
			if f[0] == "0" && f[1] == "" {
				return f[2], true
			}
			continue
		}
		ctrls := strings.Split(f[1], ",")
		name := strings.TrimPrefix(f[1], "name=")
		if f[1] != "" && (f[1] == h.Controller || name == h.Controller || slices.Equal(ctrls, strings.Split(h.Controller, ","))) {
			return f[2], true
		}
	}
	return "", false
}
