//go:build cgo

package gpu

import (
	"context"
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Processes lists the compute processes on GPU index
// (nvmlDeviceGetComputeRunningProcesses). Graphics-only processes are not
// listed: a training rank always holds a compute context.
func (s *nvmlSource) Processes(ctx context.Context, index int) ([]Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	if index < 0 || index >= len(s.devs) {
		return nil, fmt.Errorf("list processes of gpu %d: %w", index, ErrNoDevice)
	}
	infos, ret := s.devs[index].h.GetComputeRunningProcesses()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_GPU_IS_LOST:
		return nil, fmt.Errorf("list processes of gpu %d: %w", index, ErrGPULost)
	default:
		return nil, fmt.Errorf("list processes of gpu %d: nvml: %v", index, ret)
	}
	out := make([]Process, 0, len(infos))
	for _, p := range infos {
		used := math.NaN()
		// NVML_VALUE_NOT_AVAILABLE (all ones) when the driver cannot say.
		if p.UsedGpuMemory != math.MaxUint64 {
			used = float64(p.UsedGpuMemory) / mib
		}
		out = append(out, Process{PID: int(p.Pid), UsedMiB: used})
	}
	return out, nil
}
