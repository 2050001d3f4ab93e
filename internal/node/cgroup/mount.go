package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/prometheus/procfs"

	"github.com/gpuchaos/gpuchaos/internal/node/mountinfo"
)

// Version is a cgroup hierarchy's version.
type Version int

// The two cgroup versions.
const (
	V1 Version = 1
	V2 Version = 2
)

// Hierarchy is where one controller lives on this machine.
type Hierarchy struct {
	Version    Version `json:"version"`
	Mount      string  `json:"mount"`
	Controller string  `json:"controller"`
}

// ErrNoController reports that no mounted hierarchy offers the controller.
var ErrNoController = errors.New("controller not mounted")

// Find returns the hierarchy serving controller (cpu, io, blkio, …) from
// this process's mounts: the v2 hierarchy when its root lists the
// controller in cgroup.controllers, else the v1 mount that names it.
func Find(controller string) (Hierarchy, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return Hierarchy{}, fmt.Errorf("find the %s cgroup: %w", controller, err)
	}
	mounts, err := mountinfo.Parse(bytes.NewReader(b))
	if err != nil {
		return Hierarchy{}, fmt.Errorf("find the %s cgroup: %w", controller, err)
	}
	return choose(mounts, controller, func(dir string) ([]byte, error) {
		return os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	})
}

// v2Name maps a v1 controller name to its v2 name: blkio became io.
func v2Name(controller string) string {
	if controller == "blkio" {
		return "io"
	}
	return controller
}

// choose picks the hierarchy from the mounts; controllersOf reads a v2
// mount's cgroup.controllers.
func choose(mounts []mountinfo.Mount, controller string, controllersOf func(string) ([]byte, error)) (Hierarchy, error) {
	for _, m := range mounts {
		if m.FSType != "cgroup2" || m.Root != "/" {
			continue
		}
		b, err := controllersOf(m.Point)
		if err != nil {
			continue
		}
		if slices.Contains(strings.Fields(string(b)), v2Name(controller)) {
			return Hierarchy{Version: V2, Mount: m.Point, Controller: v2Name(controller)}, nil
		}
	}
	v1 := controller
	if controller == "io" {
		v1 = "blkio"
	}
	for _, m := range mounts {
		if m.FSType == "cgroup" && m.Root == "/" && slices.Contains(m.SuperOptions(), v1) {
			return Hierarchy{Version: V1, Mount: m.Point, Controller: v1}, nil
		}
	}
	return Hierarchy{}, fmt.Errorf("%s: %w (neither a cgroup2 mount listing it in cgroup.controllers nor a v1 mount naming it)", controller, ErrNoController)
}

// Membership is one line of /proc/PID/cgroup.
type Membership struct {
	// ID is the hierarchy id, 0 for v2.
	ID int
	// Controllers are the v1 controllers of the hierarchy; empty for v2.
	Controllers []string
	// Path is the group, relative to the hierarchy's root.
	Path string
}

// memberships reads /proc/PID/task/TID/cgroup under the proc file system
// at root through procfs, which splits its "ID:CONTROLLERS:PATH" lines;
// a group path must be absolute, which procfs does not check.
func memberships(root string, pid, tid int) ([]Membership, error) {
	fs, err := procfs.NewFS(root)
	if err != nil {
		return nil, err
	}
	t, err := fs.Thread(pid, tid)
	if err != nil {
		return nil, err
	}
	cgs, err := t.Cgroups()
	if err != nil {
		return nil, err
	}
	out := make([]Membership, 0, len(cgs))
	for n, c := range cgs {
		if c.HierarchyID < 0 {
			return nil, fmt.Errorf("cgroup line %d: hierarchy id %d", n+1, c.HierarchyID)
		}
		if !strings.HasPrefix(c.Path, "/") {
			return nil, fmt.Errorf("cgroup line %d: path %q is not absolute", n+1, c.Path)
		}
		out = append(out, Membership{ID: c.HierarchyID, Controllers: c.Controllers, Path: c.Path})
	}
	return out, nil
}

// PathIn returns the group of the hierarchy h among a process's
// memberships.
func PathIn(ms []Membership, h Hierarchy) (string, error) {
	for _, m := range ms {
		if h.Version == V2 && m.ID == 0 && len(m.Controllers) == 0 {
			return m.Path, nil
		}
		if h.Version == V1 && slices.Contains(m.Controllers, h.Controller) {
			return m.Path, nil
		}
	}
	return "", fmt.Errorf("not a member of any %s group", h.Controller)
}

// GroupOf returns the group of thread tid of process pid in h (pass the
// pid twice for the process as a whole); a thread that is gone is
// os.ErrNotExist.
func GroupOf(h Hierarchy, pid, tid int) (string, error) {
	ms, err := memberships(procfs.DefaultMountPoint, pid, tid)
	if err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return "", os.ErrNotExist // gone between the open and the read
		}
		return "", fmt.Errorf("thread %d: %w", tid, err)
	}
	return PathIn(ms, h)
}
