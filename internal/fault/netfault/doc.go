// Package netfault is the fault.Injector of the network and ebpf faults on
// real interfaces: tc-tbf (network.rate-limit), cls-bpf (network.loss,
// network.partition, ebpf.packet-drop, ebpf.port-blackhole) and netem
// (network.delay, network.loss). The mechanics live in internal/node/trafficctl;
// this package maps a fault's values to a change and keeps the promise that
// a crashed run can be recovered.
//
// Before it touches the interface, Inject writes what recovery needs — the
// namespace (by pid, and by the namespace's device and inode so that a
// recycled pid is not mistaken for it), the interface, its traffic control
// as found, and exactly what the change adds — to a file of its own under
// the state directory, atomically (temporary file, fsync, rename, fsync of
// the directory). Recover reads only that file, so it works in a fresh
// process after the injecting one was SIGKILLed, and deletes it once the
// interface is as it was. A key whose namespace or interface is gone
// recovers with fault.ErrTargetGone.
//
// Every fault takes two parameters saying where: interface (empty for the
// one carrying the default route) and pid (a process in the network
// namespace, e.g. one of a pod's; 0 for gpuchaos' own namespace).
package netfault
