package xidwatch

import (
	"fmt"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
)

// The resolver finds a GPU by the bus id in any of the forms the kernel and
// NVML print, and nothing on a bus no GPU is on.
func TestGPUResolver(t *testing.T) {
	var devs []gpu.Device
	for i := range 4 {
		devs = append(devs, gpu.Device{
			Index: i, UUID: fmt.Sprintf("GPU-00000000-0000-0000-0000-00000000000%d", i),
			PCI: fmt.Sprintf("00000000:%02X:00.0", 0xC1+i), Name: "NVIDIA H200", NUMANode: -1,
		})
	}
	resolve := GPUResolver(devs)
	tests := []struct {
		pci  string
		want int
		ok   bool
	}{
		{"0000:c4:00", 3, true},
		{"0000:C1:00", 0, true},
		{"00000000:C2:00.0", 1, true},
		{"0000:18:00", 0, false},
		{"garbage", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.pci, func(t *testing.T) {
			idx, _, ok := resolve(tc.pci)
			if ok != tc.ok || ok && idx != tc.want {
				t.Errorf("resolve(%q) = %d, %v; want %d, %v", tc.pci, idx, ok, tc.want, tc.ok)
			}
		})
	}
}
