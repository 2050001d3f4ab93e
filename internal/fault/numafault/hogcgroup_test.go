package numafault

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc/podproctest"
)

// RunHog refuses a --cgroup that is not a clean absolute path before it
// takes anything, and fails (1) on one it cannot move into.
func TestRunHogCgroupFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		group string
		want  int
	}{{"relative/dir", 2}, {"/a/../b", 2}, {filepath.Join(t.TempDir(), "nothing"), 1}} {
		args := []string{"--mode=cpu", "--cpus=0", "--threads=1", "--duration=1s", "--cgroup=" + tc.group}
		if got := RunHog(context.Background(), args, io.Discard); got != tc.want {
			t.Errorf("--cgroup=%s: exit %d, want %d", tc.group, got, tc.want)
		}
	}
}

// With HogCgroups set, a hog moves into the groups given before it holds
// anything, and is started without Pdeathsig (it outlives its injector,
// which the node agent's test of a SIGKILL shows end to end). Here the
// group is one made for the test below this process's own in the pids
// (or v2) hierarchy.
func TestHogMovesIntoHogCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		kubetest.Missing(t, "not root: moving a process between cgroups needs root")
	}
	h, err := cgroup.Find("pids")
	if err != nil {
		kubetest.Missing(t, "no pids cgroup controller: "+err.Error())
	}
	own, err := cgroup.GroupOf(h, os.Getpid(), os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	group := filepath.Join(own, "gpuchaos-hogtest-"+newTag(t))
	made := podproctest.MkGroups(t, h.Mount, []string{group})
	tag := newTag(t)
	o := hogOptions(t, tag)
	o.HogCgroups = func() ([]string, error) { return []string{filepath.Join(h.Mount, group)}, nil }
	t.Cleanup(func() { podproctest.RmGroups(t, made) })
	f, m := lookup(t, "numa.cpu-saturation")
	in, err := New(f, m, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Inject(context.Background(), "k", inventory.Ref{Kind: "rank"}, values(t, f, map[string]string{"threads": "1"})); err != nil {
		t.Fatal(err)
	}
	pid := hogPID(t, in, "k")
	if g, err := cgroup.GroupOf(h, pid, pid); err != nil || g != group {
		t.Errorf("the hog is in group %q (%v), want %s", g, err, group)
	}
	if err := in.Recover(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	// Recover returns once the hog is gone, and reaped: it was our child.
	if exists(pid) {
		t.Errorf("hog pid %d still there after Recover", pid)
	}
}
