package gpu

import (
	"context"
	"errors"
	"math"
	"time"
)

// Errors callers branch on with errors.Is.
var (
	// ErrGPULost means the GPU has stopped answering: fallen off the bus,
	// or off the twin's bus. Its series must disappear, as dcgm-exporter's
	// do, rather than freeze at their last values.
	ErrGPULost = errors.New("gpu lost")
	// ErrNoDevice means no GPU has the asked index.
	ErrNoDevice = errors.New("no such gpu")
	// ErrUnavailable means the GPU library itself cannot be used here: the
	// NVIDIA driver's libnvidia-ml.so.1 is absent or did not initialise, or
	// the binary was built without cgo.
	ErrUnavailable = errors.New("gpu access unavailable")
	// ErrClosed means the Source has been closed.
	ErrClosed = errors.New("gpu source closed")
)

// Device is what does not change while a GPU is up: how to name it.
type Device struct {
	// Index is NVML's index (nvidia-smi's), dcgm-exporter's gpu label.
	Index int `json:"index"`
	// UUID is GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
	UUID string `json:"uuid"`
	// PCI is the bus id as NVML and dcgm-exporter print it,
	// 00000000:18:00.0 (eight hex digits of domain).
	PCI string `json:"pci_bus_id"`
	// Name is the product name, dcgm-exporter's modelName label.
	Name string `json:"name"`
	// MemoryTotalMiB is the framebuffer size.
	MemoryTotalMiB float64 `json:"memory_total_mib"`
	// NUMANode is the host NUMA node closest to the GPU, -1 when unknown.
	NUMANode int `json:"numa_node"`
}

// Sample is one reading of a GPU's telemetry, in dcgm-exporter's units. A
// float field the GPU does not report is NaN.
type Sample struct {
	// Time is when the reading was taken (for the twin: when its exporter
	// scraped).
	Time time.Time `json:"time"`

	// SMClockMHz and MemClockMHz are the current clocks (MHz).
	SMClockMHz  float64 `json:"sm_clock_mhz"`
	MemClockMHz float64 `json:"mem_clock_mhz"`
	// TempC is the GPU core temperature, MemTempC the HBM's (°C).
	TempC    float64 `json:"temp_c"`
	MemTempC float64 `json:"mem_temp_c"`
	// PowerW is the power draw (W).
	PowerW float64 `json:"power_w"`
	// EnergyMJ is the energy consumed since the driver loaded (mJ).
	EnergyMJ float64 `json:"energy_mj"`
	// UtilGPU is the share of time a kernel ran and UtilMem the share of
	// time memory was read or written, over the driver's last sample
	// period (%).
	UtilGPU float64 `json:"util_gpu_pct"`
	UtilMem float64 `json:"util_mem_pct"`
	// FBUsedMiB and FBFreeMiB are framebuffer memory in use and free
	// (MiB); memory the driver reserves counts as neither where the
	// driver says how much it reserves, as in nvidia-smi.
	FBUsedMiB float64 `json:"fb_used_mib"`
	FBFreeMiB float64 `json:"fb_free_mib"`
	// PCIeReplays counts PCIe replays since the driver loaded.
	PCIeReplays float64 `json:"pcie_replays"`
	// RemappedCorrectable and RemappedUncorrectable count HBM rows
	// remapped for correctable and uncorrectable errors; RemapFailure is 1
	// when remapping has failed, 0 when not.
	RemappedCorrectable   float64 `json:"remapped_correctable"`
	RemappedUncorrectable float64 `json:"remapped_uncorrectable"`
	RemapFailure          float64 `json:"remap_failure"`

	// ClockEventReasons is NVML's bit mask of why the clocks are held
	// down (nvmlClocksEventReason*, formerly throttle reasons), valid only
	// when HasClockEventReasons is set.
	ClockEventReasons    uint64 `json:"clock_event_reasons"`
	HasClockEventReasons bool   `json:"has_clock_event_reasons"`
}

// BlankSample returns a sample with every float field missing (NaN), so a
// source fills in only what it can read.
func BlankSample(t time.Time) Sample {
	nan := math.NaN()
	return Sample{
		Time: t, SMClockMHz: nan, MemClockMHz: nan, TempC: nan, MemTempC: nan,
		PowerW: nan, EnergyMJ: nan, UtilGPU: nan, UtilMem: nan,
		FBUsedMiB: nan, FBFreeMiB: nan, PCIeReplays: nan,
		RemappedCorrectable: nan, RemappedUncorrectable: nan, RemapFailure: nan,
	}
}

// Source reads the GPUs of one node.
//
// Contract: all methods are safe for concurrent use. Devices and Sample
// block for as long as the driver takes (NVML answers in about a
// millisecond per field; a hung driver may take much longer) and return
// ctx.Err() when ctx ends before they start; they never leave anything
// running behind. Devices lists every GPU the source knows, including one
// that is lost (it is still in the machine). Sample returns ErrNoDevice
// for an index Devices did not list and an error wrapping ErrGPULost for
// a GPU that has stopped answering; a field the GPU does not support is
// missing from the sample, not an error. Close releases the library; it is
// idempotent, and every call after it returns ErrClosed.
type Source interface {
	Devices(ctx context.Context) ([]Device, error)
	Sample(ctx context.Context, index int) (Sample, error)
	Close() error
}
