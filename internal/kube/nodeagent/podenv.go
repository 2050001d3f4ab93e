package nodeagent

import (
	"os"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc"
)

// podEnv sets what the injectors need to act on a Kubernetes node: a
// rank in a pod keeps its container's group (cgroup-cpu sets that group's
// quota rather than moving the rank out of it), and the NUMA hogs the
// agent starts go to the node level above the agent's own pod, so that
// neither the agent's memory limit nor its cpuset caps them, and outlive
// an agent restart until their hold ends or the next agent recovers them
// from the ledger. Where the agent runs outside any pod (a systemd unit)
// the hogs stay in its groups.
func podEnv(opts *Options) {
	opts.Env.PodCgroups = true
	if opts.Env.HogCgroups == nil {
		root := opts.CgroupRoot
		opts.Env.HogCgroups = func() ([]string, error) { return podproc.NodeGroups(root, os.Getpid()) }
	}
}
