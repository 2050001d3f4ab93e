package agent

import (
	"bytes"
	"math"

	"github.com/gpuchaos/gpuchaos/internal/gpu"
	"github.com/gpuchaos/gpuchaos/internal/textformat"
)

// gpuMetric is one dcgm-exporter field the agent exports, with its type
// and help as dcgm-exporter's default counter list gives them (in our
// words) and how to read it off a sample in dcgm-exporter's unit.
type gpuMetric struct {
	name, typ, help string
	value           func(s *gpu.Sample) float64
}

// gpuMetrics are exported in this order. DCGM_FI_DEV_XID_ERRORS is not
// here: it comes from RecordXID, not from the sample.
var gpuMetrics = [...]gpuMetric{
	{"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", func(s *gpu.Sample) float64 { return s.SMClockMHz }},
	{"DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", func(s *gpu.Sample) float64 { return s.MemClockMHz }},
	{"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", func(s *gpu.Sample) float64 { return s.TempC }},
	{"DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", func(s *gpu.Sample) float64 { return s.MemTempC }},
	{"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", func(s *gpu.Sample) float64 { return s.PowerW }},
	{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", func(s *gpu.Sample) float64 { return s.EnergyMJ }},
	{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", func(s *gpu.Sample) float64 { return s.PCIeReplays }},
	{"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", func(s *gpu.Sample) float64 { return s.UtilGPU }},
	{"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", func(s *gpu.Sample) float64 { return s.UtilMem }},
	{"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", func(s *gpu.Sample) float64 { return s.FBFreeMiB }},
	{"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", func(s *gpu.Sample) float64 { return s.FBUsedMiB }},
	{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors.", func(s *gpu.Sample) float64 { return s.RemappedCorrectable }},
	{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors.", func(s *gpu.Sample) float64 { return s.RemappedUncorrectable }},
	{"DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed.", func(s *gpu.Sample) float64 { return s.RemapFailure }},
}

const xidMetric = "DCGM_FI_DEV_XID_ERRORS"

// exposition renders the page from the newest pass and the event state.
func (a *Agent) exposition() []byte {
	var b bytes.Buffer
	// About 3 KB a GPU with dcgm-exporter's labels (23.6 KB for 8 on the
	// twin): growing once up front spares the copies of doubling.
	b.Grow(4096 + 3072*len(a.devs))
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, m := range gpuMetrics {
		header := false
		for i := range a.devs {
			if !a.present[i] {
				continue
			}
			v := m.value(&a.latest[i])
			if math.IsNaN(v) {
				continue // not reported by this GPU or driver
			}
			if !header {
				textformat.WriteHeader(&b, m.name, m.typ, m.help)
				header = true
			}
			textformat.WriteSample(&b, m.name, a.labels[i], v)
		}
	}
	header := false
	for i := range a.devs {
		if !a.present[i] {
			continue
		}
		if !header {
			textformat.WriteHeader(&b, xidMetric, "gauge", "Value of the last XID error encountered.")
			header = true
		}
		textformat.WriteSample(&b, xidMetric, a.labels[i], a.xidLast[i])
	}

	textformat.WriteHeader(&b, "gpuchaos_agent_info", "gauge", "The gpuchaos agent serving this page; always 1.")
	textformat.WriteSample(&b, "gpuchaos_agent_info", textformat.Labels("version", a.version, "source", a.srcName, "Hostname", a.host), 1)
	textformat.WriteHeader(&b, "gpuchaos_agent_missed_ticks_total", "counter", "Sampling ticks the agent missed because a pass overran.")
	textformat.WriteSample(&b, "gpuchaos_agent_missed_ticks_total", "", float64(a.missed.Load()))
	writeFamily(&b, "gpuchaos_active_faults", "gauge", "Faults gpuchaos has injected and not yet recovered; 1 while active.", a.active, func(bool) float64 { return 1 })
	writeFamily(&b, "gpuchaos_injections_total", "counter", "Injections gpuchaos made on this node, by fault.", a.injections, ident)
	writeFamily(&b, "gpuchaos_xid_events_total", "counter", "XID errors seen in the kernel log, by GPU and code.", a.xids, ident)
	writeFamily(&b, "gpuchaos_burn_tflops", "gauge", "Throughput of the last GPU burn (in TFLOP/s).", a.burnTFLOPs, ident)
	writeFamily(&b, "gpuchaos_burn_errors_total", "counter", "Mismatches the burn's silent-data-corruption check found.", a.burnErrors, ident)
	writeFamily(&b, "gpuchaos_numa_misaligned", "gauge", "1 when a GPU process may run on CPUs off its GPU's NUMA node or keeps most of its memory off it, else 0.", a.numa.misaligned, ident)
	writeFamily(&b, "gpuchaos_numa_remote_memory_ratio", "gauge", "Share of a GPU process's resident memory off its GPU's NUMA node.", a.numa.remoteMemory, ident)
	writeFamily(&b, "gpuchaos_numa_remote_cpu_ratio", "gauge", "Share of the CPUs a GPU process may run on that are off its GPU's NUMA node.", a.numa.remoteCPU, ident)
	return b.Bytes()
}

func ident(v float64) float64 { return v }

// writeFamily writes one metric whose series are keyed by rendered labels;
// an empty family is left out entirely.
func writeFamily[V any](b *bytes.Buffer, name, typ, help string, m map[string]V, value func(V) float64) {
	if len(m) == 0 {
		return
	}
	textformat.WriteHeader(b, name, typ, help)
	for _, k := range sortedKeys(m) {
		textformat.WriteSample(b, name, k, value(m[k]))
	}
}
