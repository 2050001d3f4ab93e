//go:build cgo

package nvmlgpu

import (
	"context"
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
)

// Processes lists the compute processes on GPU index
// (nvmlDeviceGetComputeRunningProcesses). Graphics-only processes are not
// listed: a training rank always holds a compute context.
func (s *nvmlSource) Processes(ctx context.Context, index int) ([]gpu.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, gpu.ErrClosed
	}
	if index < 0 || index >= len(s.devs) {
		return nil, fmt.Errorf("list processes of gpu %d: %w", index, gpu.ErrNoDevice)
	}
	infos, ret := s.devs[index].h.GetComputeRunningProcesses()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_GPU_IS_LOST:
		return nil, fmt.Errorf("list processes of gpu %d: %w", index, gpu.ErrGPULost)
	default:
		return nil, fmt.Errorf("list processes of gpu %d: nvml: %v", index, ret)
	}
	out := make([]gpu.Process, 0, len(infos))
	for _, p := range infos {
		used := math.NaN()
		// NVML_VALUE_NOT_AVAILABLE (all ones) when the driver cannot say.
		if p.UsedGpuMemory != math.MaxUint64 {
			used = float64(p.UsedGpuMemory) / mib
		}
		out = append(out, gpu.Process{PID: int(p.Pid), UsedMiB: used})
	}
	return out, nil
}
