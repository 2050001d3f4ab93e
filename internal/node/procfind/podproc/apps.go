package podproc

// Apps returns the live processes of the pod's app containers: every
// process in a container's group but the sandbox's pause and CRI-O's
// conmon, zombies left out. They are the processes that see the pod's
// volumes mounted (the pause container has none), so the checkpoint
// faults look for a job's checkpoint directory, and its writers, among
// them.
func (p Pod) Apps() []Process {
	var out []Process
	for _, l := range p.inspect() {
		if l.ContainerID == "" || l.Conmon || l.pause {
			continue
		}
		out = append(out, l.Process)
	}
	return out
}
