//go:build cgo

package exporter

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu/nvmlgpu"
)

// mockGPU is what one mock GPU answers; lost and noMemTemp may change
// while the agent runs.
type mockGPU struct {
	index     int
	lost      atomic.Bool
	noMemTemp atomic.Bool
}

func (m *mockGPU) ret() nvml.Return {
	if m.lost.Load() {
		return nvml.ERROR_GPU_IS_LOST
	}
	return nvml.SUCCESS
}

// program makes the mock device answer like a busy H200, values varied by
// index so that a value exported under the wrong GPU's labels shows.
func (m *mockGPU) program(d *server.Device) {
	i := uint32(m.index)
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		var p nvml.PciInfo
		for k, c := range fmt.Sprintf("00000000:%02X:00.0", 0x18+0x10*m.index) {
			p.BusId[k] = int8(c)
		}
		return p, nvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return m.index / 4, nvml.SUCCESS }
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		return nvml.Memory_v2{Total: d.MemoryInfo.Total, Used: uint64(1000+i) << 20, Free: uint64(142000-i) << 20}, m.ret()
	}
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		if c == nvml.CLOCK_SM {
			return 1980 - i, m.ret()
		}
		return 3201, m.ret()
	}
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 40 + i, m.ret() }
	d.GetFieldValuesFunc = func(fv []nvml.FieldValue) nvml.Return {
		if r := m.ret(); r != nvml.SUCCESS {
			return r
		}
		// The source reads its scalar fields in this one call; each is
		// answered by id, as the driver does.
		for k := range fv {
			var v uint64
			switch fv[k].FieldId {
			case nvml.FI_DEV_MEMORY_TEMP:
				if m.noMemTemp.Load() {
					fv[k].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
					continue
				}
				v = uint64(50 + i)
			case nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION:
				v = 98_765_432_100 + uint64(i)
			case nvml.FI_DEV_PCIE_REPLAY_COUNTER:
				v = uint64(m.index * 3)
			case nvml.FI_DEV_REMAPPED_COR:
				v = uint64(m.index)
			case nvml.FI_DEV_REMAPPED_UNC:
				v = 0
			case nvml.FI_DEV_REMAPPED_FAILURE:
				if m.index == 6 {
					v = 1
				}
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
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 123_456 + i, m.ret() }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 90 + i, Memory: 30 + i}, m.ret() }
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, m.ret() }
}

func mockH200(t testing.TB) (*server.Server, []*mockGPU, gpu.Source) {
	t.Helper()
	srv := dgxh200.New()
	gpus := make([]*mockGPU, len(srv.Devices))
	for i, d := range srv.Devices {
		gpus[i] = &mockGPU{index: i}
		gpus[i].program(d.(*server.Device))
	}
	src, err := nvmlgpu.New(srv)
	if err != nil {
		t.Fatalf("nvmlgpu.New: %v", err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return srv, gpus, src
}

func TestExpositionOnDGXH200(t *testing.T) {
	t.Parallel()
	srv, gpus, src := mockH200(t)
	a := newAgent(t, Options{Source: src, SourceName: "nvml", Hostname: "h200-node", Version: "test"})
	a.Collect(context.Background())
	fams := scrape(t, a)

	want := map[string]func(i int) float64{
		"DCGM_FI_DEV_SM_CLOCK":                    func(i int) float64 { return float64(1980 - i) },
		"DCGM_FI_DEV_MEM_CLOCK":                   func(int) float64 { return 3201 },
		"DCGM_FI_DEV_GPU_TEMP":                    func(i int) float64 { return float64(40 + i) },
		"DCGM_FI_DEV_MEMORY_TEMP":                 func(i int) float64 { return float64(50 + i) },
		"DCGM_FI_DEV_POWER_USAGE":                 func(i int) float64 { return float64(123_456+i) / 1000 },
		"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":    func(i int) float64 { return float64(98_765_432_100 + i) },
		"DCGM_FI_DEV_PCIE_REPLAY_COUNTER":         func(i int) float64 { return float64(3 * i) },
		"DCGM_FI_DEV_GPU_UTIL":                    func(i int) float64 { return float64(90 + i) },
		"DCGM_FI_DEV_MEM_COPY_UTIL":               func(i int) float64 { return float64(30 + i) },
		"DCGM_FI_DEV_FB_USED":                     func(i int) float64 { return float64(1000 + i) },
		"DCGM_FI_DEV_FB_FREE":                     func(i int) float64 { return float64(142000 - i) },
		"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS":   func(i int) float64 { return float64(i) },
		"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": func(int) float64 { return 0 },
		"DCGM_FI_DEV_ROW_REMAP_FAILURE": func(i int) float64 {
			if i == 6 {
				return 1
			}
			return 0
		},
		"DCGM_FI_DEV_XID_ERRORS": func(int) float64 { return 0 },
	}
	for name, val := range want {
		t.Run(name, func(t *testing.T) {
			f, ok := fams[name]
			if !ok {
				t.Fatalf("%s missing", name)
			}
			if n := len(f.GetMetric()); n != 8 {
				t.Fatalf("%d series, want 8", n)
			}
			for _, m := range f.GetMetric() {
				if got := joined(labelNames(m)); got != joined(dcgmLabels) {
					t.Errorf("labels %s, want exactly %s", got, joined(dcgmLabels))
				}
				l := labelMap(m)
				i, err := strconv.Atoi(l["gpu"])
				if err != nil {
					t.Fatalf("gpu label %q", l["gpu"])
				}
				md := srv.Devices[i].(*server.Device)
				wantLabels := map[string]string{
					"UUID": md.UUID, "pci_bus_id": fmt.Sprintf("00000000:%02X:00.0", 0x18+0x10*i),
					"device": "nvidia" + l["gpu"], "modelName": "NVIDIA H200 141GB HBM3e", "Hostname": "h200-node",
				}
				for k, v := range wantLabels {
					if l[k] != v {
						t.Errorf("gpu %d: label %s=%q, want %q", i, k, l[k], v)
					}
				}
				if got, w := value(m), val(i); got != w {
					t.Errorf("gpu %d: value %v, want %v", i, got, w)
				}
			}
		})
	}
	if m, ok := find(fams, "gpuchaos_agent_info", map[string]string{"source": "nvml", "version": "test", "Hostname": "h200-node"}); !ok || value(m) != 1 {
		t.Errorf("gpuchaos_agent_info missing or not 1")
	}

	// GPU 5 falls off the bus: all its DCGM series go; GPU 4's stay.
	gpus[5].lost.Store(true)
	a.Collect(context.Background())
	fams = scrape(t, a)
	for name := range want {
		if _, ok := find(fams, name, map[string]string{"gpu": "5"}); ok {
			t.Errorf("%s still has lost gpu 5", name)
		}
		if _, ok := find(fams, name, map[string]string{"gpu": "4"}); !ok {
			t.Errorf("%s lost gpu 4 too", name)
		}
	}
	gpus[5].lost.Store(false)
	a.Collect(context.Background())
	if _, ok := find(scrape(t, a), "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "5"}); !ok {
		t.Error("gpu 5 did not come back once it answered again")
	}
}

func TestUnsupportedFieldLeavesOnlyItsSeries(t *testing.T) {
	t.Parallel()
	_, gpus, src := mockH200(t)
	for _, g := range gpus {
		g.noMemTemp.Store(true)
	}
	gpus[0].noMemTemp.Store(false)
	a := newAgent(t, Options{Source: src, Hostname: "n"})
	a.Collect(context.Background())
	fams := scrape(t, a)
	if n := len(fams["DCGM_FI_DEV_MEMORY_TEMP"].GetMetric()); n != 1 {
		t.Errorf("DCGM_FI_DEV_MEMORY_TEMP has %d series, want 1 (only gpu 0 reports it)", n)
	}
	if n := len(fams["DCGM_FI_DEV_GPU_TEMP"].GetMetric()); n != 8 {
		t.Errorf("DCGM_FI_DEV_GPU_TEMP has %d series, want 8", n)
	}
}
