// Package ckptfault injects the checkpoint faults on a job running on this
// node: checkpoint.kill-writer (mechanism signal), checkpoint.fill-volume
// (fallocate), checkpoint.slow-storage (cgroup-io) and
// checkpoint.corrupt-newest (byte-flip). checkpoint.storage-partition
// belongs to the network and FUSE faults.
//
// The checkpoint directory is the path parameter or, when that is empty,
// the GPUCHAOS_CKPT_DIR variable in the environment of the job's ranks
// (found through /proc like every rank, see internal/node/procfind). It must
// resolve to itself: a path with a symlink in it is refused, so that a
// fill or a byte flip can never land outside the directory named. The
// job's checkpoints are the files ckpt-STEP.pt in it, each written as
// ckpt-STEP.pt.tmp and renamed.
//
// As in every injector here, Inject records the key's state under the
// state directory before acting and Recover works from that record alone,
// so a fresh process recovers what a SIGKILLed one injected:
//
//   - kill-writer polls /proc/PID/fd and /proc/PID/fdinfo of the job's
//     ranks until one holds a file under the directory open for writing
//     with bytes already written, and signals it then, mid-write. Recover
//     has nothing to undo.
//   - fill-volume allocates one filler file, named from the key, so that
//     the filesystem keeps only the free bytes asked for; Recover deletes
//     it.
//   - slow-storage moves each rank into a blkio (v1) or io (v2) cgroup of
//     ours that caps reads and writes to the directory's block device;
//     Recover moves them back. Filesystems without a block device (tmpfs,
//     overlay, NFS, FUSE) are refused.
//   - corrupt-newest inverts bytes at seeded random offsets of the newest
//     checkpoint, recording each offset and original byte first; Recover
//     writes them back, so the file is restored bit for bit.
//
// In a Kubernetes pod (the node agent passes the pod with WithPod) the
// checkpoint directory is a path in the pod's containers: the path
// parameter, or GPUCHAOS_CKPT_DIR from the environment of the pod's
// app-container processes (found through the pod's cgroup, internal/node/procfind/podproc).
// The node does not have it at that path, so the injector reaches it
// through /proc/PID/root of one of those processes, resolved by the
// kernel inside that root (openat2 RESOLVE_IN_ROOT) with no symlink
// allowed on the way, so nothing in the container can lead an action
// onto the node's files. The record keeps the container's path, the pod's
// uid and the directory's device (podDir says why not a pid or a host
// path); recovery reaches the directory again through whichever of the
// pod's processes is alive then, or, with none left, finds the files by
// their handles through any mount of the device left on the node.
// kill-writer watches every process of the pod's app containers;
// slow-storage moves no process out of kubelet's groups but writes the
// cap into the pod's own group (podslow.go says why that group), keeping
// the value it replaced for Recover to write back.
//
// The filler and the corrupted checkpoint are recorded by inode and file
// handle (name_to_handle_at) as well as by path, so Recover follows them
// wherever a job moved them (renamed, moved within the filesystem,
// deleted but held open) and calls them gone (fault.ErrTargetGone) only
// when the kernel says their inode no longer exists, or, for the
// checkpoint, when every flipped byte has been overwritten since. A
// checkpoint rewritten since that still holds flipped bytes, or a file
// that may live on where Recover cannot look, stays pending
// (fault.ErrUnproven) with the reason.
package ckptfault
