// Package podproctest builds real cgroups in kubelet's layouts for the
// tests that find a pod's processes (podproc's own, and the node agent's
// rank and network faults in pods): made below a real hierarchy's mount,
// removed deepest first at the end.
package podproctest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// MkGroups makes the cgroups (and their parents) below mount, returning
// those it made, deepest first; groups that existed are left alone.
func MkGroups(t testing.TB, mount string, groups []string) []string {
	t.Helper()
	var made []string
	for _, g := range groups {
		var missing []string
		for d := g; d != "/" && d != "."; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(mount, d)); err == nil {
				break
			}
			missing = append(missing, filepath.Join(mount, d))
		}
		for i := len(missing) - 1; i >= 0; i-- {
			if err := os.Mkdir(missing[i], 0o755); err != nil {
				RmGroups(t, made)
				t.Fatalf("make cgroup: %v", err)
			}
			made = append([]string{missing[i]}, made...)
		}
	}
	return made
}

// RmGroups removes the groups, deepest first. A group empties only once
// its processes are reaped, so a busy one is retried for a while.
func RmGroups(t testing.TB, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				t.Errorf("remove cgroup %s: %v", d, err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Join moves pid into group below mount.
func Join(t testing.TB, mount, group string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(mount, group, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("move pid %d into %s: %v", pid, group, err)
	}
}

// KubePod is a pod's groups in one real hierarchy, in kubelet's layout:
// Pod is the pod's group and Container its one app container's, both
// relative to Mount.
type KubePod struct {
	Mount, Pod, Container string
}

// NewKubePod makes the groups of pod uid with app container id (64 hex
// digits) below base, a group of the hierarchy the test may use (a prefix
// kubelet's --cgroup-root would make): systemd's Burstable layout on v2,
// cgroupfs's on v1. On v2 it enables controllers for the children of each
// group it makes from base down, so the container's group has their files
// (base must then hold no process, as v2 requires of a group that hands
// controllers down). Cleanup removes the groups once they are empty.
func NewKubePod(t testing.TB, v2 bool, mount, base, uid, id string, controllers ...string) KubePod {
	t.Helper()
	p := KubePod{Mount: mount}
	if v2 {
		p.Pod = filepath.Join(base, "kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
		p.Container = filepath.Join(p.Pod, "cri-containerd-"+id+".scope")
	} else {
		p.Pod = filepath.Join(base, "kubepods", "burstable", "pod"+uid)
		p.Container = filepath.Join(p.Pod, id)
	}
	made := MkGroups(t, mount, []string{p.Container})
	t.Cleanup(func() { RmGroups(t, made) })
	if v2 && len(controllers) > 0 {
		var enable []string
		for _, c := range controllers {
			enable = append(enable, "+"+c)
		}
		// From the top down: a group offers its children only what its
		// parent offers it.
		var dirs []string
		for dir := filepath.Dir(p.Container); ; dir = filepath.Dir(dir) {
			dirs = append([]string{dir}, dirs...)
			if dir == filepath.Clean(base) || dir == "/" {
				break
			}
		}
		for _, dir := range dirs {
			if err := os.WriteFile(filepath.Join(mount, dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644); err != nil {
				t.Fatalf("enable %v for the children of %s: %v", controllers, dir, err)
			}
		}
	}
	return p
}

// RandomIDs returns a fresh pod uid (in the API server's UUID form) and a
// container id (64 hex digits, as containerd's), so that tests running at
// once on one machine never share a group.
func RandomIDs(t testing.TB) (uid, container string) {
	t.Helper()
	b := make([]byte, 48)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	x := hex.EncodeToString(b)
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32], x[32:] + x[:32]
}
