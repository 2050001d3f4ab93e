package live

import (
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuchaos/gpuchaos/internal/node/exposition"
)

// family is what the exposition says about a metric besides its samples.
type family struct {
	typ  dto.MetricType // exposition.Gauge or exposition.Counter
	help string
}

// describe returns the type and help of a metric, in our words. The types
// follow dcgm-exporter's default counter list (a DCGM field it lists as a
// counter is one here), kube-state-metrics and the Prometheus naming rule
// that a name ending in _total is a counter. Names not listed get a generic
// help line and are counters when they end in _total.
func describe(metric string) family {
	switch metric {
	case "DCGM_FI_DEV_SM_CLOCK":
		return family{exposition.Gauge, "SM clock frequency (in MHz)."}
	case "DCGM_FI_DEV_MEM_CLOCK":
		return family{exposition.Gauge, "Memory clock frequency (in MHz)."}
	case "DCGM_FI_DEV_GPU_TEMP":
		return family{exposition.Gauge, "GPU temperature (in C)."}
	case "DCGM_FI_DEV_MEMORY_TEMP":
		return family{exposition.Gauge, "Memory temperature (in C)."}
	case "DCGM_FI_DEV_POWER_USAGE":
		return family{exposition.Gauge, "Power draw (in W)."}
	case "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
		return family{exposition.Counter, "Energy consumed since boot (in mJ)."}
	case "DCGM_FI_DEV_PCIE_REPLAY_COUNTER":
		return family{exposition.Counter, "PCIe replays."}
	case "DCGM_FI_DEV_GPU_UTIL":
		return family{exposition.Gauge, "GPU utilisation (in %)."}
	case "DCGM_FI_DEV_MEM_COPY_UTIL":
		return family{exposition.Gauge, "Memory copy utilisation (in %)."}
	case "DCGM_FI_DEV_XID_ERRORS":
		return family{exposition.Gauge, "Code of the last XID error seen."}
	case "DCGM_FI_DEV_FB_FREE":
		return family{exposition.Gauge, "Free framebuffer memory (in MiB)."}
	case "DCGM_FI_DEV_FB_USED":
		return family{exposition.Gauge, "Used framebuffer memory (in MiB)."}
	case "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL":
		return family{exposition.Counter, "NVLink traffic over all lanes."}
	case "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS":
		return family{exposition.Counter, "Rows remapped for correctable errors."}
	case "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS":
		return family{exposition.Counter, "Rows remapped for uncorrectable errors."}
	case "DCGM_FI_DEV_ROW_REMAP_FAILURE":
		return family{exposition.Gauge, "Whether remapping rows has failed (1) or not (0)."}
	case "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
		return family{exposition.Gauge, "Fraction of time the graphics engine was active."}
	case "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE":
		return family{exposition.Gauge, "Fraction of cycles the tensor pipe was active."}
	case "DCGM_FI_PROF_DRAM_ACTIVE":
		return family{exposition.Gauge, "Fraction of cycles the memory interface was busy."}
	case "DCGM_FI_PROF_PCIE_TX_BYTES":
		return family{exposition.Gauge, "PCIe bytes transmitted per second."}
	case "DCGM_FI_PROF_PCIE_RX_BYTES":
		return family{exposition.Gauge, "PCIe bytes received per second."}
	case "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL":
		return family{exposition.Counter, "Single-bit ECC errors since the last driver load."}
	case "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL":
		return family{exposition.Counter, "Double-bit ECC errors since the last driver load."}
	case "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL":
		return family{exposition.Counter, "Single-bit ECC errors over the GPU's life."}
	case "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL":
		return family{exposition.Counter, "Double-bit ECC errors over the GPU's life."}
	case "DCGM_FI_DEV_POWER_VIOLATION":
		return family{exposition.Counter, "Time throttled by the power limit (in ns)."}
	case "DCGM_FI_DEV_THERMAL_VIOLATION":
		return family{exposition.Counter, "Time throttled by temperature (in ns)."}
	case "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL":
		return family{exposition.Counter, "NVLink flow-control CRC errors."}
	case "DCGM_FI_DEV_CLOCKS_EVENT_REASONS":
		return family{exposition.Gauge, "Bit mask of the reasons the clocks are held down."}
	case "kube_node_spec_unschedulable":
		return family{exposition.Gauge, "Whether the node is cordoned (1) or schedulable (0)."}
	case "kube_node_status_allocatable":
		return family{exposition.Gauge, "Resources of the node available to pods."}
	case "kube_node_status_condition":
		return family{exposition.Gauge, "Condition of the node."}
	case "gpuchaos_job_step_total":
		return family{exposition.Counter, "Training steps the job has kept (rolled-back steps are not counted)."}
	case "gpuchaos_job_steps_per_second":
		return family{exposition.Gauge, "Training steps computed per second over the last scrape interval."}
	case "gpuchaos_job_up":
		return family{exposition.Gauge, "Whether the training job is running (1) or down (0)."}
	case "gpuchaos_job_restarts_total":
		return family{exposition.Counter, "Restarts of the training job."}
	case "gpuchaos_job_last_checkpoint_step":
		return family{exposition.Gauge, "Step of the newest valid checkpoint."}
	case "gpuchaos_job_last_checkpoint_timestamp_seconds":
		return family{exposition.Gauge, "Time of the newest valid checkpoint (Unix seconds)."}
	case "gpuchaos_job_checkpoint_failures_total":
		return family{exposition.Counter, "Checkpoint writes that failed."}
	case "gpuchaos_job_resumed_from_step":
		return family{exposition.Gauge, "Step the job last resumed from."}
	case "gpuchaos_job_goodput_ratio":
		return family{exposition.Gauge, "Kept steps times the healthy step time over wall time."}
	case "gpuchaos_rank_step_seconds":
		return family{exposition.Gauge, "Compute time of the rank's last step (in seconds)."}
	}
	f := family{typ: exposition.Gauge, help: "Series " + metric + " of the gpuchaos twin."}
	if strings.HasSuffix(strings.ToLower(metric), "_total") {
		f.typ = exposition.Counter
	}
	return f
}
