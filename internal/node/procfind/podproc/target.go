package podproc

import (
	"errors"
	"fmt"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// TargetPID returns the pid a rank injector (procfault's kill, hang,
// straggler; the NUMA faults) takes as its pid parameter for a NodeFault
// aimed at a pod: the pod is t.PodUID, found under the cgroup
// hierarchies at cgroupRoot (DefaultRoot when empty). With t.Rank set,
// the process among the pod's app containers whose environment sets RANK
// to it (and GPUCHAOS_JOB to t.Job where it sets one), by procfind's rule
// for which process is the rank (a torchrun pod runs several ranks, each
// under the launcher); a pod whose processes set no RANK at all is taken
// to be the rank as a whole, and its container's main process is
// returned. Without t.Rank, the main process (Pod.Main). container, when
// not empty, narrows both to one app container.
func TargetPID(cgroupRoot string, t v1alpha1.NodeFaultTarget, container string) (int, error) {
	if t.PodUID == "" {
		return 0, errors.New("target: podUID is empty; the pod's processes are found by its uid")
	}
	hs, err := Hierarchies(cgroupRoot)
	if err != nil {
		return 0, err
	}
	p, err := Find(hs, t.PodUID)
	if err != nil {
		return 0, fmt.Errorf("target %s: %w", targetName(t), err)
	}
	return p.PIDFor(t, container)
}

// PIDFor is TargetPID for a pod already found; t.PodUID is not checked
// against p.
func (p Pod) PIDFor(t v1alpha1.NodeFaultTarget, container string) (int, error) {
	if t.Rank == nil {
		pr, err := p.Main(container)
		if err != nil {
			return 0, fmt.Errorf("target %s: %w", targetName(t), err)
		}
		return pr.PID, nil
	}
	main, err := p.Main(container)
	if err != nil && !errors.Is(err, ErrAmbiguous) {
		return 0, fmt.Errorf("target %s: %w", targetName(t), err)
	}
	var pids []int
	for _, l := range p.inspect() {
		if l.ContainerID == "" || l.Conmon || l.pause {
			continue
		}
		if main.ContainerID != "" && l.ContainerID != main.ContainerID {
			continue
		}
		pids = append(pids, l.PID)
	}
	r, carried, err := procfind.RankAmong(pids, t.Job, *t.Rank)
	switch {
	case err == nil:
		return r.PID, nil
	case errors.Is(err, procfind.ErrNoRank) && !carried && main.PID != 0:
		return main.PID, nil
	case errors.Is(err, procfind.ErrNoRank) && !carried:
		// Several app containers and none says which rank it is.
		return 0, fmt.Errorf("target %s: %w", targetName(t), ErrAmbiguous)
	}
	return 0, fmt.Errorf("target %s: %w", targetName(t), err)
}

func targetName(t v1alpha1.NodeFaultTarget) string {
	s := "pod " + t.PodUID
	if t.Pod != "" {
		s = "pod " + t.Pod + " (" + t.PodUID + ")"
	}
	if t.Rank != nil {
		s += fmt.Sprintf(" rank %d", *t.Rank)
	}
	return s
}
