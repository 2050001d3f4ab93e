package twin

import (
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// A fleet watches its GPUs through one or more exporters, each with its own
// names, labels and units for the same NVML readings. The twin exports
// dcgm-exporter's DCGM_FI_* series always (ExporterSpec.Counters); the other
// GPU exporters are dialects, exported from the same simulated state only
// when the spec declares them (ExporterSpec.Exporters), so that a rule over
// dcgm_* or nvidia_smi_* is evaluated rather than reading nothing, and a run
// that declares none costs what it did before.

// Exporter names the twin knows, as internal/detect/rules' registry
// (rules/exporters/exporters.csv) spells them; a test holds the two lists
// equal. The twin does not import internal/detect/rules: the registry is data for
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
	// The rest of a kube-prometheus stack: known by name, so a spec may
	// declare them, but the twin models none of their series (they watch
	// the monitoring, not the GPUs).
	ExporterAlertmanager       = "alertmanager"
	ExporterPrometheusOperator = "prometheus-operator"
	ExporterGrafana            = "grafana"
)

// Exporters returns the exporter names ExporterSpec.Exporters accepts, in
// the registry's order.
func Exporters() []string {
	return []string{ExporterDCGM, ExporterDCGM1x, ExporterNVIDIAGPU, ExporterNVIDIAGPUProm,
		ExporterKubeStateMetrics, ExporterNode, ExporterGPUOperator, ExporterGPUChaos, ExporterPrometheus,
		ExporterAlertmanager, ExporterPrometheusOperator, ExporterGrafana}
}

// DefaultExporters returns what a fleet runs when its spec names no
// exporters: the registry's declared ones (a test holds them equal to
// rules.DefaultExporters). None of them is a dialect, so a default twin
// exports what it always did.
func DefaultExporters() []string {
	return []string{ExporterDCGM, ExporterKubeStateMetrics, ExporterNode, ExporterGPUChaos, ExporterPrometheus,
		ExporterAlertmanager, ExporterPrometheusOperator, ExporterGrafana}
}

// dialect is one GPU exporter's view of the twin's GPUs.
type dialect struct {
	name string
	// labels are one GPU's labels in this exporter.
	labels func(g *gpu) series.Labels
	// gpu are the per-GPU series, each in the exporter's own unit.
	gpu []dialectMetric
	// node are the exporter's own series, one per node it runs on;
	// cluster are series of which a cluster has one.
	node    []nodeMetric
	cluster []clusterMetric
	// notModelled maps each metric of the exporter's registry rows
	// (rules/metrics/*.csv) that the twin does not export to why not.
	notModelled map[string]string
}

// dialectMetric is one per-GPU series of a dialect.
type dialectMetric struct {
	name  string
	value func(g *gpu) float64
	// labels, when set, replace the dialect's labels (an info series).
	labels func(g *gpu) series.Labels
}

// clusterMetric is one series a cluster-wide component exports, read at
// the scrape's time in Unix milliseconds.
type clusterMetric struct {
	name  string
	value func(t *Twin, ts int64) float64
}

// nodeMetric is one series an exporter exports about itself on a node;
// value reads it at the scrape's time in Unix milliseconds.
type nodeMetric struct {
	name   string
	labels func(n *node) series.Labels
	value  func(t *Twin, n *node, ts int64) float64
}

// dialects returns the dialect of every exporter that has one, by name.
func dialects() map[string]*dialect {
	dcgm := map[string]gpuMetric{}
	for _, m := range allGPUMetrics() {
		dcgm[m.name] = m
	}
	return map[string]*dialect{
		ExporterDCGM1x:        dcgm1x(dcgm),
		ExporterNVIDIAGPU:     nvidiaSMI(dcgm),
		ExporterNVIDIAGPUProm: mindprince(),
		ExporterGPUOperator:   gpuOperator(),
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
		{"dcgm_enc_utilization", "DCGM_FI_DEV_ENC_UTIL"},
		{"dcgm_dec_utilization", "DCGM_FI_DEV_DEC_UTIL"},
	}
	d := &dialect{
		name: ExporterDCGM1x,
		labels: func(g *gpu) series.Labels {
			return labels("gpu", strconv.Itoa(g.index), "uuid", g.uuid, "pci_bus_id", g.pci,
				"device", deviceName(g.index), "modelName", g.model.ModelName, "Hostname", g.node.name)
		},
	}
	for _, a := range alias {
		m, ok := dcgm[a.field]
		if !ok {
			panic("twin: dcgm-exporter-1.x alias of unknown field " + a.field)
		}
		d.gpu = append(d.gpu, dialectMetric{name: a.name, value: m.value})
	}
	return d
}

// dialectSeries is one exported dialect series of a GPU.
type dialectSeries struct {
	value func(g *gpu) float64
	s     *series.Series
}

// nodeDialectSeries is one exported dialect series of a node, or of the
// cluster when n is nil.
type nodeDialectSeries struct {
	n       *node
	value   func(t *Twin, n *node, ts int64) float64
	cluster func(t *Twin, ts int64) float64
	s       *series.Series
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
			if len(d.gpu) == 0 {
				break
			}
			ls := d.labels(g)
			for _, m := range d.gpu {
				l := ls
				if m.labels != nil {
					l = m.labels(g)
				}
				g.dialect = append(g.dialect, dialectSeries{value: m.value, s: s.add(m.name, l)})
			}
		}
		for _, n := range t.nodes {
			for _, m := range d.node {
				s.nodeDialect = append(s.nodeDialect, nodeDialectSeries{n: n, value: m.value, s: s.add(m.name, m.labels(n))})
			}
		}
		for _, m := range d.cluster {
			s.nodeDialect = append(s.nodeDialect, nodeDialectSeries{cluster: m.value, s: s.add(m.name, nil)})
		}
	}
}

// scrapeNodeDialects samples the declared exporters' node and cluster
// series.
func (t *Twin) scrapeNodeDialects(ts int64) {
	for _, d := range t.store.nodeDialect {
		if d.n == nil {
			d.s.Append(ts, d.cluster(t, ts))
			continue
		}
		d.s.Append(ts, d.value(t, d.n, ts))
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

// nvidia_gpu_exporter (github.com/utkuozdemir/nvidia_gpu_exporter) turns
// nvidia-smi's query fields into nvidia_smi_* gauges labelled by uuid, in
// base units: [MHz] becomes _clock_hz, [MiB] _bytes, [%] a _ratio and [us]
// _seconds (internal/exporter/exporter.go), "Active"/"Enabled" 1, and the
// uuid is lower case without nvidia-smi's "GPU-" prefix
// (internal/nvidiasmi/computeapps.go). Values and label sets follow the
// H200 captures internal/integration/testdata/linux-x86_64__nvidia-h200__
// 590.48.01__{idle,load}.metrics, all at commit e656cd81a180.
const (
	nvidiaSMIPort = "9835" // the exporter's default --web.listen-address
	mib           = 1 << 20
	hz            = 1e6 // per MHz
	// The captured driver and CUDA versions, for nvidia_smi_gpu_info.
	nvidiaSMIDriver = "590.48.01"
	nvidiaSMICUDA   = "13.1"
	// maxOperatingBelowSlowdown: nvidia-smi's temperature.gpu.tlimit is
	// the margin to the board's maximum operating temperature, 87 °C in
	// both H200 captures (52 + 35 under load, 28 + 59 idle), 2 °C below
	// the preset's slowdown; the presets have no figure of their own, so
	// every model takes the same offset.
	maxOperatingBelowSlowdown = 2.0
)

// computeCap is each preset's CUDA compute capability (sm_80, sm_90,
// sm_100), as nvidia-smi's compute_cap prints it.
var computeCap = map[string]string{"A100": "8.0", "H100": "9.0", "H200": "9.0", "B200": "10.0"}

// nvidiaSMIUUID is the uuid label: lower case, without "GPU-".
func nvidiaSMIUUID(g *gpu) string { return strings.TrimPrefix(strings.ToLower(g.uuid), "gpu-") }

// powerLimit is nvidia-smi's power.limit: the software cap an operator or
// a fault set; the hardware power brake leaves it alone.
func (g *gpu) powerLimit() float64 {
	if g.mods.powerBrake {
		return g.model.TDPWatts
	}
	return math.Round(g.model.TDPWatts*g.mods.powerCap*100) / 100
}

// liveGPUs counts a node's GPUs nvidia-smi still lists.
func (n *node) liveGPUs() float64 {
	c := 0.0
	for _, g := range n.gpus {
		if !g.mods.offBus {
			c++
		}
	}
	return c
}

func nvidiaSMI(dcgm map[string]gpuMetric) *dialect {
	temp := dcgm["DCGM_FI_DEV_GPU_TEMP"].value
	memTemp := dcgm["DCGM_FI_DEV_MEMORY_TEMP"].value
	power := func(g *gpu) float64 { return math.Round(g.readPower()*100) / 100 }
	const p = "nvidia_smi_"
	instance := func(n *node) string { return n.name + ":" + nvidiaSMIPort }
	bit := func(b uint64) func(g *gpu) float64 { return func(g *gpu) float64 { return b2f(g.reasons&b != 0) } }
	counter := func(b uint64) func(g *gpu) float64 {
		i := bits.TrailingZeros64(b)
		return func(g *gpu) float64 { return math.Floor(g.reasonUs[i]) / 1e6 }
	}
	constant := func(v float64) func(*gpu) float64 { return func(*gpu) float64 { return v } }
	d := &dialect{
		name: ExporterNVIDIAGPU,
		// Prometheus adds instance when it scrapes; the twin adds it
		// here, as the exporter's own series carry no other label that
		// tells one node's from another's.
		labels: func(g *gpu) series.Labels { return labels("uuid", nvidiaSMIUUID(g), "instance", instance(g.node)) },
		gpu: []dialectMetric{
			{name: p + "clocks_current_graphics_clock_hz", value: func(g *gpu) float64 { return g.readSMClock() * hz }},
			{name: p + "clocks_current_sm_clock_hz", value: func(g *gpu) float64 { return g.readSMClock() * hz }},
			{name: p + "clocks_current_memory_clock_hz", value: func(g *gpu) float64 { return g.model.MemClockMHz * hz }},
			{name: p + "clocks_max_graphics_clock_hz", value: func(g *gpu) float64 { return g.model.MaxSMClockMHz * hz }},
			{name: p + "clocks_max_sm_clock_hz", value: func(g *gpu) float64 { return g.model.MaxSMClockMHz * hz }},
			{name: p + "clocks_max_memory_clock_hz", value: func(g *gpu) float64 { return g.model.MemClockMHz * hz }},
			{name: p + "clocks_event_reasons_active", value: func(g *gpu) float64 { return float64(g.reasons) }},
			// Every bit NVML defines, as on the H200 capture.
			{name: p + "clocks_event_reasons_supported", value: constant(1<<reasonBits - 1)},
			{name: p + "clocks_event_reasons_gpu_idle", value: bit(reasonGPUIdle)},
			{name: p + "clocks_event_reasons_applications_clocks_setting", value: bit(reasonAppClocks)},
			{name: p + "clocks_event_reasons_sw_power_cap", value: bit(reasonSWPowerCap)},
			{name: p + "clocks_event_reasons_hw_slowdown", value: bit(reasonHWSlowdown)},
			{name: p + "clocks_event_reasons_sync_boost", value: bit(reasonSyncBoost)},
			{name: p + "clocks_event_reasons_sw_thermal_slowdown", value: bit(reasonSWThermal)},
			{name: p + "clocks_event_reasons_hw_thermal_slowdown", value: bit(reasonHWThermal)},
			{name: p + "clocks_event_reasons_hw_power_brake_slowdown", value: bit(reasonPowerBrakeHW)},
			{name: p + "clocks_event_reasons_counters_sw_power_cap_seconds", value: counter(reasonSWPowerCap)},
			{name: p + "clocks_event_reasons_counters_sync_boost_seconds", value: counter(reasonSyncBoost)},
			{name: p + "clocks_event_reasons_counters_sw_thermal_slowdown_seconds", value: counter(reasonSWThermal)},
			{name: p + "clocks_event_reasons_counters_hw_thermal_slowdown_seconds", value: counter(reasonHWThermal)},
			{name: p + "clocks_event_reasons_counters_hw_power_brake_slowdown_seconds", value: counter(reasonPowerBrakeHW)},
			{name: p + "power_draw_watts", value: power},
			{name: p + "power_draw_instant_watts", value: power},
			{name: p + "power_draw_average_watts", value: power},
			{name: p + "power_limit_watts", value: (*gpu).powerLimit},
			{name: p + "enforced_power_limit_watts", value: (*gpu).powerLimit},
			{name: p + "power_default_limit_watts", value: func(g *gpu) float64 { return g.model.TDPWatts }},
			{name: p + "power_max_limit_watts", value: func(g *gpu) float64 { return g.model.TDPWatts }},
			// NVML's total energy in mJ, which the exporter reads in J.
			{name: p + "energy_joules_total", value: func(g *gpu) float64 { return math.Floor(g.energyJ*1000) / 1000 }},
			{name: p + "memory_total_bytes", value: func(g *gpu) float64 { return g.model.MemoryMiB * mib }},
			{name: p + "memory_reserved_bytes", value: func(g *gpu) float64 { return reservedMiB * mib }},
			{name: p + "memory_used_bytes", value: func(g *gpu) float64 { return math.Ceil(g.fbUsedMiB()) * mib }},
			{name: p + "memory_free_bytes", value: func(g *gpu) float64 {
				return math.Floor(g.model.MemoryMiB-reservedMiB-g.fbUsedMiB()) * mib
			}},
			{name: p + "temperature_gpu", value: temp},
			{name: p + "temperature_memory", value: memTemp},
			{name: p + "temperature_gpu_tlimit", value: func(g *gpu) float64 {
				return g.model.SlowdownCelsius - maxOperatingBelowSlowdown - temp(g)
			}},
			{name: p + "utilization_gpu_ratio", value: func(g *gpu) float64 { return g.readUtil() / 100 }},
			{name: p + "utilization_memory_ratio", value: func(g *gpu) float64 { return math.Round(g.copyUtil) / 100 }},
			// The twin's ECC faults are HBM errors, which nvidia-smi counts
			// as device memory (dram on Hopper) and in the total.
			{name: p + "ecc_errors_corrected_volatile_total", value: func(g *gpu) float64 { return math.Floor(g.sbeVol) }},
			{name: p + "ecc_errors_corrected_volatile_dram", value: func(g *gpu) float64 { return math.Floor(g.sbeVol) }},
			{name: p + "ecc_errors_corrected_volatile_device_memory", value: func(g *gpu) float64 { return math.Floor(g.sbeVol) }},
			{name: p + "ecc_errors_corrected_aggregate_total", value: func(g *gpu) float64 { return math.Floor(g.sbeAgg) }},
			{name: p + "ecc_errors_corrected_aggregate_dram", value: func(g *gpu) float64 { return math.Floor(g.sbeAgg) }},
			{name: p + "ecc_errors_corrected_aggregate_device_memory", value: func(g *gpu) float64 { return math.Floor(g.sbeAgg) }},
			{name: p + "ecc_errors_uncorrected_volatile_total", value: func(g *gpu) float64 { return g.dbeVol }},
			{name: p + "ecc_errors_uncorrected_volatile_dram", value: func(g *gpu) float64 { return g.dbeVol }},
			{name: p + "ecc_errors_uncorrected_volatile_device_memory", value: func(g *gpu) float64 { return g.dbeVol }},
			{name: p + "ecc_errors_uncorrected_aggregate_total", value: func(g *gpu) float64 { return g.dbeAgg }},
			{name: p + "ecc_errors_uncorrected_aggregate_dram", value: func(g *gpu) float64 { return g.dbeAgg }},
			{name: p + "ecc_errors_uncorrected_aggregate_device_memory", value: func(g *gpu) float64 { return g.dbeAgg }},
			{name: p + "ecc_mode_current", value: constant(1)},
			{name: p + "ecc_mode_pending", value: constant(1)},
			// A training job uses neither the encoders nor the decoders.
			{name: p + "utilization_encoder_ratio", value: func(*gpu) float64 { return 0 }},
			{name: p + "utilization_decoder_ratio", value: func(*gpu) float64 { return 0 }},
			{name: p + "remapped_rows_correctable", value: func(g *gpu) float64 { return g.corrRemap }},
			{name: p + "remapped_rows_uncorrectable", value: func(g *gpu) float64 { return g.uncorrRemap }},
			{name: p + "remapped_rows_pending", value: func(g *gpu) float64 { return b2f(g.mods.remapPending || g.uncPending) }},
			{name: p + "remapped_rows_failure", value: func(g *gpu) float64 { return b2f(g.mods.remapFailure) }},
			{name: p + "pcie_throughput_tx_bytes_per_second", value: func(g *gpu) float64 { return math.Round(g.pcieTx) }},
			{name: p + "pcie_throughput_rx_bytes_per_second", value: func(g *gpu) float64 { return math.Round(g.pcieRx) }},
			// nvmlDeviceGetGpuRecoveryAction: 1 is GPU reset; the twin's
			// XIDs that need more (a reboot) take the GPU off the bus.
			{name: p + "gpu_recovery_action", value: func(g *gpu) float64 { return b2f(g.mods.resetPending) }},
			// The job's process and, with a co-tenant fault, the other one.
			{name: p + "compute_apps", value: func(g *gpu) float64 {
				return b2f(g.job != nil && g.job.processAlive()) + b2f(g.mods.smLoad > 0 || g.mods.vramFrac > 0)
			}},
			{name: p + "index", value: func(g *gpu) float64 { return float64(g.index) }},
			{name: p + "count", value: func(g *gpu) float64 { return g.node.liveGPUs() }},
			{name: p + "compute_cap", value: func(g *gpu) float64 {
				v, _ := strconv.ParseFloat(computeCap[g.model.Name], 64)
				return math.Floor(v)
			}},
			{name: p + "persistence_mode", value: constant(1)},
			{name: p + "compute_mode", value: constant(0)},
			{name: p + "pstate", value: constant(0)},
			{name: p + "mig_mode_current", value: constant(0)},
			{name: p + "mig_mode_pending", value: constant(0)},
			{name: p + "gpu_info", value: constant(1), labels: func(g *gpu) series.Labels {
				return labels("uuid", nvidiaSMIUUID(g), "instance", instance(g.node), "name", g.model.ModelName,
					"index", strconv.Itoa(g.index), "pci_bus_id", g.pci, "compute_cap", computeCap[g.model.Name],
					"driver_version", nvidiaSMIDriver, "cuda_version", nvidiaSMICUDA,
					"driver_model_current", "[N/A]", "driver_model_pending", "[N/A]")
			}},
		},
		// The exporter's own health; a GPU off the bus drops out of
		// nvidia-smi's table while the collection succeeds (the upstream
		// NvidiaGpuMissing rule's description), so these stay healthy.
		node: []nodeMetric{
			{p + "command_exit_code", nodeLabels(instance), func(*Twin, *node, int64) float64 { return 0 }},
			{p + "last_collect_success", nodeLabels(instance), func(*Twin, *node, int64) float64 { return 1 }},
			{p + "compute_apps_last_collect_success", nodeLabels(instance), func(*Twin, *node, int64) float64 { return 1 }},
			{p + "failed_scrapes_total", nodeLabels(instance), func(*Twin, *node, int64) float64 { return 0 }},
			{p + "last_collect_success_timestamp_seconds", nodeLabels(instance), func(_ *Twin, _ *node, ts int64) float64 { return float64(ts) / 1000 }},
			// A modelling choice: one nvidia-smi query of eight GPUs
			// takes a few hundred milliseconds.
			{p + "last_collect_duration_seconds", nodeLabels(instance), func(*Twin, *node, int64) float64 { return 0.3 }},
		},
		notModelled: nvidiaSMINotModelled(),
	}
	return d
}

func nodeLabels(instance func(n *node) string) func(n *node) series.Labels {
	return func(n *node) series.Labels { return labels("instance", instance(n)) }
}

// nvidiaSMINotModelled says, for every nvidia_gpu_exporter metric of the
// registry the twin does not export, why not.
func nvidiaSMINotModelled() map[string]string {
	const p = "nvidia_smi_"
	out := map[string]string{}
	add := func(why string, names ...string) {
		for _, n := range names {
			out[p+n] = why
		}
	}
	throttle := "the name drivers before 535 print; the twin's driver (590, as in the H200 capture) prints clocks_event_reasons, which it exports"
	for _, n := range []string{"active", "supported", "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
		"sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
		"counters_sw_power_cap_seconds", "counters_sync_boost_seconds", "counters_sw_thermal_slowdown_seconds",
		"counters_hw_thermal_slowdown_seconds", "counters_hw_power_brake_slowdown_seconds"} {
		add(throttle, "clocks_throttle_reasons_"+n)
	}
	add("a board or driver constant the presets have no figure for, and no fault moves",
		"accounting_buffer_size", "accounting_mode", "c2c_mode", "display_active", "display_attached", "driver_version",
		"kmd_version", "gsp_mode_current", "gsp_mode_default", "inforom_ecc", "inforom_oem", "edpp_multiplier_ratio",
		"power_min_limit_watts", "serial", "platform_gpu_fabric_guid", "platform_host_id", "platform_module_id",
		"platform_slot_number", "platform_tray_index", "fabric_clique_id", "fabric_state",
		"pci_base_class", "pci_bus", "pci_device", "pci_device_id", "pci_domain", "pci_sub_class", "pci_sub_device_id")
	add("the presets carry no PCIe link generation or width, and no fault degrades the link",
		"pcie_link_gen_current", "pcie_link_gen_gpucurrent", "pcie_link_gen_gpumax", "pcie_link_gen_hostmax",
		"pcie_link_gen_max", "pcie_link_width_current", "pcie_link_width_max")
	add("the twin runs no video, JPEG or optical-flow work and models no video clock or encoder sessions (the encoder and decoder utilisation it exports, at 0)",
		"clocks_current_video_clock_hz", "utilization_jpeg_ratio",
		"utilization_ofa_ratio", "encoder_stats_average_fps", "encoder_stats_average_latency", "encoder_stats_session_count")
	add("Ampere and later GPUs remap rows instead of retiring pages: nvidia-smi prints [N/A] for retired_pages.* on every preset and the exporter drops the field",
		"retired_pages_single_bit_ecc_count", "retired_pages_double_bit_count", "retired_pages_pending")
	add("the twin's ECC faults are HBM errors; it models no SRAM error counts",
		"ecc_errors_corrected_aggregate_sram", "ecc_errors_corrected_volatile_sram", "ecc_errors_uncorrected_aggregate_sram",
		"ecc_errors_uncorrected_aggregate_sram_l2", "ecc_errors_uncorrected_aggregate_sram_mcu",
		"ecc_errors_uncorrected_aggregate_sram_other", "ecc_errors_uncorrected_aggregate_sram_parity",
		"ecc_errors_uncorrected_aggregate_sram_pcie", "ecc_errors_uncorrected_aggregate_sram_secded",
		"ecc_errors_uncorrected_aggregate_sram_sm", "ecc_errors_uncorrected_aggregate_sram_threshold_exceeded",
		"ecc_errors_uncorrected_volatile_sram", "ecc_errors_uncorrected_volatile_sram_parity",
		"ecc_errors_uncorrected_volatile_sram_secded")
	add("the twin counts remapped rows, not the banks' spare rows left or rows remapped before the last reset",
		"remapped_rows_correctable_inactive", "remapped_rows_uncorrectable_inactive", "remapped_rows_histogram_high",
		"remapped_rows_histogram_low", "remapped_rows_histogram_max", "remapped_rows_histogram_none",
		"remapped_rows_histogram_partial")
	add("the twin's GPUs run without MIG or confidential computing",
		"mig_info", "mig_memory_free_bytes", "mig_memory_reserved_bytes", "mig_memory_total_bytes", "mig_memory_used_bytes",
		"protected_memory_free_bytes", "protected_memory_total_bytes", "protected_memory_used_bytes")
	add("per-process series appear and vanish with each pid; the twin's series are fixed when it is built",
		"compute_app_info", "compute_app_used_memory_bytes")
	add("the nvml backend's XID event counters are off by default and appear per code on the first event; the twin's series are fixed when it is built",
		"xid_errors_total", "xid_last_timestamp_seconds")
	add("the nvml backend's status; the twin models the default nvidia-smi backend, which exports command_exit_code",
		"nvml_return_code")
	add("SXM boards have no fan: nvidia-smi prints [N/A] and the exporter drops the field", "fan_speed_ratio")
	add("a number the exporter parses out of the product name; the name is a label of nvidia_smi_gpu_info", "name")
	return out
}

// mindprince is github.com/mindprince/nvidia_gpu_prometheus_exporter
// (main.go at commit 0d52cd2): NVML read once a scrape, each GPU labelled
// minor_number, uuid (NVML's, with its GPU- prefix) and name, power in mW
// and memory in bytes from nvmlDeviceGetMemoryInfo, whose used figure
// includes the driver's reservation.
func mindprince() *dialect {
	const port = "9445" // its default --web.listen-address
	instance := func(n *node) string { return n.name + ":" + port }
	return &dialect{
		name: ExporterNVIDIAGPUProm,
		labels: func(g *gpu) series.Labels {
			return labels("minor_number", strconv.Itoa(g.index), "uuid", g.uuid, "name", g.model.ModelName, "instance", instance(g.node))
		},
		gpu: []dialectMetric{
			{name: "nvidia_gpu_temperature_celsius", value: func(g *gpu) float64 { return readTemp(g.temp, g.noise.temp) }},
			{name: "nvidia_gpu_duty_cycle", value: (*gpu).readUtil},
			{name: "nvidia_gpu_power_usage_milliwatts", value: func(g *gpu) float64 { return math.Round(g.readPower() * 1000) }},
			{name: "nvidia_gpu_memory_total_bytes", value: func(g *gpu) float64 { return g.model.MemoryMiB * mib }},
			{name: "nvidia_gpu_memory_used_bytes", value: func(g *gpu) float64 { return math.Ceil(g.fbUsedMiB()+reservedMiB) * mib }},
		},
		node: []nodeMetric{
			// nvmlDeviceGetCount still counts a GPU that fell off the
			// bus; the exporter then fails to read it and drops its
			// series, which go stale.
			{"nvidia_gpu_num_devices", nodeLabels(instance), func(t *Twin, n *node, _ int64) float64 { return float64(len(n.gpus)) }},
		},
		notModelled: map[string]string{
			"nvidia_gpu_fanspeed_percent": "SXM boards have no fan: NVML answers not supported and the exporter logs it and exports nothing",
		},
	}
}

// gpuOperator is the NVIDIA GPU Operator's series (github.com/NVIDIA/
// gpu-operator at a22dbf671f2e): the operator's own
// (controllers/operator_metrics.go), one per cluster, and the node-status
// exporter that nvidia-validator runs on every GPU node
// (cmd/nvidia-validator/metrics.go), labelled node. On a healthy node the
// barriers are open and validation passes; the twin has no fault that
// closes them. The device-plugin count is the node's nvidia.com/gpu
// capacity (countGPUResources in cmd/nvidia-validator/main.go): the
// kubelet keeps unhealthy devices in capacity and drops the resource when
// the plugin goes away, which the twin does at once where the kubelet
// waits out a grace period.
func gpuOperator() *dialect {
	nodeL := func(n *node) series.Labels { return labels("node", n.name) }
	one := func(*Twin, *node, int64) float64 { return 1 }
	devices := func(n *node) float64 {
		if n.mods.pluginKilled {
			return 0
		}
		return float64(len(n.gpus))
	}
	// The validator refreshes the success stamps every 30 s (plugin) and
	// 60 s (driver); a stamp holds while its check fails. Kept per twin:
	// dialects() is called once for each.
	pluginOK := map[*node]float64{}
	return &dialect{
		name: ExporterGPUOperator,
		node: []nodeMetric{
			{"gpu_operator_node_metrics_ready_ts_seconds", nodeL, func(t *Twin, n *node, _ int64) float64 { return float64(t.start.Unix()) }},
			{"gpu_operator_node_driver_ready", nodeL, one},
			{"gpu_operator_node_toolkit_ready", nodeL, one},
			{"gpu_operator_node_plugin_ready", nodeL, one},
			{"gpu_operator_node_cuda_ready", nodeL, one},
			{"gpu_operator_node_driver_validation", nodeL, one},
			{"gpu_operator_node_driver_validation_last_success_ts_seconds", nodeL, func(_ *Twin, _ *node, ts int64) float64 {
				return float64(ts / 60000 * 60)
			}},
			{"gpu_operator_node_device_plugin_devices_total", nodeL, func(t *Twin, n *node, _ int64) float64 { return devices(n) }},
			{"gpu_operator_node_device_plugin_validation_last_success_ts_seconds", nodeL, func(_ *Twin, n *node, ts int64) float64 {
				if devices(n) != 0 {
					pluginOK[n] = float64(ts / 30000 * 30)
				}
				return pluginOK[n]
			}},
		},
		cluster: []clusterMetric{
			{"gpu_operator_gpu_nodes_total", func(t *Twin, _ int64) float64 { return float64(len(t.nodes)) }},
			{"gpu_operator_reconciliation_status", func(*Twin, int64) float64 { return 1 }},
			{"gpu_operator_reconciliation_has_nfd_labels", func(*Twin, int64) float64 { return 1 }},
			{"gpu_operator_driver_auto_upgrade_enabled", func(*Twin, int64) float64 { return 0 }},
		},
		notModelled: gpuOperatorNotModelled(),
	}
}

func gpuOperatorNotModelled() map[string]string {
	out := map[string]string{}
	add := func(why string, names ...string) {
		for _, n := range names {
			out["gpu_operator_"+n] = why
		}
	}
	add("OpenShift's driver toolkit; the twin is a plain Kubernetes cluster",
		"openshift_driver_toolkit_enabled", "openshift_driver_toolkit_nfd_too_old", "openshift_driver_toolkit_imagestream_missing",
		"openshift_driver_toolkit_rhcos_tags_missing", "openshift_driver_toolkit_imagestream_broken")
	add("the twin runs no operator reconcile loop, so no count or time of reconciliations",
		"reconciliation_total", "reconciliation_failed_total", "reconciliation_last_success_ts_seconds")
	add("the twin models no driver upgrades",
		"nodes_upgrades_in_progress", "nodes_upgrades_done", "nodes_upgrades_failed", "nodes_upgrades_available", "nodes_upgrades_pending")
	add("lspci also lists the NVSwitches and bridges, which the presets do not count", "nvidia_pci_devices_total")
	return out
}
