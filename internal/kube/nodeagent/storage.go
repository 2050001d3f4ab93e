package nodeagent

import (
	"context"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault/ckptfault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// storageFault reports whether f is one of the checkpoint faults, which
// act on a pod's checkpoint directory as its containers see it: they take
// the whole pod (storageCtx), not the pid of one process, since the
// directory is reached through whichever of the pod's processes is alive
// when the fault is injected or recovered, and kill-writer watches all of
// them.
func storageFault(f *catalog.Fault) bool { return f.Family == catalog.FamilyCheckpoint }

// storageCtx returns ctx carrying nf's pod for a checkpoint fault aimed at
// one (a job's pod on this node, by its uid): ckptfault and storagefault
// then resolve the checkpoint directory inside the pod's containers
// (path, or GPUCHAOS_CKPT_DIR from their environment), throttle the pod's
// own cgroup and watch the pod's processes, and read the pod's mount
// table for the storage server. Their records keep the pod, so a fresh
// agent recovers from the ledger alone.
func (a *Agent) storageCtx(ctx context.Context, f *catalog.Fault, nf *v1alpha1.NodeFault) context.Context {
	if nf.Spec.Target.PodUID == "" || !storageFault(f) {
		return ctx
	}
	return ckptfault.WithPod(ctx, ckptfault.Pod{UID: nf.Spec.Target.PodUID, CgroupRoot: a.opts.CgroupRoot})
}
