package exhaust

import (
	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
)

// device opens the driver and returns the GPU with the index in PCI bus
// order, so that index i is nvidia-smi's GPU i when all GPUs are visible
// (CUDA's own ordinals put the fastest first).
func device(index int) (cuda.Device, string, error) {
	drv, err := cuda.Open()
	if err != nil {
		return cuda.Device{}, "", err
	}
	all, err := drv.DevicesByBus()
	if err != nil {
		return cuda.Device{}, "", err
	}
	g, err := cuda.Pick(all, []int{index})
	if err != nil {
		return cuda.Device{}, "", err
	}
	return g[0].Device, g[0].PCI, nil
}
