//go:build cgo

package nvmlgpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
)

// mib is one mebibyte: NVML counts memory in bytes, dcgm-exporter in MiB.
const mib = 1 << 20

// Symbols newer than the oldest driver we accept. A call to a symbol the
// loaded library lacks would fail at run time, so each is looked up once
// at open and the older call (or nothing) is used without it.
const (
	symClocksEventReasons    = "nvmlDeviceGetCurrentClocksEventReasons"
	symClocksThrottleReasons = "nvmlDeviceGetCurrentClocksThrottleReasons"
	symMemoryInfoV2          = "nvmlDeviceGetMemoryInfo_v2"
	symRemappedRows          = "nvmlDeviceGetRemappedRows"
	symNumaNodeID            = "nvmlDeviceGetNumaNodeId"
)

// nvmlSource is the gpu.Source over NVML. devs and has are fixed at open;
// mu orders Close after every call in flight, because calling NVML after
// nvmlShutdown is undefined behaviour in the C library.
type nvmlSource struct {
	lib  nvml.Interface
	devs []nvmlDevice
	has  nvmlSymbols
	// now reads the clock for the energy cadence; tests set it.
	now func() time.Time

	mu     sync.RWMutex
	closed bool // guarded by mu

	// energy[i] is GPU i's newest energy reading; see EnergyInterval.
	energyMu sync.Mutex
	energy   []energyReading // guarded by energyMu
}

// EnergyInterval is how often a GPU's energy counter is read; samples in
// between repeat the last reading. Reading it (nvmlDeviceGetTotalEnergy-
// Consumption, or its field) cost 3.9 ms of kernel CPU time per call on an
// H200 with driver 580, hundreds of times any other reading of a sample
// but the PCIe replay counter's 0.12 ms (BenchmarkNVMLField,
// docs/results/raw-2026-11-30/device-output-tails.txt): read every second
// for two GPUs it was most of the agent's CPU. A cumulative counter
// read every ten seconds still gives rate() over any usual window.
const EnergyInterval = 10 * time.Second

// energyReading is one read of a GPU's energy counter.
type energyReading struct {
	mj float64
	at time.Time
	ok bool
}

type nvmlDevice struct {
	info gpu.Device
	h    nvml.Device
}

// nvmlSymbols records which newer entry points the loaded library has.
type nvmlSymbols struct {
	eventReasons, throttleReasons, memoryV2, remappedRows, numaNode bool
}

// New opens a gpu.Source over lib, which is go-nvml's library (nvml.New())
// or one of its mocks (pkg/nvml/mock/dgxh200). The same rules as Open
// hold: nothing but Init is called unless Init succeeds.
func New(lib nvml.Interface) (gpu.Source, error) {
	s, err := newNVML(lib, os.ReadFile)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// newNVML opens a source over lib: the real library or go-nvml's mock.
// readFile reads sysfs for the NUMA node when NVML cannot tell.
func newNVML(lib nvml.Interface, readFile func(string) ([]byte, error)) (*nvmlSource, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		// Deliberately nothing else: not even Shutdown.
		return nil, fmt.Errorf("%w: initialise NVML: %v", gpu.ErrUnavailable, ret)
	}
	s := &nvmlSource{lib: lib, now: time.Now}
	ext := lib.Extensions()
	s.has = nvmlSymbols{
		eventReasons:    ext.LookupSymbol(symClocksEventReasons) == nil,
		throttleReasons: ext.LookupSymbol(symClocksThrottleReasons) == nil,
		memoryV2:        ext.LookupSymbol(symMemoryInfoV2) == nil,
		remappedRows:    ext.LookupSymbol(symRemappedRows) == nil,
		numaNode:        ext.LookupSymbol(symNumaNodeID) == nil,
	}
	devs, err := s.enumerate(readFile)
	if err != nil {
		_ = lib.Shutdown()
		return nil, err
	}
	s.devs = devs
	s.energy = make([]energyReading, len(devs))
	return s, nil
}

func (s *nvmlSource) enumerate(readFile func(string) ([]byte, error)) ([]nvmlDevice, error) {
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("list gpus: count devices: %v", ret)
	}
	devs := make([]nvmlDevice, 0, n)
	for i := 0; i < n; i++ {
		h, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("list gpus: gpu %d: get handle: %v", i, ret)
		}
		d := gpu.Device{Index: i, NUMANode: -1}
		if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("list gpus: gpu %d: read uuid: %v", i, ret)
		}
		if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("list gpus: gpu %d: read name: %v", i, ret)
		}
		pci, ret := h.GetPciInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("list gpus: gpu %d: read pci info: %v", i, ret)
		}
		d.PCI = busID(pci)
		d.MemoryTotalMiB = math.NaN()
		if total, _, _, ok := s.memory(h); ok {
			d.MemoryTotalMiB = total
		}
		d.NUMANode = s.numaNode(h, d.PCI, readFile)
		devs = append(devs, nvmlDevice{info: d, h: h})
	}
	return devs, nil
}

// busID turns NVML's C string into Go, falling back to the numeric fields
// when the string is empty (some mocks and very old drivers).
func busID(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	if b.Len() > 0 {
		return strings.ToUpper(b.String())
	}
	return fmt.Sprintf("%08X:%02X:%02X.0", p.Domain, p.Bus, p.Device)
}

// numaNode asks NVML, then sysfs (whose device directory uses the
// four-digit domain, lower case); -1 when neither knows.
func (s *nvmlSource) numaNode(h nvml.Device, pci string, readFile func(string) ([]byte, error)) int {
	if s.has.numaNode {
		if n, ret := h.GetNumaNodeId(); ret == nvml.SUCCESS && n >= 0 {
			return n
		}
	}
	if readFile == nil || len(pci) < 12 {
		return -1
	}
	b, err := readFile("/sys/bus/pci/devices/" + strings.ToLower(pci[4:]) + "/numa_node")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// memory returns total, used and free framebuffer in MiB. The v2 call
// leaves the driver's reservation out of "used", as nvidia-smi does; the
// v1 call counts it as used. Used rounds up and free down: on an H200 with
// driver 580 nvidia-smi's memory.used read one MiB above the truncated
// byte count in every loaded reading (docs/results/h200-agent.md), and a
// partly used MiB is not free.
func (s *nvmlSource) memory(h nvml.Device) (total, used, free float64, ok bool) {
	if s.has.memoryV2 {
		if m, ret := h.GetMemoryInfo_v2(); ret == nvml.SUCCESS {
			return toMiB(m.Total, m.Used, m.Free)
		}
	}
	m, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, 0, 0, false
	}
	return toMiB(m.Total, m.Used, m.Free)
}

func toMiB(total, used, free uint64) (float64, float64, float64, bool) {
	return float64(total) / mib, float64((used + mib - 1) / mib), float64(free / mib), true
}

// Devices lists the GPUs found at open.
func (s *nvmlSource) Devices(ctx context.Context) ([]gpu.Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, gpu.ErrClosed
	}
	out := make([]gpu.Device, len(s.devs))
	for i, d := range s.devs {
		out[i] = d.info
	}
	return out, nil
}

// Sample reads every field of one GPU.
func (s *nvmlSource) Sample(ctx context.Context, index int) (gpu.Sample, error) {
	if err := ctx.Err(); err != nil {
		return gpu.Sample{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return gpu.Sample{}, gpu.ErrClosed
	}
	if index < 0 || index >= len(s.devs) {
		return gpu.Sample{}, fmt.Errorf("sample gpu %d: %w", index, gpu.ErrNoDevice)
	}
	r := reader{h: s.devs[index].h}
	smp := gpu.BlankSample(time.Now())
	h := r.h

	if v, ret := h.GetClockInfo(nvml.CLOCK_SM); r.ok(ret) {
		smp.SMClockMHz = float64(v)
	}
	if v, ret := h.GetClockInfo(nvml.CLOCK_MEM); r.ok(ret) {
		smp.MemClockMHz = float64(v)
	}
	if v, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); r.ok(ret) {
		smp.TempC = float64(v)
	}
	s.readFields(index, &r, &smp)
	if v, ret := h.GetPowerUsage(); r.ok(ret) {
		smp.PowerW = float64(v) / 1000 // mW
	}
	if u, ret := h.GetUtilizationRates(); r.ok(ret) {
		smp.UtilGPU, smp.UtilMem = float64(u.Gpu), float64(u.Memory)
	}
	if _, used, free, ok := s.memory(h); ok {
		smp.FBUsedMiB, smp.FBFreeMiB = used, free
		r.any = true
	}
	switch {
	case s.has.eventReasons:
		if v, ret := h.GetCurrentClocksEventReasons(); r.ok(ret) {
			smp.ClockEventReasons, smp.HasClockEventReasons = v, true
		}
	case s.has.throttleReasons:
		if v, ret := h.GetCurrentClocksThrottleReasons(); r.ok(ret) {
			smp.ClockEventReasons, smp.HasClockEventReasons = v, true
		}
	}
	if r.lost {
		return gpu.Sample{}, fmt.Errorf("sample gpu %d: %w", index, gpu.ErrGPULost)
	}
	if !r.any && r.err != nil {
		// Nothing at all answered: not a missing feature but a failure.
		return gpu.Sample{}, fmt.Errorf("sample gpu %d: %w", index, r.err)
	}
	return smp, nil
}

// readFields reads the scalar readings of GPU index into smp in one
// nvmlDeviceGetFieldValues call rather than one call each: every NVML call
// is an ioctl into the driver. (HBM temperature has no call of its own
// anyway.) The energy counter is among them only every EnergyInterval. A
// field the GPU does not report stays NaN.
func (s *nvmlSource) readFields(index int, r *reader, smp *gpu.Sample) {
	now := s.now()
	s.energyMu.Lock()
	last := s.energy[index]
	s.energyMu.Unlock()
	readEnergy := last.at.IsZero() || now.Sub(last.at) >= EnergyInterval
	if !readEnergy && last.ok {
		smp.EnergyMJ = last.mj
	}
	ids := make([]uint32, 0, 6)
	if readEnergy {
		ids = append(ids, nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION)
	}
	ids = append(ids, nvml.FI_DEV_MEMORY_TEMP, nvml.FI_DEV_PCIE_REPLAY_COUNTER)
	if s.has.remappedRows {
		// Field ids the driver does not know would fail one by one; a
		// driver without the row-remapping call has none of its fields.
		ids = append(ids, nvml.FI_DEV_REMAPPED_COR, nvml.FI_DEV_REMAPPED_UNC, nvml.FI_DEV_REMAPPED_FAILURE)
	}
	fv := make([]nvml.FieldValue, len(ids))
	for i, id := range ids {
		fv[i].FieldId = id
	}
	if !r.ok(r.h.GetFieldValues(fv)) {
		return
	}
	// A read that answered is remembered whether or not the GPU has the
	// counter, so either way it is asked again only after the interval.
	read := energyReading{at: now}
	for _, f := range fv {
		if !r.ok(nvml.Return(f.NvmlReturn)) {
			continue
		}
		v, ok := fieldFloat(f)
		if !ok {
			continue
		}
		switch f.FieldId {
		case nvml.FI_DEV_MEMORY_TEMP:
			smp.MemTempC = v
		case nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION:
			smp.EnergyMJ = v
			read.mj, read.ok = v, true
		case nvml.FI_DEV_PCIE_REPLAY_COUNTER:
			smp.PCIeReplays = v
		case nvml.FI_DEV_REMAPPED_COR:
			smp.RemappedCorrectable = v
		case nvml.FI_DEV_REMAPPED_UNC:
			smp.RemappedUncorrectable = v
		case nvml.FI_DEV_REMAPPED_FAILURE:
			smp.RemapFailure = 0
			if v != 0 {
				smp.RemapFailure = 1
			}
		}
	}
	if readEnergy {
		s.energyMu.Lock()
		s.energy[index] = read
		s.energyMu.Unlock()
	}
}

// reader tracks the outcome of the calls of one sample: whether any
// succeeded, whether the GPU was reported lost, and the first real error.
type reader struct {
	h    nvml.Device
	any  bool
	lost bool
	err  error
}

// ok reports whether ret is SUCCESS. Unsupported fields, missing symbols
// and missing permission are quietly "not available"; a lost GPU is
// remembered; anything else is kept as the sample's error in case nothing
// answers.
func (r *reader) ok(ret nvml.Return) bool {
	switch ret {
	case nvml.SUCCESS:
		r.any = true
		return true
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_NO_PERMISSION, nvml.ERROR_NO_DATA:
	case nvml.ERROR_GPU_IS_LOST:
		r.lost = true
	default:
		if r.err == nil {
			r.err = errors.New("nvml: " + ret.Error())
		}
	}
	return false
}

// fieldFloat decodes a field value by its declared type (native byte
// order: the union is filled in by the C library on this machine).
func fieldFloat(fv nvml.FieldValue) (float64, bool) {
	b := fv.Value
	u32 := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	u64 := uint64(u32) | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	switch nvml.ValueType(fv.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(u64), true
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(u32), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(u64), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(u64)), true
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(u32)), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(uint16(u32)), true
	}
	return 0, false
}

// Close shuts NVML down once, after every call in flight has returned.
func (s *nvmlSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shut nvml down: %v", ret)
	}
	return nil
}
