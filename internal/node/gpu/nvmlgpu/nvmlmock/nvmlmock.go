// Package nvmlmock is an 8-GPU DGX H200 that answers NVML as a busy node
// would: go-nvml's dgxh200 mock with every call the exporter makes
// programmed, each GPU running one compute process (the caller's own, so
// the NUMA pass has a process to judge, as a training rank on a real
// node). It stands in for the NVIDIA library where the agent's cost with
// eight GPUs is measured on a machine without them (nvmlgpu's nvmlmock
// build tag, scripts/agent-cost -m) and in tests of the agent's command.
// No default build links it.
package nvmlmock

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// GPUs is how many GPUs New's node has.
const GPUs = 8

// New returns the mock library of a node of GPUs busy H200s, each value
// varied by the GPU's index so that one read off the wrong GPU shows.
func New() nvml.Interface {
	srv := dgxh200.New()
	for i, d := range srv.Devices {
		program(d.(*server.Device), i)
	}
	return srv
}

func program(d *server.Device, index int) {
	i := uint32(index)
	ok := nvml.SUCCESS
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId, Bus: uint32(0x18 + 0x10*index)}
		for k, c := range fmt.Sprintf("00000000:%02X:00.0", 0x18+0x10*index) {
			p.BusId[k] = int8(c)
		}
		return p, ok
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return index / 4, ok }
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		return nvml.Memory_v2{Total: d.MemoryInfo.Total, Used: uint64(80_000+i) << 20, Free: uint64(63_000-i) << 20}, ok
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return d.MemoryInfo, ok }
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		if c == nvml.CLOCK_SM {
			return 1980 - i, ok
		}
		return 3201, ok
	}
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 60 + i, ok }
	d.GetFieldValuesFunc = func(fv []nvml.FieldValue) nvml.Return {
		for k := range fv {
			var v uint64
			switch fv[k].FieldId {
			case nvml.FI_DEV_MEMORY_TEMP:
				v = uint64(70 + i)
			case nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION:
				v = 123_456_789 + uint64(i)
			case nvml.FI_DEV_PCIE_REPLAY_COUNTER:
				v = uint64(index)
			case nvml.FI_DEV_REMAPPED_COR, nvml.FI_DEV_REMAPPED_UNC, nvml.FI_DEV_REMAPPED_FAILURE:
				v = 0
			default:
				fv[k].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				continue
			}
			fv[k].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
			binary.LittleEndian.PutUint64(fv[k].Value[:], v)
			fv[k].NvmlReturn = uint32(nvml.SUCCESS)
		}
		return nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 650_500 + 1000*i, ok }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 100, Memory: 40 + i}, ok }
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, ok }
	d.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) { return 0, ok }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: uint32(os.Getpid()), UsedGpuMemory: 1 << 30}}, ok
	}
}
