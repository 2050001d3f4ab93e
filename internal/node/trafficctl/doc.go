// Package trafficctl disturbs one network interface in any network namespace
// and undoes exactly what it did: a token-bucket rate limit (tbf as the
// root qdisc), packet drops by direct-action cls_bpf programs on a clsact
// qdisc (random loss, an IPv4 partition by prefix and port, a port-range
// blackhole), and netem delay or loss where the kernel has sch_netem.
//
// Every fault is a Change, planned first and applied second. Planning
// resolves the namespace (by a process living in it, or the caller's own),
// the interface (by name, or the one carrying the default route) and takes
// a Snapshot of the interface's qdiscs and filters; it decides every handle
// and priority the change will use. A Change is plain JSON, so a caller can
// persist it before Apply and a fresh process can Undo it after the first
// was killed. Undo removes only what carries the change's own marks (our
// root handle, our filter names) and puts back the root qdisc that was
// there before, so the interface's Snapshot afterwards equals the one taken
// at planning.
//
// All netlink work goes through a handle bound to the target namespace
// (netlink.NewHandleAt), so no goroutine switches namespace. Loading the
// BPF programs needs no namespace at all: a program is attached by its file
// descriptor through the namespace's handle.
//
// What is not reached: RDMA verbs traffic bypasses qdiscs entirely; the
// partition and port programs parse IPv4 over Ethernet only, so IPv6
// packets, VLAN-tagged frames and non-first fragments (when a port is
// matched) pass unchanged.
package trafficctl
