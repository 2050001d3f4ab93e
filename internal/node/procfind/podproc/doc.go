// Package podproc finds a Kubernetes pod's processes on its node through
// the pod's cgroup, so that rank faults (kill, hang, straggler, NUMA)
// reach a container's process and network faults reach the pod's own
// network namespace.
//
// # Where kubelet puts a pod
//
// Kubelet makes one group per pod under its node-allocatable group,
// which is always named kubepods (below --cgroup-root, "/" by default);
// Burstable and BestEffort pods sit under a group of their QoS class,
// Guaranteed pods directly under kubepods. The container runtime makes
// one group per container inside the pod's. The names depend on the
// cgroup driver, not on the cgroup version:
//
//	systemd  kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope
//	         kubepods.slice/kubepods-pod<uid>.slice/crio-<id>.scope   (Guaranteed)
//	cgroupfs kubepods/besteffort/pod<uid>/<id>
//	         kubepods/pod<uid>/crio-<id>                               (Guaranteed)
//
// systemd unit names cannot hold a dash inside one level of the slice
// tree, so the UID's dashes are underscores there; the runtime's prefix
// of a scope is cri-containerd, crio or docker, and CRI-O puts its
// monitor (conmon) in crio-conmon-<id>.scope beside the container. A
// --cgroup-root of /kubelet (kind) makes kubelet.slice/kubelet-kubepods.slice/…
// and /kubelet/kubepods/…, which ParseGroupPath reads the same way. On
// cgroup v1 the tree is repeated under each controller's hierarchy (and
// the name=systemd one); on v2 there is one tree.
//
// ParseGroupPath reads a pod UID, QoS class and container from a group
// path, and ParseProcCgroup from the text of /proc/PID/cgroup; they are
// pure and fuzzed. Find walks a node's hierarchies (Hierarchies lists
// those mounted at a root such as /sys/fs/cgroup) for the pod's group and
// reads cgroup.procs of it and every group below.
//
// # Which process is the container's
//
// Every pod has a sandbox: containerd and Docker run a pause container in
// a group of its own beside the app containers, CRI-O does too unless it
// drops the infra container. The pause process holds the pod's
// namespaces and does nothing else; its command line is /pause (the
// registry.k8s.io/pause image's entrypoint), which is how Main tells it
// apart: a process whose argv[0] has the base name "pause". The
// container's main process is its init: the process in the container's
// group whose parent is outside it (processes started by kubectl exec have
// a parent outside it too, so of several the earliest started is taken).
// An image whose entrypoint is an init (tini, dumb-init) makes that init
// the main process: a signal that kills it ends the container, but one
// that stops it does not stop its child, so hang and straggle a rank by
// its RANK (TargetPID with a rank) in such images.
//
// NetNS returns the pause process's network namespace when there is one,
// since it outlives app-container restarts.
//
// # What the node agent calls
//
// TargetPID turns a NodeFault's target (PodUID, and Rank for a pod that
// runs several ranks, found by RANK in their environment as procfind
// finds ranks) into the pid parameter of the rank injectors; MainPID does
// the same for a pod and container; NetNSOf gives the pid (and
// /proc/PID/ns/net) the network injectors take for a pod's namespace.
//
// The caller must see the node's processes (hostPID) and its cgroup
// hierarchies at the root it names, in the host's cgroup namespace, as
// the node agent does.
package podproc
