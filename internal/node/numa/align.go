package numa

import (
	"fmt"
	"slices"
)

// MaxRemoteMemoryRatio is the share of a process's resident memory that
// may sit off its GPU's node before the process counts as misaligned.
// Half: a process whose memory is mostly remote pays a cross-socket hop on
// most host accesses, while shared libraries and page cache that happen
// to live elsewhere do not tip it.
const MaxRemoteMemoryRatio = 0.5

// Alignment is how one process sits relative to its GPU's NUMA node.
type Alignment struct {
	// GPUNode is the GPU's node.
	GPUNode int `json:"gpu_node"`
	// CPUs counts the CPUs the process may run on, RemoteCPUs those of
	// them not on the GPU's node.
	CPUs       int `json:"cpus"`
	RemoteCPUs int `json:"remote_cpus"`
	// Bytes is the process's resident memory, RemoteBytes the part of it
	// not on the GPU's node.
	Bytes       uint64 `json:"bytes"`
	RemoteBytes uint64 `json:"remote_bytes"`
}

// Align judges a process from its CPU affinity and memory placement.
func Align(t Topology, gpuNode int, cpus []int, p Placement) Alignment {
	a := Alignment{GPUNode: gpuNode, Bytes: p.Total()}
	a.RemoteBytes = a.Bytes - p.Bytes[gpuNode]
	local, _ := t.Node(gpuNode)
	for _, c := range cpus {
		a.CPUs++
		if _, ok := slices.BinarySearch(local.CPUs, c); !ok {
			a.RemoteCPUs++
		}
	}
	return a
}

// CheckProcess reads process pid's affinity and memory placement and
// judges it against gpuNode. A gpuNode the topology lacks has no CPUs and
// no memory, so everything of the process counts as remote; a negative
// one (the GPU's node is unknown) is an error.
func CheckProcess(t Topology, gpuNode, pid int) (Alignment, error) {
	if gpuNode < 0 {
		return Alignment{}, fmt.Errorf("check numa alignment of pid %d: the gpu's numa node is unknown", pid)
	}
	cpus, err := Affinity(pid)
	if err != nil {
		return Alignment{}, fmt.Errorf("check numa alignment: %w", err)
	}
	ms, err := ReadNUMAMaps(pid)
	if err != nil {
		return Alignment{}, fmt.Errorf("check numa alignment: %w", err)
	}
	return Align(t, gpuNode, cpus, Sum(ms)), nil
}

// RemoteCPURatio is the share of the process's CPUs that are off the
// GPU's node.
func (a Alignment) RemoteCPURatio() float64 {
	if a.CPUs == 0 {
		return 0
	}
	return float64(a.RemoteCPUs) / float64(a.CPUs)
}

// RemoteMemoryRatio is the share of the process's resident memory that is
// off the GPU's node; 0 when nothing is resident.
func (a Alignment) RemoteMemoryRatio() float64 {
	if a.Bytes == 0 {
		return 0
	}
	return float64(a.RemoteBytes) / float64(a.Bytes)
}

// Misaligned reports whether the process may run on a CPU off its GPU's
// node, or keeps more than MaxRemoteMemoryRatio of its memory off it.
// An unpinned process on a two-socket machine counts as misaligned: the
// scheduler is free to move its threads to the far socket, and its new
// pages follow them there.
func (a Alignment) Misaligned() bool {
	return a.RemoteCPUs > 0 || a.RemoteMemoryRatio() > MaxRemoteMemoryRatio
}
