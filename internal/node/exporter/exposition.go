package exporter

import (
	"math"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuchaos/gpuchaos/internal/node/exposition"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
)

// gpuMetric is one dcgm-exporter field the agent exports, with its type
// and help as dcgm-exporter's default counter list gives them (in our
// words) and how to read it off a sample in dcgm-exporter's unit.
type gpuMetric struct {
	name  string
	typ   dto.MetricType
	help  string
	value func(s *gpu.Sample) float64
}

// gpuMetrics are exported in this order. DCGM_FI_DEV_XID_ERRORS is not
// here: it comes from RecordXID, not from the sample.
var gpuMetrics = [...]gpuMetric{
	{"DCGM_FI_DEV_SM_CLOCK", exposition.Gauge, "SM clock frequency (in MHz).", func(s *gpu.Sample) float64 { return s.SMClockMHz }},
	{"DCGM_FI_DEV_MEM_CLOCK", exposition.Gauge, "Memory clock frequency (in MHz).", func(s *gpu.Sample) float64 { return s.MemClockMHz }},
	{"DCGM_FI_DEV_GPU_TEMP", exposition.Gauge, "GPU temperature (in C).", func(s *gpu.Sample) float64 { return s.TempC }},
	{"DCGM_FI_DEV_MEMORY_TEMP", exposition.Gauge, "Memory temperature (in C).", func(s *gpu.Sample) float64 { return s.MemTempC }},
	{"DCGM_FI_DEV_POWER_USAGE", exposition.Gauge, "Power draw (in W).", func(s *gpu.Sample) float64 { return s.PowerW }},
	{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", exposition.Counter, "Total energy consumption since boot (in mJ).", func(s *gpu.Sample) float64 { return s.EnergyMJ }},
	{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", exposition.Counter, "Total number of PCIe retries.", func(s *gpu.Sample) float64 { return s.PCIeReplays }},
	{"DCGM_FI_DEV_GPU_UTIL", exposition.Gauge, "GPU utilization (in %).", func(s *gpu.Sample) float64 { return s.UtilGPU }},
	{"DCGM_FI_DEV_MEM_COPY_UTIL", exposition.Gauge, "Memory utilization (in %).", func(s *gpu.Sample) float64 { return s.UtilMem }},
	{"DCGM_FI_DEV_FB_FREE", exposition.Gauge, "Framebuffer memory free (in MiB).", func(s *gpu.Sample) float64 { return s.FBFreeMiB }},
	{"DCGM_FI_DEV_FB_USED", exposition.Gauge, "Framebuffer memory used (in MiB).", func(s *gpu.Sample) float64 { return s.FBUsedMiB }},
	{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", exposition.Counter, "Number of remapped rows for correctable errors.", func(s *gpu.Sample) float64 { return s.RemappedCorrectable }},
	{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", exposition.Counter, "Number of remapped rows for uncorrectable errors.", func(s *gpu.Sample) float64 { return s.RemappedUncorrectable }},
	{"DCGM_FI_DEV_ROW_REMAP_FAILURE", exposition.Gauge, "Whether remapping of rows has failed.", func(s *gpu.Sample) float64 { return s.RemapFailure }},
}

const xidMetric = "DCGM_FI_DEV_XID_ERRORS"

// gather builds the page from the newest pass and the event state.
func (a *Agent) gather() []*dto.MetricFamily {
	var b exposition.Builder
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, m := range gpuMetrics {
		b.Family(m.name, m.help, m.typ)
		for i := range a.devs {
			if !a.present[i] {
				continue
			}
			v := m.value(&a.latest[i])
			if math.IsNaN(v) {
				continue // not reported by this GPU or driver
			}
			b.Add(a.labels[i], v)
		}
	}
	b.Family(xidMetric, "Value of the last XID error encountered.", exposition.Gauge)
	for i := range a.devs {
		if a.present[i] {
			b.Add(a.labels[i], a.xidLast[i])
		}
	}

	b.Family("gpuchaos_agent_info", "The gpuchaos agent serving this page; always 1.", exposition.Gauge)
	b.Add(a.info, 1)
	b.Family("gpuchaos_agent_missed_ticks_total", "Sampling ticks the agent missed because a pass overran.", exposition.Counter)
	b.Add(nil, float64(a.missed.Load()))
	b.Vec("gpuchaos_active_faults", "Faults gpuchaos has injected and not yet recovered; 1 while active.", exposition.Gauge, a.active)
	b.Vec("gpuchaos_injections_total", "Injections gpuchaos made on this node, by fault.", exposition.Counter, a.injections)
	b.Vec("gpuchaos_xid_events_total", "XID errors seen in the kernel log, by GPU and code.", exposition.Counter, a.xids)
	b.Vec("gpuchaos_burn_tflops", "Throughput of the last GPU burn (in TFLOP/s).", exposition.Gauge, a.burnTFLOPs)
	b.Vec("gpuchaos_burn_errors_total", "Mismatches the burn's silent-data-corruption check found.", exposition.Counter, a.burnErrors)
	if n := a.numa; n.misaligned != nil {
		b.Vec("gpuchaos_numa_misaligned", "1 when a GPU process may run on CPUs off its GPU's NUMA node or keeps most of its memory off it, else 0.", exposition.Gauge, n.misaligned)
		b.Vec("gpuchaos_numa_remote_memory_ratio", "Share of a GPU process's resident memory off its GPU's NUMA node.", exposition.Gauge, n.remoteMemory)
		b.Vec("gpuchaos_numa_remote_cpu_ratio", "Share of the CPUs a GPU process may run on that are off its GPU's NUMA node.", exposition.Gauge, n.remoteCPU)
	}
	return b.Families()
}
