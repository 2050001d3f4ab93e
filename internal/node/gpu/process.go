package gpu

import (
	"context"
)

// Process is a process that holds a context on a GPU, as the driver lists
// it.
type Process struct {
	// PID is the process id in the host's pid namespace (NVML's view; a
	// containerised agent needs hostPID to look it up in /proc).
	PID int `json:"pid"`
	// UsedMiB is the GPU memory the process holds, NaN when the driver
	// does not say (MIG, some containers).
	UsedMiB float64 `json:"used_mib"`
}

// ProcessLister is implemented by a Source that can list the compute
// processes on a GPU. It is a separate interface so that Sources which
// cannot (test fakes, remote ones) need not pretend.
//
// Contract: safe for concurrent use; blocks for one driver call; returns
// ctx.Err() when ctx ends before it starts, ErrNoDevice for an index the
// Source did not list, an error wrapping ErrGPULost for a GPU that has
// stopped answering, and an empty list, not an error, for an idle GPU.
type ProcessLister interface {
	Processes(ctx context.Context, index int) ([]Process, error)
}
