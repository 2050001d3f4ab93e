package twin

import (
	"fmt"
	"slices"
	"strings"
)

// GPUModel is the datasheet of one GPU model as the twin uses it. Figures are
// public numbers; where a figure is an engineering estimate the comment on
// the preset says so.
type GPUModel struct {
	// Name is the preset's key in a cluster spec (H200).
	Name string `json:"name" yaml:"name"`
	// ModelName is the name nvidia-smi and dcgm-exporter print
	// (the modelName label).
	ModelName string `json:"modelName" yaml:"modelName"`
	// MemoryMiB is the framebuffer size as nvidia-smi reports it.
	MemoryMiB float64 `json:"memoryMiB" yaml:"memoryMiB"`
	// TDPWatts is the default power limit; IdleWatts the draw with no work.
	TDPWatts  float64 `json:"tdpWatts" yaml:"tdpWatts"`
	IdleWatts float64 `json:"idleWatts" yaml:"idleWatts"`
	// BaseSMClockMHz and MaxSMClockMHz bound the SM clock; MemClockMHz is
	// the fixed memory clock.
	BaseSMClockMHz float64 `json:"baseSMClockMHz" yaml:"baseSMClockMHz"`
	MaxSMClockMHz  float64 `json:"maxSMClockMHz" yaml:"maxSMClockMHz"`
	MemClockMHz    float64 `json:"memClockMHz" yaml:"memClockMHz"`
	// SlowdownCelsius is where the driver starts cutting clocks;
	// ShutdownCelsius where it would power the GPU off.
	SlowdownCelsius float64 `json:"slowdownCelsius" yaml:"slowdownCelsius"`
	ShutdownCelsius float64 `json:"shutdownCelsius" yaml:"shutdownCelsius"`
	// NVLinks is the number of NVLink links; NVLinkGBps the per-GPU total
	// NVLink bandwidth, both directions, as NVIDIA quotes it.
	NVLinks    int     `json:"nvlinks" yaml:"nvlinks"`
	NVLinkGBps float64 `json:"nvlinkGBps" yaml:"nvlinkGBps"`
	// PeakBF16TFLOPs is dense bf16 tensor throughput (no sparsity).
	PeakBF16TFLOPs float64 `json:"peakBF16TFLOPs" yaml:"peakBF16TFLOPs"`
	// ThermalResistance (°C per W) sets the equilibrium temperature,
	// ambient + power × resistance. It lumps heatsink, airflow or cold plate
	// together; the presets are chosen so that a training load at 25 °C
	// ambient settles in the 60–70 °C band operators see.
	ThermalResistance float64 `json:"thermalResistance" yaml:"thermalResistance"`
}

// Presets returns the GPU model presets by name, fresh on every call so
// callers may modify the result.
func Presets() map[string]GPUModel {
	return map[string]GPUModel{
		// A100 SXM4 80GB. NVIDIA A100 datasheet: 80 GB HBM2e, 400 W,
		// 312 TFLOP/s dense bf16, NVLink3 12 links / 600 GB/s; boost
		// 1410 MHz, base 1095 MHz, memory 1593 MHz as nvidia-smi reports;
		// slowdown 89 °C and shutdown 92 °C as `nvidia-smi -q` prints on
		// SXM4 boards. Idle draw (~60 W) is an observed figure, not a spec.
		"A100": {Name: "A100", ModelName: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920,
			TDPWatts: 400, IdleWatts: 60, BaseSMClockMHz: 1095, MaxSMClockMHz: 1410, MemClockMHz: 1593,
			SlowdownCelsius: 89, ShutdownCelsius: 92, NVLinks: 12, NVLinkGBps: 600,
			PeakBF16TFLOPs: 312, ThermalResistance: 0.1},
		// H100 SXM5 80GB. NVIDIA H100 datasheet: 80 GB HBM3, up to 700 W,
		// 989 TFLOP/s dense bf16, NVLink4 18 links / 900 GB/s; boost
		// 1980 MHz, base 1590 MHz, memory 2619 MHz; thresholds as on
		// A100 (nvidia-smi -q on HGX H100 boards). Memory size is what
		// nvidia-smi reports (81559 MiB).
		"H100": {Name: "H100", ModelName: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
			TDPWatts: 700, IdleWatts: 75, BaseSMClockMHz: 1590, MaxSMClockMHz: 1980, MemClockMHz: 2619,
			SlowdownCelsius: 89, ShutdownCelsius: 92, NVLinks: 18, NVLinkGBps: 900,
			PeakBF16TFLOPs: 989, ThermalResistance: 0.0615},
		// H200 SXM 141GB. NVIDIA H200 datasheet: 141 GB HBM3e
		// (nvidia-smi: 143771 MiB), 700 W, same GH100 die and clocks as
		// H100 (max SM 1980 MHz), HBM3e memory clock 3201 MHz, NVLink4
		// 18 links / 900 GB/s, 989 TFLOP/s dense bf16 (DESIGN.md §5
		// measured 768–872 in practice). At 25 °C ambient a training
		// load of ~650 W settles near 65 °C with this resistance.
		"H200": {Name: "H200", ModelName: "NVIDIA H200", MemoryMiB: 143771,
			TDPWatts: 700, IdleWatts: 75, BaseSMClockMHz: 1590, MaxSMClockMHz: 1980, MemClockMHz: 3201,
			SlowdownCelsius: 89, ShutdownCelsius: 92, NVLinks: 18, NVLinkGBps: 900,
			PeakBF16TFLOPs: 989, ThermalResistance: 0.0615},
		// B200 (HGX B200). NVIDIA HGX B200 figures: 180 GB HBM3e per GPU
		// usable (192 GB raw; nvidia-smi: 183359 MiB), 1000 W, NVLink5
		// 18 links / 1.8 TB/s, 2.25 PFLOP/s dense bf16. Clocks (max SM
		// 1965 MHz, memory 3996 MHz) and thresholds are estimates from
		// early boards; treat them as approximate.
		"B200": {Name: "B200", ModelName: "NVIDIA B200", MemoryMiB: 183359,
			TDPWatts: 1000, IdleWatts: 140, BaseSMClockMHz: 1200, MaxSMClockMHz: 1965, MemClockMHz: 3996,
			SlowdownCelsius: 87, ShutdownCelsius: 92, NVLinks: 18, NVLinkGBps: 1800,
			PeakBF16TFLOPs: 2250, ThermalResistance: 0.042},
	}
}

// Preset returns the named GPU model preset (case-insensitive).
func Preset(name string) (GPUModel, error) {
	ps := Presets()
	if m, ok := ps[strings.ToUpper(name)]; ok {
		return m, nil
	}
	names := make([]string, 0, len(ps))
	for k := range ps {
		names = append(names, k)
	}
	slices.Sort(names)
	return GPUModel{}, fmt.Errorf("unknown GPU model %q (known: %s)", name, strings.Join(names, ", "))
}
