// Package exhaust takes a GPU's shared resources away from the workloads
// on it: HoldVRAM pins a fraction of the free device memory until released,
// and PCIeStorm saturates the host↔device link with copies from pinned
// memory while measuring the bandwidth it reached, as fast as the link
// allows or paced to a rate.
//
// Both use the CUDA driver API through internal/node/cuda, in a goroutine
// locked to its OS thread, because a CUDA context is current per thread.
// GPUs are numbered in PCI bus order, as nvidia-smi numbers them. Every
// exhaustion ends on its own: a hold ends with its context, a storm with
// its duration.
package exhaust
