package cuda

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNoGPU is returned when the driver sees no GPU at all.
var ErrNoGPU = errors.New("the CUDA driver sees no GPU")

// BusDevice is a device with its PCI bus id (lower case, as the driver
// prints it) and name, numbered in PCI bus order.
type BusDevice struct {
	// Index is the device's place in PCI bus order: nvidia-smi's and
	// NVML's GPU index whenever every GPU is visible to CUDA. CUDA's own
	// ordinal (Device.Ordinal) may differ: CUDA numbers the fastest GPU
	// first unless CUDA_DEVICE_ORDER=PCI_BUS_ID.
	Index  int
	Device Device
	PCI    string
	Name   string
}

// DevicesByBus returns every device in PCI bus order, or ErrNoGPU.
func (d *Driver) DevicesByBus() ([]BusDevice, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("count GPUs: %w", err)
	}
	out := make([]BusDevice, 0, n)
	for i := range n {
		dev, err := d.Device(i)
		if err != nil {
			return nil, err
		}
		pci, err := dev.PCIBusID()
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		name, err := dev.Name()
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		out = append(out, BusDevice{Device: dev, PCI: strings.ToLower(pci), Name: name})
	}
	if len(out) == 0 {
		return nil, ErrNoGPU
	}
	slices.SortFunc(out, func(a, b BusDevice) int { return strings.Compare(a.PCI, b.PCI) })
	for i := range out {
		out[i].Index = i
	}
	return out, nil
}

// Pick returns the devices of all at the indexes in want, in want's
// order, or all of them when want is empty; ErrNoGPU when there are none.
func Pick(all []BusDevice, want []int) ([]BusDevice, error) {
	if len(all) == 0 {
		return nil, ErrNoGPU
	}
	if len(want) == 0 {
		return all, nil
	}
	out := make([]BusDevice, 0, len(want))
	for _, w := range want {
		if w < 0 || w >= len(all) {
			return nil, fmt.Errorf("gpu %d: this machine has %d GPUs (0 to %d)", w, len(all), len(all)-1)
		}
		out = append(out, all[w])
	}
	return out, nil
}
