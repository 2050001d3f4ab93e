// Package podproctest builds real cgroups in kubelet's layouts for the
// tests that find a pod's processes (podproc's own, and the node agent's
// rank and network faults in pods): made below a real hierarchy's mount,
// removed deepest first at the end.
package podproctest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
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
