// Package storagefault is the fault.Injector of checkpoint.storage-partition
// through cls-bpf: it cuts this node off from the server of its checkpoint
// storage, as a failed storage network does, and leaves the mount alone, so
// that a hard NFS mount or an sshfs mount blocks its writers until the path
// comes back.
//
// The server is the server parameter (an IPv4 address, a CIDR or a host
// name) or, when that is empty, the server of the network filesystem that
// holds the path parameter: Inject reads /proc/self/mountinfo, takes the
// mount whose point is the longest prefix of the path, and reads the
// server from it (the addr= option NFS and CIFS print, else the source's
// "[user@]host:dir" or "//host/share"). A path on a local filesystem
// (ext4, tmpfs) without a server is refused with the path and its type.
// Nothing under the path is touched, so a storage that already hangs does
// not hang the injector.
//
// The cut itself is internal/node/trafficctl's: a partition drop (the server's
// prefix, and port when one is given) on the egress and ingress hooks of
// the interface this process's network namespace routes to the server.
// For FUSE filesystems (sshfs) that is the namespace of the daemon that
// mounted it, which on a node is the host's. Like the network faults,
// Inject writes the planned change to a record of its own under the state
// directory before it applies it, and Recover reads only that record, so
// a fresh process recovers what a SIGKILLed one injected.
//
// In a Kubernetes pod (the node agent passes it with ckptfault.WithPod)
// the path is the one in the pod's containers, from the path parameter
// or their GPUCHAOS_CKPT_DIR, and the mount that holds it is read from the
// mount table of one of the pod's app processes (/proc/PID/mountinfo),
// where the volume is mounted at that path; the node's own table has it
// elsewhere or not at all. The cut is still made in the node's network
// namespace, the agent's (hostNetwork), not the pod's: kubelet and the CSI
// node plugins mount a pod's network volumes (NFS, CIFS) on the node, so
// the kernel's client talks to the server from the node's namespace. A
// FUSE filesystem mounted by a daemon inside the pod (sshfs in the
// container) talks from the pod's namespace and is not reached.
//
// What is not reached: IPv6 servers (the programs parse IPv4 only), and
// storage reached through RDMA (NFS over RDMA, GPUDirect Storage), whose
// traffic bypasses the qdiscs.
package storagefault
