package twin

import (
	"strconv"

	"github.com/gpuchaos/gpuchaos/internal/series"
)

// A fleet watches its GPUs through one or more exporters, each with its own
// names, labels and units for the same NVML readings. The twin exports
// dcgm-exporter's DCGM_FI_* series always (ExporterSpec.Counters); the other
// GPU exporters are dialects, exported from the same simulated state only
// when the spec declares them (ExporterSpec.Exporters), so that a rule over
// dcgm_* or nvidia_smi_* is evaluated rather than reading nothing, and a run
// that declares none costs what it did before.

// Exporter names the twin knows, as internal/rules' registry
// (rules/exporters/exporters.csv) spells them; a test holds the two lists
// equal. The twin does not import internal/rules: the registry is data for
// the static analysis, the twin a simulator.
const (
	ExporterDCGM             = "dcgm-exporter"
	ExporterDCGM1x           = "dcgm-exporter-1.x"
	ExporterNVIDIAGPU        = "nvidia_gpu_exporter"
	ExporterNVIDIAGPUProm    = "nvidia_gpu_prometheus_exporter"
	ExporterGPUOperator      = "gpu-operator"
	ExporterKubeStateMetrics = "kube-state-metrics"
	ExporterNode             = "node-exporter"
	ExporterGPUChaos         = "gpuchaos"
	ExporterPrometheus       = "prometheus"
)

// Exporters returns the exporter names ExporterSpec.Exporters accepts, in
// the registry's order.
func Exporters() []string {
	return []string{ExporterDCGM, ExporterDCGM1x, ExporterNVIDIAGPU, ExporterNVIDIAGPUProm,
		ExporterKubeStateMetrics, ExporterNode, ExporterGPUOperator, ExporterGPUChaos, ExporterPrometheus}
}

// DefaultExporters returns what a fleet runs when its spec names no
// exporters: the registry's declared ones (a test holds them equal to
// rules.DefaultExporters). None of them is a dialect, so a default twin
// exports what it always did.
func DefaultExporters() []string {
	return []string{ExporterDCGM, ExporterKubeStateMetrics, ExporterNode, ExporterGPUChaos, ExporterPrometheus}
}

// dialect is one GPU exporter's view of the twin's GPUs.
type dialect struct {
	name string
	// labels are one GPU's labels in this exporter.
	labels func(g *gpu) series.Labels
	// gpu are the per-GPU series, each in the exporter's own unit.
	gpu []gpuMetric
	// notModelled maps each metric of the exporter's registry rows
	// (rules/metrics/*.csv) that the twin does not export to why not.
	notModelled map[string]string
}

// dialects returns the dialect of every exporter that has one, by name.
func dialects() map[string]*dialect {
	dcgm := map[string]gpuMetric{}
	for _, m := range allGPUMetrics() {
		dcgm[m.name] = m
	}
	return map[string]*dialect{
		ExporterDCGM1x: dcgm1x(dcgm),
	}
}

// dcgm1x is dcgm-exporter run with --use-old-namespace and its
// etc/1.x-compatibility-metrics.csv: the dcgm_* names are DCGM's own
// lower-case tags for the same fields, so each reads what its DCGM_FI_*
// twin reads. In that mode the collector spells the UUID label "uuid"
// and keeps the others (internal/pkg/collector/gpu_collector.go, toMetric,
// at github.com/NVIDIA/dcgm-exporter commit d5e5f510a1b6). The Hostname
// label is as the twin's DCGM_FI_* series carry it: that same commit
// renames it to hostname in both namespaces, unreleased as of 4.5.3-4.8.2.
func dcgm1x(dcgm map[string]gpuMetric) *dialect {
	alias := []struct{ name, field string }{
		{"dcgm_sm_clock", "DCGM_FI_DEV_SM_CLOCK"},
		{"dcgm_memory_clock", "DCGM_FI_DEV_MEM_CLOCK"},
		{"dcgm_memory_temp", "DCGM_FI_DEV_MEMORY_TEMP"},
		{"dcgm_gpu_temp", "DCGM_FI_DEV_GPU_TEMP"},
		{"dcgm_power_usage", "DCGM_FI_DEV_POWER_USAGE"},
		{"dcgm_total_energy_consumption", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"},
		{"dcgm_fi_prof_pcie_tx_bytes", "DCGM_FI_PROF_PCIE_TX_BYTES"},
		{"dcgm_fi_prof_pcie_rx_bytes", "DCGM_FI_PROF_PCIE_RX_BYTES"},
		{"dcgm_pcie_replay_counter", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"},
		{"dcgm_gpu_utilization", "DCGM_FI_DEV_GPU_UTIL"},
		{"dcgm_mem_copy_utilization", "DCGM_FI_DEV_MEM_COPY_UTIL"},
		{"dcgm_xid_errors", "DCGM_FI_DEV_XID_ERRORS"},
		{"dcgm_fb_free", "DCGM_FI_DEV_FB_FREE"},
		{"dcgm_fb_used", "DCGM_FI_DEV_FB_USED"},
		{"dcgm_nvlink_bandwidth_total", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"},
		{"dcgm_fi_prof_gr_engine_active", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"},
		{"dcgm_fi_prof_pipe_tensor_active", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"},
		{"dcgm_fi_prof_dram_active", "DCGM_FI_PROF_DRAM_ACTIVE"},
	}
	d := &dialect{
		name: ExporterDCGM1x,
		labels: func(g *gpu) series.Labels {
			return labels("gpu", strconv.Itoa(g.index), "uuid", g.uuid, "pci_bus_id", g.pci,
				"device", deviceName(g.index), "modelName", g.model.ModelName, "Hostname", g.node.name)
		},
		notModelled: map[string]string{
			"dcgm_enc_utilization": "the twin runs no video encode work, and exports no DCGM_FI_DEV_ENC_UTIL either",
			"dcgm_dec_utilization": "the twin runs no video decode work, and exports no DCGM_FI_DEV_DEC_UTIL either",
		},
	}
	for _, a := range alias {
		m, ok := dcgm[a.field]
		if !ok {
			panic("twin: dcgm-exporter-1.x alias of unknown field " + a.field)
		}
		d.gpu = append(d.gpu, gpuMetric{name: a.name, value: m.value})
	}
	return d
}

// dialectSeries is one exported dialect series of a GPU.
type dialectSeries struct {
	value func(g *gpu) float64
	s     *series.Series
}

// initDialects creates the series of every declared dialect.
func (s *seriesStore) initDialects(t *Twin) {
	all := dialects()
	seen := map[string]bool{}
	for _, name := range t.spec.Exporter.Exporters {
		d := all[name]
		if d == nil || seen[name] {
			continue
		}
		seen[name] = true
		for _, g := range t.gpus {
			ls := d.labels(g)
			for _, m := range d.gpu {
				g.dialect = append(g.dialect, dialectSeries{value: m.value, s: s.add(m.name, ls)})
			}
		}
	}
}

// scrapeDialects samples a GPU's dialect series after its noise is drawn,
// so every exporter reads the same instant the same way.
func (g *gpu) scrapeDialects(ts int64) {
	for _, d := range g.dialect {
		d.s.Append(ts, d.value(g))
	}
}

// staleDialects marks a GPU's dialect series stale: one that fell off the
// bus is gone from NVML, so every exporter stops reporting it.
func (g *gpu) staleDialects(ts int64) {
	for _, d := range g.dialect {
		d.s.MarkStale(ts)
	}
}
