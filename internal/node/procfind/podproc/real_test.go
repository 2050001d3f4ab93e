package podproc

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc/podproctest"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
)

// TestRealCgroupTree makes kubelet's layouts in this machine's own cgroup
// hierarchies — the systemd driver's (Burstable and Guaranteed) in the v2
// one, cgroupfs's in the v1 pids one where the machine has v1 — moves
// real processes into them (a pause process in a network namespace of its
// own, and an app container's process), and finds them by pod UID through
// the public entry points alone, from DefaultRoot: MainPID, TargetPID,
// NetNSOf, OfProcess. Everything it made is removed at the end, processes first.
func TestRealCgroupTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("moving processes between cgroups needs root")
	}
	hs, err := Hierarchies("")
	if err != nil {
		t.Skipf("no cgroup hierarchies: %v", err)
	}
	esc := func(uid string) string { return strings.ReplaceAll(uid, "-", "_") }
	type tree struct {
		name      string
		h         cgroup.Hierarchy
		pod       func(uid string) string
		container func(id string) string
		newNet    bool // the pause process gets a network namespace of its own
	}
	var trees []tree
	for _, h := range hs {
		switch {
		case h.Version == cgroup.V2:
			trees = append(trees,
				tree{"v2 systemd burstable", h, func(u string) string {
					return "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + esc(u) + ".slice"
				}, func(id string) string { return "cri-containerd-" + id + ".scope" }, true},
				tree{"v2 systemd guaranteed", h, func(u string) string {
					return "/kubepods.slice/kubepods-pod" + esc(u) + ".slice"
				}, func(id string) string { return "crio-" + id + ".scope" }, true})
		case h.Controller == "pids":
			trees = append(trees, tree{"v1 pids cgroupfs besteffort (host network)", h, func(u string) string {
				return "/kubepods/besteffort/pod" + u
			}, func(id string) string { return id }, false})
		}
	}
	if len(trees) == 0 {
		t.Skipf("neither a v2 nor a v1 pids hierarchy among %+v", hs)
	}
	for _, tr := range trees {
		t.Run(tr.name, func(t *testing.T) {
			uid, sandbox, ctr := newUID(t), newID(t), newID(t)
			pod := tr.pod(uid)
			groups := []string{pod + "/" + tr.container(sandbox), pod + "/" + tr.container(ctr)}
			made := podproctest.MkGroups(t, tr.h.Mount, groups)
			// Registered before the processes start, so it runs after their
			// cleanup has killed and reaped them and the groups are empty.
			t.Cleanup(func() { podproctest.RmGroups(t, made) })

			var attr *syscall.SysProcAttr
			if tr.newNet {
				attr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
			}
			pause, _ := proc(t, "sleep", "/pause", attr)
			app, worker := proc(t, "parent", "torchrun", nil, "RANK=0")
			podproctest.Join(t, tr.h.Mount, groups[0], pause)
			podproctest.Join(t, tr.h.Mount, groups[1], app)
			podproctest.Join(t, tr.h.Mount, groups[1], worker)

			g, err := OfProcess(app)
			if err != nil || g.PodUID != uid || g.ContainerID != ctr {
				t.Errorf("OfProcess(%d) = %+v, %v; want pod %s container %s", app, g, err, uid, ctr)
			}
			got, err := MainPID("", uid, "")
			if err != nil || got != app {
				t.Errorf("MainPID = %d, %v; want %d (pause %d, worker %d)", got, err, app, pause, worker)
			}
			if got, err := MainPID(DefaultRoot, uid, "containerd://"+ctr); err != nil || got != app {
				t.Errorf("MainPID(containerd://%s) = %d, %v; want %d", ctr, got, err, app)
			}
			zero := 0
			if got, err := TargetPID("", v1alpha1.NodeFaultTarget{Kind: "rank", PodUID: uid, Rank: &zero}, ""); err != nil || got != worker {
				t.Errorf("TargetPID(rank 0) = %d, %v; want the exec'd worker %d (launcher %d)", got, err, worker, app)
			}
			p, err := Find(hs, uid)
			if err != nil {
				t.Fatal(err)
			}
			var pids []int
			for _, pr := range p.Processes {
				pids = append(pids, pr.PID)
			}
			slices.Sort(pids)
			want := []int{pause, app, worker}
			slices.Sort(want)
			if p.Hierarchy.Mount != tr.h.Mount || p.Dir != pod || !slices.Equal(pids, want) {
				t.Errorf("Find = %s %s %v; want %s %s %v", p.Hierarchy.Mount, p.Dir, pids, tr.h.Mount, pod, want)
			}

			ns, err := NetNSOf("", uid)
			if !tr.newNet {
				if !errors.Is(err, ErrHostNetwork) {
					t.Errorf("NetNSOf a pod in the node's namespace = %+v, %v; want ErrHostNetwork", ns, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			self, err := statNS(os.Getpid())
			if err != nil {
				t.Fatal(err)
			}
			if ns.PID != pause || ns.Path != "/proc/"+strconv.Itoa(pause)+"/ns/net" || ns.Inode == self.Inode {
				t.Errorf("NetNSOf = %+v; want the pause process %d's own namespace (ours is inode %d)", ns, pause, self.Inode)
			}
		})
	}
	if _, err := MainPID("", newUID(t), ""); !errors.Is(err, ErrNoPod) {
		t.Errorf("MainPID of a pod not here = %v; want ErrNoPod", err)
	}
}
