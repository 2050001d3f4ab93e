package exhaust

import (
	"fmt"

	"github.com/gpuchaos/gpuchaos/internal/cuda"
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
	if index >= len(all) {
		return cuda.Device{}, "", fmt.Errorf("gpu %d: this machine has %d GPUs (0 to %d)", index, len(all), len(all)-1)
	}
	return all[index].Device, all[index].PCI, nil
}
