//go:build !cgo

package nvmlgpu

import (
	"fmt"

	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
)

// Open fails in a binary built without cgo: go-nvml needs it to call
// libnvidia-ml. The error wraps gpu.ErrUnavailable, as on a machine without
// the driver.
func Open() (gpu.Source, error) {
	return nil, fmt.Errorf("%w: this gpuchaos was built without cgo, which NVML needs", gpu.ErrUnavailable)
}
