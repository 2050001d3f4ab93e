//go:build cgo && !nvmlmock

package nvmlgpu

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
)

// Open loads libnvidia-ml.so.1, initialises NVML and lists the GPUs.
// It fails with an error wrapping gpu.ErrUnavailable when the library is
// absent or does not initialise (no driver, no GPU, a container without
// the NVIDIA runtime); nothing else is called in that case, since any
// NVML call after a failed nvmlInit can crash the process.
func Open() (gpu.Source, error) { return New(nvml.New()) }
