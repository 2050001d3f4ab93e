//go:build cgo

package nvmlgpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
)

// telemetry is what one mock GPU reports, in NVML's own units.
type telemetry struct {
	smMHz, memMHz    uint32
	tempC            uint32
	memTempC         uint32
	powerMW          uint32
	energyMJ         uint64
	utilGPU, utilMem uint32
	usedB, freeB     uint64 // memory_v2
	replays          int
	corr, unc        int
	remapFailed      bool
	reasons          uint64
	numa             int
	notSupported     map[string]bool // method names answering ERROR_NOT_SUPPORTED
	fail             map[string]nvml.Return
}

func (tm telemetry) ret(method string) nvml.Return {
	if r, ok := tm.fail[method]; ok {
		return r
	}
	if tm.notSupported[method] {
		return nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.SUCCESS
}

// busIDOf is the bus id NVML prints for mock GPU i; the mock itself fills
// in only the PCI device id, so the test gives each GPU a distinct bus.
func busIDOf(i int) string { return fmt.Sprintf("00000000:%02X:00.0", 0x18+0x10*i) }

// program sets every call the NVML source makes on the mock device.
func program(d *server.Device, tm telemetry) {
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId, Bus: uint32(0x18 + 0x10*d.Index)}
		for i, c := range busIDOf(d.Index) {
			p.BusId[i] = int8(c)
		}
		return p, nvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return tm.numa, tm.ret("GetNumaNodeId") }
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		return nvml.Memory_v2{Total: d.MemoryInfo.Total, Used: tm.usedB, Free: tm.freeB,
			Reserved: d.MemoryInfo.Total - tm.usedB - tm.freeB}, tm.ret("GetMemoryInfo_v2")
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return d.MemoryInfo, tm.ret("GetMemoryInfo") }
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		switch c {
		case nvml.CLOCK_SM:
			return tm.smMHz, tm.ret("GetClockInfo")
		case nvml.CLOCK_MEM:
			return tm.memMHz, tm.ret("GetClockInfo")
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
		if s != nvml.TEMPERATURE_GPU {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return tm.tempC, tm.ret("GetTemperature")
	}
	d.GetFieldValuesFunc = func(fv []nvml.FieldValue) nvml.Return {
		if r := tm.ret("GetFieldValues"); r != nvml.SUCCESS {
			return r
		}
		for i := range fv {
			var v uint64
			var name string
			typ := nvml.VALUE_TYPE_UNSIGNED_INT
			switch fv[i].FieldId {
			case nvml.FI_DEV_MEMORY_TEMP:
				v, name = uint64(tm.memTempC), "FI_DEV_MEMORY_TEMP"
			case nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION:
				v, name, typ = tm.energyMJ, "FI_DEV_TOTAL_ENERGY_CONSUMPTION", nvml.VALUE_TYPE_UNSIGNED_LONG_LONG
			case nvml.FI_DEV_PCIE_REPLAY_COUNTER:
				v, name, typ = uint64(tm.replays), "FI_DEV_PCIE_REPLAY_COUNTER", nvml.VALUE_TYPE_UNSIGNED_LONG_LONG
			case nvml.FI_DEV_REMAPPED_COR:
				v, name = uint64(tm.corr), "FI_DEV_REMAPPED_COR"
			case nvml.FI_DEV_REMAPPED_UNC:
				v, name = uint64(tm.unc), "FI_DEV_REMAPPED_UNC"
			case nvml.FI_DEV_REMAPPED_FAILURE:
				name = "FI_DEV_REMAPPED_FAILURE"
				if tm.remapFailed {
					v = 1
				}
			default:
				fv[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				continue
			}
			fv[i].ValueType = uint32(typ)
			binary.LittleEndian.PutUint64(fv[i].Value[:], v)
			fv[i].NvmlReturn = uint32(tm.ret(name))
		}
		return nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return tm.powerMW, tm.ret("GetPowerUsage") }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: tm.utilGPU, Memory: tm.utilMem}, tm.ret("GetUtilizationRates")
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
		return tm.reasons, tm.ret("GetCurrentClocksEventReasons")
	}
	d.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) {
		return tm.reasons, tm.ret("GetCurrentClocksThrottleReasons")
	}
}

// busyGPU is a loaded H200 as NVML would report it, varied by index so
// that a value read off the wrong GPU shows.
func busyGPU(i int) telemetry {
	return telemetry{
		smMHz: 1980 - uint32(i), memMHz: 3201, tempC: 60 + uint32(i), memTempC: 70 + uint32(i),
		powerMW: 650_500 + uint32(i)*1000, energyMJ: 123_456_789 + uint64(i),
		utilGPU: 100, utilMem: 40 + uint32(i),
		usedB: (80_000 + uint64(i)) << 20, freeB: (63_000 - uint64(i)) << 20,
		replays: i, corr: 2 * i, unc: i % 2, remapFailed: i == 7, reasons: 0x4 | uint64(i)<<8,
		numa: i / 4,
	}
}

// newH200 returns go-nvml's DGX H200 mock with every GPU programmed by tm.
func newH200(t *testing.T, tm func(i int) telemetry) *server.Server {
	t.Helper()
	s := dgxh200.New()
	for i, d := range s.Devices {
		program(d.(*server.Device), tm(i))
	}
	return s
}

func openMock(t *testing.T, lib nvml.Interface) *nvmlSource {
	t.Helper()
	src, err := newNVML(lib, nil)
	if err != nil {
		t.Fatalf("newNVML: %v", err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

func TestNVMLDevicesOnDGXH200(t *testing.T) {
	t.Parallel()
	srv := newH200(t, busyGPU)
	src := openMock(t, srv)
	devs, err := src.Devices(context.Background())
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	if len(devs) != 8 {
		t.Fatalf("got %d devices, want 8", len(devs))
	}
	seen := map[string]bool{}
	for i, d := range devs {
		md := srv.Devices[i].(*server.Device)
		want := gpu.Device{Index: i, UUID: md.UUID, PCI: busIDOf(i), Name: "NVIDIA H200 141GB HBM3e",
			MemoryTotalMiB: 144384, NUMANode: i / 4}
		if d != want {
			t.Errorf("device %d = %+v, want %+v", i, d, want)
		}
		if seen[d.UUID] {
			t.Errorf("device %d repeats UUID %s", i, d.UUID)
		}
		seen[d.UUID] = true
	}
}

func TestNVMLSampleOnDGXH200(t *testing.T) {
	t.Parallel()
	src := openMock(t, newH200(t, busyGPU))
	for _, i := range []int{0, 3, 7} {
		t.Run(fmt.Sprintf("gpu%d", i), func(t *testing.T) {
			got, err := src.Sample(context.Background(), i)
			if err != nil {
				t.Fatalf("Sample: %v", err)
			}
			tm := busyGPU(i)
			failure := 0.0
			if tm.remapFailed {
				failure = 1
			}
			checks := []struct {
				name      string
				got, want float64
			}{
				{"sm clock MHz", got.SMClockMHz, float64(tm.smMHz)},
				{"mem clock MHz", got.MemClockMHz, 3201},
				{"temp C", got.TempC, float64(tm.tempC)},
				{"mem temp C", got.MemTempC, float64(tm.memTempC)},
				{"power W", got.PowerW, float64(tm.powerMW) / 1000},
				{"energy mJ", got.EnergyMJ, float64(tm.energyMJ)},
				{"util gpu %", got.UtilGPU, 100},
				{"util mem %", got.UtilMem, float64(tm.utilMem)},
				{"fb used MiB", got.FBUsedMiB, float64(80_000 + i)},
				{"fb free MiB", got.FBFreeMiB, float64(63_000 - i)},
				{"pcie replays", got.PCIeReplays, float64(i)},
				{"remapped correctable", got.RemappedCorrectable, float64(2 * i)},
				{"remapped uncorrectable", got.RemappedUncorrectable, float64(i % 2)},
				{"remap failure", got.RemapFailure, failure},
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
				}
			}
			if !got.HasClockEventReasons || got.ClockEventReasons != tm.reasons {
				t.Errorf("clock event reasons = %#x (has %v), want %#x", got.ClockEventReasons, got.HasClockEventReasons, tm.reasons)
			}
			if got.Time.IsZero() {
				t.Error("sample has no time")
			}
		})
	}
}

func TestNVMLInitFailureCallsNothingElse(t *testing.T) {
	t.Parallel()
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_NO_PERMISSION} {
		t.Run(ret.Error(), func(t *testing.T) {
			// Only Init is programmed: any other call panics in the mock.
			lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
			src, err := newNVML(lib, nil)
			if err == nil {
				t.Fatal("newNVML succeeded after a failed Init")
			}
			if src != nil {
				t.Errorf("got a source %v with the error", src)
			}
			if !errors.Is(err, gpu.ErrUnavailable) {
				t.Errorf("error %v does not wrap ErrUnavailable", err)
			}
			if n := len(lib.InitCalls()); n != 1 {
				t.Errorf("Init called %d times, want 1", n)
			}
			if n := len(lib.ShutdownCalls()) + len(lib.ExtensionsCalls()) + len(lib.DeviceGetCountCalls()); n != 0 {
				t.Errorf("%d calls after the failed Init, want none", n)
			}
		})
	}
}

func TestNVMLDegradesUnsupportedFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		missing []string // symbols the library lacks
		tm      func(telemetry) telemetry
		check   func(t *testing.T, s gpu.Sample)
	}{
		{
			name: "no memory temperature field",
			tm: func(tm telemetry) telemetry {
				tm.fail = map[string]nvml.Return{"FI_DEV_MEMORY_TEMP": nvml.ERROR_NOT_SUPPORTED}
				return tm
			},
			check: func(t *testing.T, s gpu.Sample) {
				if !math.IsNaN(s.MemTempC) {
					t.Errorf("mem temp = %v, want NaN", s.MemTempC)
				}
				if s.TempC != 60 {
					t.Errorf("temp = %v, want 60: the rest of the sample must survive", s.TempC)
				}
			},
		},
		{
			name: "row remapping not supported",
			tm: func(tm telemetry) telemetry {
				tm.notSupported = map[string]bool{"FI_DEV_REMAPPED_COR": true, "FI_DEV_REMAPPED_UNC": true, "FI_DEV_REMAPPED_FAILURE": true}
				return tm
			},
			check: func(t *testing.T, s gpu.Sample) {
				for name, v := range map[string]float64{"corr": s.RemappedCorrectable, "unc": s.RemappedUncorrectable, "failure": s.RemapFailure} {
					if !math.IsNaN(v) {
						t.Errorf("%s = %v, want NaN", name, v)
					}
				}
				if s.PowerW != 650.5 {
					t.Errorf("power = %v, want 650.5", s.PowerW)
				}
			},
		},
		{
			name:    "old driver: throttle reasons instead of clock event reasons",
			missing: []string{symClocksEventReasons},
			tm: func(tm telemetry) telemetry {
				// The newer call would answer wrongly if it were made.
				tm.fail = map[string]nvml.Return{"GetCurrentClocksEventReasons": nvml.ERROR_UNKNOWN}
				return tm
			},
			check: func(t *testing.T, s gpu.Sample) {
				if !s.HasClockEventReasons || s.ClockEventReasons != 0x4 {
					t.Errorf("reasons = %#x (has %v), want 0x4 from the throttle-reasons call", s.ClockEventReasons, s.HasClockEventReasons)
				}
			},
		},
		{
			name:    "neither reasons call, no row remap symbol, no memory v2",
			missing: []string{symClocksEventReasons, symClocksThrottleReasons, symRemappedRows, symMemoryInfoV2},
			check: func(t *testing.T, s gpu.Sample) {
				if s.HasClockEventReasons {
					t.Error("clock event reasons reported without either symbol")
				}
				if !math.IsNaN(s.RemappedCorrectable) {
					t.Errorf("remapped rows = %v without the symbol", s.RemappedCorrectable)
				}
				// v1 memory info of the mock: all of it counted as total,
				// none used or free.
				if s.FBUsedMiB != 0 || s.FBFreeMiB != 0 {
					t.Errorf("fb used/free = %v/%v, want the v1 call's 0/0", s.FBUsedMiB, s.FBFreeMiB)
				}
			},
		},
		{
			name: "no permission for energy, no power reading",
			tm: func(tm telemetry) telemetry {
				tm.fail = map[string]nvml.Return{"FI_DEV_TOTAL_ENERGY_CONSUMPTION": nvml.ERROR_NO_PERMISSION, "GetPowerUsage": nvml.ERROR_NOT_SUPPORTED}
				return tm
			},
			check: func(t *testing.T, s gpu.Sample) {
				if !math.IsNaN(s.EnergyMJ) || !math.IsNaN(s.PowerW) {
					t.Errorf("energy, power = %v, %v, want NaN", s.EnergyMJ, s.PowerW)
				}
				if s.SMClockMHz != 1980 {
					t.Errorf("sm clock = %v, want 1980", s.SMClockMHz)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newH200(t, func(i int) telemetry {
				tm := busyGPU(i)
				if tc.tm != nil {
					tm = tc.tm(tm)
				}
				return tm
			})
			missing := map[string]bool{}
			for _, m := range tc.missing {
				missing[m] = true
			}
			srv.LookupSymbolFunc = func(sym string) error {
				if missing[sym] {
					return fmt.Errorf("symbol %s not found", sym)
				}
				return nil
			}
			src := openMock(t, srv)
			s, err := src.Sample(context.Background(), 0)
			if err != nil {
				t.Fatalf("Sample: %v", err)
			}
			tc.check(t, s)
		})
	}
}

func TestNVMLSampleErrors(t *testing.T) {
	t.Parallel()
	everything := []string{"GetClockInfo", "GetTemperature", "GetFieldValues", "GetPowerUsage",
		"GetUtilizationRates", "GetMemoryInfo_v2", "GetMemoryInfo", "GetCurrentClocksEventReasons"}
	all := func(r nvml.Return) map[string]nvml.Return {
		m := map[string]nvml.Return{}
		for _, k := range everything {
			m[k] = r
		}
		return m
	}
	tests := []struct {
		name     string
		index    int
		fail     map[string]nvml.Return
		wantLost bool
		wantNone bool
		wantErr  bool
	}{
		{name: "one call says the GPU is lost", index: 2, fail: map[string]nvml.Return{"GetTemperature": nvml.ERROR_GPU_IS_LOST}, wantLost: true, wantErr: true},
		{name: "every call says lost", index: 2, fail: all(nvml.ERROR_GPU_IS_LOST), wantLost: true, wantErr: true},
		{name: "nothing answers", index: 2, fail: all(nvml.ERROR_UNKNOWN), wantErr: true},
		{name: "one unknown error degrades", index: 2, fail: map[string]nvml.Return{"GetPowerUsage": nvml.ERROR_UNKNOWN}},
		{name: "index past the end", index: 8, wantNone: true, wantErr: true},
		{name: "negative index", index: -1, wantNone: true, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := openMock(t, newH200(t, func(i int) telemetry {
				tm := busyGPU(i)
				if i == 2 {
					tm.fail = tc.fail
				}
				return tm
			}))
			_, err := src.Sample(context.Background(), tc.index)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if errors.Is(err, gpu.ErrGPULost) != tc.wantLost {
				t.Errorf("err = %v, want ErrGPULost %v", err, tc.wantLost)
			}
			if errors.Is(err, gpu.ErrNoDevice) != tc.wantNone {
				t.Errorf("err = %v, want ErrNoDevice %v", err, tc.wantNone)
			}
			// The other GPUs are unaffected.
			if _, err := src.Sample(context.Background(), 1); err != nil {
				t.Errorf("gpu 1: %v", err)
			}
		})
	}
}

func TestNVMLNUMAFallsBackToSysfs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		nvml  nvml.Return
		sysfs map[string]string
		want  int
	}{
		{name: "nvml knows", nvml: nvml.SUCCESS, want: 0},
		{name: "sysfs knows", nvml: nvml.ERROR_NOT_SUPPORTED, sysfs: map[string]string{"/sys/bus/pci/devices/0000:18:00.0/numa_node": "1\n"}, want: 1},
		{name: "sysfs says -1", nvml: nvml.ERROR_NOT_SUPPORTED, sysfs: map[string]string{"/sys/bus/pci/devices/0000:18:00.0/numa_node": "-1\n"}, want: -1},
		{name: "nobody knows", nvml: nvml.ERROR_NOT_SUPPORTED, want: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newH200(t, func(i int) telemetry {
				tm := busyGPU(i)
				tm.fail = map[string]nvml.Return{"GetNumaNodeId": tc.nvml}
				return tm
			})
			read := func(p string) ([]byte, error) {
				if v, ok := tc.sysfs[p]; ok {
					return []byte(v), nil
				}
				return nil, fmt.Errorf("open %s: no such file", p)
			}
			src, err := newNVML(srv, read)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			devs, _ := src.Devices(context.Background())
			if devs[0].NUMANode != tc.want {
				t.Errorf("numa node = %d, want %d", devs[0].NUMANode, tc.want)
			}
		})
	}
}

func TestMemoryRounding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name               string
		used, free         uint64
		wantUsed, wantFree float64
	}{
		{name: "whole MiB", used: 1138 << 20, free: 142017 << 20, wantUsed: 1138, wantFree: 142017},
		{name: "part of a MiB used counts as used", used: 1138<<20 + 300<<10, free: 142016<<20 + 724<<10, wantUsed: 1139, wantFree: 142016},
		{name: "one byte", used: 1, free: 0, wantUsed: 1, wantFree: 0},
		{name: "nothing", used: 0, free: 5 << 20, wantUsed: 0, wantFree: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, used, free, _ := toMiB(143771<<20, tc.used, tc.free)
			if used != tc.wantUsed || free != tc.wantFree {
				t.Errorf("used, free = %v, %v MiB; want %v, %v", used, free, tc.wantUsed, tc.wantFree)
			}
		})
	}
}

func TestNVMLBusIDFallback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   nvml.PciInfo
		want string
	}{
		{name: "string as NVML prints it", in: pci("00000000:9A:00.0"), want: "00000000:9A:00.0"},
		{name: "lower case string", in: pci("00000000:9a:00.0"), want: "00000000:9A:00.0"},
		{name: "numeric fields only", in: nvml.PciInfo{Domain: 0, Bus: 0xdb, Device: 0}, want: "00000000:DB:00.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := busID(tc.in); got != tc.want {
				t.Errorf("busID = %q, want %q", got, tc.want)
			}
		})
	}
}

func pci(s string) nvml.PciInfo {
	var p nvml.PciInfo
	for i, c := range s {
		p.BusId[i] = int8(c)
	}
	return p
}

func TestFieldFloat(t *testing.T) {
	t.Parallel()
	le := func(v uint64) [8]byte {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		return b
	}
	tests := []struct {
		name   string
		typ    nvml.ValueType
		value  [8]byte
		want   float64
		wantOK bool
	}{
		{"double", nvml.VALUE_TYPE_DOUBLE, le(math.Float64bits(71.5)), 71.5, true},
		{"unsigned int", nvml.VALUE_TYPE_UNSIGNED_INT, le(72), 72, true},
		{"unsigned long long", nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, le(1 << 40), 1 << 40, true},
		{"signed long long", nvml.VALUE_TYPE_SIGNED_LONG_LONG, le(uint64(math.MaxUint64)), -1, true},
		{"signed int", nvml.VALUE_TYPE_SIGNED_INT, le(0xffff_fffe), -2, true},
		{"unsigned short", nvml.VALUE_TYPE_UNSIGNED_SHORT, le(0x1_0005), 5, true},
		{"unknown type", nvml.VALUE_TYPE_COUNT, le(1), 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := fieldFloat(nvml.FieldValue{ValueType: uint32(tc.typ), Value: tc.value})
			if ok != tc.wantOK || got != tc.want {
				t.Errorf("fieldFloat = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestNVMLCloseIsFinalAndOrdered(t *testing.T) {
	t.Parallel()
	srv := newH200(t, busyGPU)
	src, err := newNVML(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_, err := src.Sample(ctx, g)
				if err != nil && !errors.Is(err, gpu.ErrClosed) {
					t.Errorf("gpu %d: %v", g, err)
					return
				}
			}
		}()
	}
	if err := src.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
	if err := src.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if n := len(srv.Interface.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
	if _, err := src.Sample(ctx, 0); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("Sample after Close: %v, want ErrClosed", err)
	}
	if _, err := src.Devices(ctx); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("Devices after Close: %v, want ErrClosed", err)
	}
}

func TestNVMLCancelledContext(t *testing.T) {
	t.Parallel()
	src := openMock(t, newH200(t, busyGPU))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := src.Sample(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Sample: %v, want context.Canceled", err)
	}
	if _, err := src.Devices(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Devices: %v, want context.Canceled", err)
	}
}

func TestOpenNVMLWithoutDriver(t *testing.T) {
	t.Parallel()
	// On a machine with the driver this opens the real GPUs; without it
	// (CI, this development machine) it must fail cleanly, not crash.
	src, err := Open()
	if err != nil {
		if !errors.Is(err, gpu.ErrUnavailable) {
			t.Fatalf("Open: %v does not wrap ErrUnavailable", err)
		}
		return
	}
	defer src.Close()
	if _, err := src.Devices(context.Background()); err != nil {
		t.Errorf("Devices on a real driver: %v", err)
	}
}

// countCalls wraps every NVML call a sample may make on d so that each
// adds one to *n. Calls it does not wrap are left unprogrammed on the
// mock, which panics if one is made.
func countCalls(d *server.Device, n *int) {
	clock, temp, fields := d.GetClockInfoFunc, d.GetTemperatureFunc, d.GetFieldValuesFunc
	power, util, memV2 := d.GetPowerUsageFunc, d.GetUtilizationRatesFunc, d.GetMemoryInfo_v2Func
	reasons := d.GetCurrentClocksEventReasonsFunc
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) { *n++; return clock(c) }
	d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) { *n++; return temp(s) }
	d.GetFieldValuesFunc = func(fv []nvml.FieldValue) nvml.Return { *n++; return fields(fv) }
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { *n++; return power() }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { *n++; return util() }
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { *n++; return memV2() }
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { *n++; return reasons() }
}

// TestNVMLCallsPerSample pins how many NVML calls one sample of one GPU
// costs: the agent makes them every second for every GPU, so each one is
// CPU time on every node. The scalar fields share one GetFieldValues.
func TestNVMLCallsPerSample(t *testing.T) {
	t.Parallel()
	srv := newH200(t, busyGPU)
	var calls int
	countCalls(srv.Devices[1].(*server.Device), &calls)
	src := openMock(t, srv)
	calls = 0 // opening reads the memory size once
	if _, err := src.Sample(context.Background(), 1); err != nil {
		t.Fatalf("Sample: %v", err)
	}
	// Two clocks, temperature, the field values, power, utilisation,
	// memory and the clock event reasons.
	if calls != 8 {
		t.Errorf("one sample made %d NVML calls, want 8", calls)
	}
}

// TestNVMLFieldReportsLostGPU checks that a GPU lost according to a single
// field of the batched call is reported lost, as a lost call would be.
func TestNVMLFieldReportsLostGPU(t *testing.T) {
	t.Parallel()
	src := openMock(t, newH200(t, func(i int) telemetry {
		tm := busyGPU(i)
		tm.fail = map[string]nvml.Return{"FI_DEV_PCIE_REPLAY_COUNTER": nvml.ERROR_GPU_IS_LOST}
		return tm
	}))
	if _, err := src.Sample(context.Background(), 0); !errors.Is(err, gpu.ErrGPULost) {
		t.Errorf("err = %v, want ErrGPULost", err)
	}
}

func BenchmarkNVMLSampleOnDGXH200(b *testing.B) {
	s := dgxh200.New()
	for i, d := range s.Devices {
		program(d.(*server.Device), busyGPU(i))
	}
	src, err := newNVML(s, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := src.Sample(ctx, 3); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNVMLEnergyCadence checks that the costly energy counter is read at
// most every EnergyInterval, the samples between repeating its last value,
// while the other fields are read every time.
func TestNVMLEnergyCadence(t *testing.T) {
	t.Parallel()
	srv := newH200(t, busyGPU)
	md := srv.Devices[0].(*server.Device)
	var energyReads, fieldCalls int
	fields := md.GetFieldValuesFunc
	md.GetFieldValuesFunc = func(fv []nvml.FieldValue) nvml.Return {
		fieldCalls++
		for _, f := range fv {
			if f.FieldId == nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION {
				energyReads++
			}
		}
		return fields(fv)
	}
	src := openMock(t, srv)
	clock := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	src.now = func() time.Time { return clock }
	want := float64(busyGPU(0).energyMJ)
	for sec := range 25 {
		clock = clock.Add(time.Second)
		s, err := src.Sample(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if s.EnergyMJ != want {
			t.Fatalf("second %d: energy %v, want the last reading %v", sec, s.EnergyMJ, want)
		}
		if s.MemTempC != float64(busyGPU(0).memTempC) {
			t.Fatalf("second %d: memory temperature %v not read", sec, s.MemTempC)
		}
	}
	// Seconds 1, 11 and 21 read it.
	if energyReads != 3 || fieldCalls != 25 {
		t.Errorf("25 samples a second apart read energy %d times in %d field calls, want 3 in 25", energyReads, fieldCalls)
	}
}
