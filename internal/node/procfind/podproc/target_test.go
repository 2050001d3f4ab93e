package podproc

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// TestPIDFor builds a pod of a pause process, a launcher whose exec'd
// child is rank 3 (both carry RANK=3, as under torchrun), and a sidecar
// container that says no rank, and asks for the pid of NodeFault targets.
func TestPIDFor(t *testing.T) {
	pause, _ := proc(t, "sleep", "/pause", nil)
	launcher, trainer := proc(t, "parent", "torchrun", nil, "RANK=3", "GPUCHAOS_JOB=llm")
	sidecar, _ := proc(t, "sleep", "envoy", nil)
	mount := t.TempDir()
	uid, ctr, side := newUID(t), newID(t), newID(t)
	pod := "/kubepods.slice/kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
	writeGroup(t, mount, pod+"/cri-containerd-"+newID(t)+".scope", pause)
	writeGroup(t, mount, pod+"/cri-containerd-"+ctr+".scope", launcher, trainer)
	writeGroup(t, mount, pod+"/cri-containerd-"+side+".scope", sidecar)
	p, err := Find([]cgroup.Hierarchy{{Version: cgroup.V2, Mount: mount}}, uid)
	if err != nil {
		t.Fatal(err)
	}
	rank := func(n int) *int { return &n }
	tests := []struct {
		name      string
		target    v1alpha1.NodeFaultTarget
		container string
		want      int
		wantErr   error
	}{
		{"rank 3 is the exec'd trainer", v1alpha1.NodeFaultTarget{Kind: "rank", PodUID: uid, Job: "llm", Rank: rank(3)}, "", trainer, nil},
		{"rank 3 in its container", v1alpha1.NodeFaultTarget{Kind: "rank", PodUID: uid, Rank: rank(3)}, ctr, trainer, nil},
		{"a job of another name", v1alpha1.NodeFaultTarget{Kind: "rank", PodUID: uid, Job: "other", Rank: rank(3)}, "", 0, procfind.ErrNoRank},
		{"a rank the pod does not run", v1alpha1.NodeFaultTarget{Kind: "rank", PodUID: uid, Rank: rank(4)}, "", 0, procfind.ErrNoRank},
		{"a rank in a container that says none is its main process", v1alpha1.NodeFaultTarget{Kind: "rank", PodUID: uid, Rank: rank(4)}, side, sidecar, nil},
		{"no rank: the container's main process", v1alpha1.NodeFaultTarget{Kind: "node", PodUID: uid}, ctr, launcher, nil},
		{"no rank, no container, two app containers", v1alpha1.NodeFaultTarget{Kind: "node", PodUID: uid}, "", 0, ErrAmbiguous},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.PIDFor(tc.target, tc.container)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("PIDFor = %d, %v; want %v", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("PIDFor = %d, %v; want %d (pause %d, launcher %d, trainer %d, sidecar %d)", got, err, tc.want, pause, launcher, trainer, sidecar)
			}
		})
	}
	if _, err := TargetPID("", v1alpha1.NodeFaultTarget{Kind: "rank"}, ""); err == nil || !strings.Contains(err.Error(), "podUID") {
		t.Errorf("TargetPID without a podUID = %v; want an error naming podUID", err)
	}
}
