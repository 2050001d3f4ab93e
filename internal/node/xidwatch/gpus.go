package xidwatch

import (
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
)

// GPUResolver maps a kernel-form bus id (0000:18:00) to the GPU of devs on
// that bus, for an XID watcher.
func GPUResolver(devs []gpu.Device) Resolver {
	byBus := map[string]gpu.Device{}
	for _, d := range devs {
		if p, ok := xid.NormalizePCI(d.PCI); ok {
			byBus[p] = d
		}
	}
	return func(pci string) (int, string, bool) {
		p, ok := xid.NormalizePCI(pci)
		if !ok {
			return 0, "", false
		}
		d, ok := byBus[p]
		return d.Index, d.UUID, ok
	}
}
