// Package numa reads a Linux machine's NUMA layout and where a process
// stands in it: the nodes with their CPUs, memory and distances
// (/sys/devices/system/node), a process's CPU affinity (sched_getaffinity)
// and the nodes its resident pages are on (/proc/PID/numa_maps, summed per
// node in bytes).
//
// From these and the NUMA node of a GPU it judges alignment, the detector
// the talk says is missing: a GPU process is aligned when every CPU it may
// run on belongs to the GPU's node and most of its memory lives there. The
// GPU's node comes from the caller (NVML's nvmlDeviceGetNumaNodeId or the
// PCI device's numa_node in sysfs, as internal/node/gpu reads it), so this
// package needs no GPU.
//
// The parsers take bytes and never trust them: every one of them has a
// fuzz target, and the topology reader takes its root directory as an
// argument so tests can point it at a captured or a made-up tree.
package numa
