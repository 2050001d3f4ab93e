package numafault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/numa"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc/podproctest"
)

// podCpuset makes a pod's container group in kubelet's layout in the
// real cpuset hierarchy, its cpuset narrowed to cpus and mems, and moves
// pid into it. It fails in CI, and skips elsewhere, unless root can.
func podCpuset(t *testing.T, pid int, cpus, mems string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		kubetest.Missing(t, "not root: a pod's cpuset needs root")
	}
	h, err := cgroup.Find("cpuset")
	if err != nil {
		kubetest.Missing(t, fmt.Sprintf("no cpuset cgroup controller: %v", err))
	}
	uid, id := podproctest.RandomIDs(t)
	pod := podproctest.NewKubePod(t, h.Version == cgroup.V2, h.Mount, "/", uid, id, "cpuset")
	// A v1 cpuset group starts with no cpus and no mems and takes no task
	// until given some; each level gets its parent's, the container the
	// narrowed set, as kubelet's CPU manager does.
	names := [2]string{"cpuset.cpus", "cpuset.mems"}
	var levels []string
	for d := pod.Container; d != "/"; d = filepath.Dir(d) {
		levels = append([]string{d}, levels...)
	}
	for _, d := range levels {
		for i, name := range names {
			val := []string{cpus, mems}[i]
			if d != pod.Container {
				p, err := os.ReadFile(filepath.Join(h.Mount, filepath.Dir(d), effective(h, name)))
				if err != nil {
					t.Fatal(err)
				}
				val = strings.TrimSpace(string(p))
			}
			if err := os.WriteFile(filepath.Join(h.Mount, d, name), []byte(val), 0o644); err != nil {
				t.Fatalf("set %s of %s to %q: %v", name, d, val, err)
			}
		}
	}
	podproctest.Join(t, h.Mount, pod.Container, pid)
	// Back out before the groups go, should pid outlive this test's
	// cleanups that end it (it was started first, so it ends last).
	t.Cleanup(func() {
		err := os.WriteFile(filepath.Join(h.Mount, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		if err != nil && !errors.Is(err, unix.ESRCH) {
			t.Errorf("move pid %d out of %s: %v", pid, pod.Container, err)
		}
	})
	return pod.Container
}

func effective(h cgroup.Hierarchy, name string) string {
	if h.Version == cgroup.V1 {
		return strings.Replace(name, "cpuset.", "cpuset.effective_", 1)
	}
	return name + ".effective"
}

// fakeThreeNodes is fakeTwoNodes with a third node, farthest from node
// 0, whose CPUs (2-3) no pod here is allowed: the farthest node is then
// not the one to choose.
func fakeThreeNodes(t *testing.T) string {
	t.Helper()
	root := fakeTwoNodes(t)
	files := map[string]string{
		"online":         "0-2\n",
		"node0/distance": "10 21 31\n",
		"node1/distance": "21 10 21\n",
		"node2/cpulist":  "2-3\n",
		"node2/meminfo":  "Node 2 MemTotal: 1048576 kB\nNode 2 MemFree: 524288 kB\n",
		"node2/distance": "31 21 10\n",
	}
	for p, s := range files {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func pinAll(t *testing.T, pid int, cpus ...int) {
	t.Helper()
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tids, err := numa.Threads(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			t.Fatal(err)
		}
	}
}

// wrong-affinity on a rank in a pod whose cpuset is narrower than the
// machine (on made-up trees of this machine's two CPUs, the GPU on node
// 0): the remote node is chosen among those the cpuset allows, the mask
// is what the cpuset allows of it, and Recover gives each thread its mask
// from before; a cpuset that allows no remote CPU is refused in one line
// naming what it allows, changing nothing. The cpuset is never widened.
func TestWrongAffinityWithinThePodCpuset(t *testing.T) {
	f, m := lookup(t, "numa.wrong-affinity")
	tests := []struct {
		name       string
		tree       func(*testing.T) string
		cpus       string
		before     []int // the rank's own mask, within the cpuset
		node       string
		wantMask   []int
		wantRefuse string
	}{
		{name: "1-cpu cpuset on the remote node", tree: fakeTwoNodes, cpus: "1", before: []int{1}, wantMask: []int{1}},
		{name: "1-cpu cpuset on the gpu's node", tree: fakeTwoNodes, cpus: "0", before: []int{0},
			wantRefuse: "no NUMA node with CPUs other than the gpu's (node 0) is allowed; pid %d's cpuset (group %s) allows cpus 0 and memory nodes 0"},
		{name: "farthest node outside the cpuset", tree: fakeThreeNodes, cpus: "0-1", before: []int{0}, wantMask: []int{1}},
		{name: "node parameter outside the cpuset", tree: fakeThreeNodes, cpus: "0-1", before: []int{0}, node: "2",
			wantRefuse: "node 2 is not allowed; pid %d's cpuset (group %s) allows cpus 0-1 and memory nodes 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rank := sleeper(t, "cpuset-"+newTag(t))
			pid := rank.Process.Pid
			waitThreads(t, pid)
			group := podCpuset(t, pid, tc.cpus, "0")
			pinAll(t, pid, tc.before...)
			before := threadMasks(t, pid)
			dir := t.TempDir()
			root := tc.tree(t)
			in, err := New(f, m, Options{StateDir: dir, SysNodeDir: root, GPUNode: func(context.Context, int) (int, error) { return 0, nil }})
			if err != nil {
				t.Fatal(err)
			}
			raw := map[string]string{"pid": strconv.Itoa(pid)}
			if tc.node != "" {
				raw["node"] = tc.node
			}
			err = in.Inject(context.Background(), "k", inventory.Ref{Kind: catalog.ScopeRank}, values(t, f, raw))
			if tc.wantRefuse != "" {
				want := fmt.Sprintf(tc.wantRefuse, pid, group)
				if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("inject: %v, want one line with %q", err, want)
				}
				if ents, _ := os.ReadDir(dir); len(ents) != 0 {
					t.Errorf("state left behind: %v", ents)
				}
				if after := threadMasks(t, pid); !sameMasks(pid, before, after) {
					t.Errorf("masks changed from %v to %v by a refusal", before, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for tid, c := range threadMasks(t, pid) {
				if !slices.Equal(c, tc.wantMask) {
					t.Errorf("thread %d on cpus %v after Inject, want %v", tid, c, tc.wantMask)
				}
			}
			// A fresh injector recovers from the state file alone.
			fresh, err := New(f, m, Options{StateDir: dir, SysNodeDir: root})
			if err != nil {
				t.Fatal(err)
			}
			if err := fresh.Recover(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			if after := threadMasks(t, pid); !sameMasks(pid, before, after) {
				t.Errorf("masks after Recover %v, want %v as before", after, before)
			}
		})
	}
}

// The conformance suite (twice, vanish, recover without inject) on a rank
// in a pod's cpuset: the fault is the pinning to the one remote CPU the
// cpuset allows.
func TestWrongAffinityInAPodCpusetConforms(t *testing.T) {
	f, m := lookup(t, "numa.wrong-affinity")
	root := fakeThreeNodes(t)
	faulttest.Run(t, func(t *testing.T) faulttest.Env {
		rank := sleeper(t, "cpuset-"+newTag(t))
		pid := rank.Process.Pid
		waitThreads(t, pid)
		podCpuset(t, pid, "0-1", "0")
		pinAll(t, pid, 0)
		in, err := New(f, m, Options{StateDir: t.TempDir(), SysNodeDir: root, GPUNode: func(context.Context, int) (int, error) { return 0, nil }})
		if err != nil {
			t.Fatal(err)
		}
		return faulttest.Env{
			Injector: in,
			Ref:      inventory.Ref{Kind: catalog.ScopeRank},
			Values:   values(t, f, map[string]string{"pid": strconv.Itoa(pid)}),
			Applied: func(string) bool {
				ms := threadMasks(t, pid)
				for _, c := range ms {
					if !slices.Equal(c, []int{1}) {
						return false
					}
				}
				return len(ms) > 0
			},
			Vanish: func() { _ = rank.Process.Kill(); _ = rank.Wait() },
		}
	})
}

// remote-memory on a rank in a pod whose cpuset allows memory on the
// GPU's node alone is refused in one line naming what the cpuset allows,
// before any page moves: migrate_pages would refuse or, where the kernel
// lets CAP_SYS_NICE through, move to the allowed part only.
func TestRemoteMemoryRefusedOutsideThePodCpuset(t *testing.T) {
	f, m := lookup(t, "numa.remote-memory")
	rank := sleeper(t, "cpuset-"+newTag(t))
	pid := rank.Process.Pid
	group := podCpuset(t, pid, "0-1", "0")
	dir := t.TempDir()
	in, err := New(f, m, Options{StateDir: dir, SysNodeDir: fakeTwoNodes(t), GPUNode: func(context.Context, int) (int, error) { return 0, nil }})
	if err != nil {
		t.Fatal(err)
	}
	err = in.Inject(context.Background(), "k", inventory.Ref{Kind: catalog.ScopeRank}, values(t, f, map[string]string{"pid": strconv.Itoa(pid)}))
	want := fmt.Sprintf("no NUMA node with memory other than the gpu's (node 0) is allowed; pid %d's cpuset (group %s) allows cpus 0-1 and memory nodes 0", pid, group)
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("inject: %v, want one line with %q", err, want)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("state left behind: %v", ents)
	}
}

// sameMasks is equalMasks for a Go process, whose runtime may start a
// thread at any time: a thread that was not there before must have the
// mask the main thread had (it inherits its creator's, and recovery gives
// such threads the main thread's), and one that ended is left out.
func sameMasks(pid int, before, after map[int][]int) bool {
	for tid, c := range after {
		want, ok := before[tid]
		if !ok {
			want = before[pid]
		}
		if !slices.Equal(c, want) {
			return false
		}
	}
	return len(after) > 0
}
