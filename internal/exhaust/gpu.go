package exhaust

import (
	"fmt"
	"slices"
	"strings"

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
	n, err := drv.DeviceCount()
	if err != nil {
		return cuda.Device{}, "", fmt.Errorf("count GPUs: %w", err)
	}
	if n == 0 {
		return cuda.Device{}, "", errNoGPU
	}
	if index >= n {
		return cuda.Device{}, "", fmt.Errorf("gpu %d: this machine has %d GPUs (0 to %d)", index, n, n-1)
	}
	type entry struct {
		dev cuda.Device
		pci string
	}
	all := make([]entry, 0, n)
	for i := range n {
		dev, err := drv.Device(i)
		if err != nil {
			return cuda.Device{}, "", err
		}
		pci, err := dev.PCIBusID()
		if err != nil {
			return cuda.Device{}, "", fmt.Errorf("device %d: %w", i, err)
		}
		all = append(all, entry{dev, strings.ToLower(pci)})
	}
	slices.SortFunc(all, func(a, b entry) int { return strings.Compare(a.pci, b.pci) })
	return all[index].dev, all[index].pci, nil
}
