package catalog

import (
	"fmt"
	"unicode"

	"github.com/gpuchaos/gpuchaos/internal/model/xid"
)

// nvlinkDownFactor is the share of NVLink bandwidth left to intra-node
// collectives when the links are down and NCCL falls back to PCIe and host
// memory: 28 of 301 GB/s bus bandwidth measured on 2× H200 with P2P disabled
// (DESIGN.md §5), which is the path NCCL takes without NVLink.
const nvlinkDownFactor = 0.09

// maxComm is the longest process name the kernel keeps (TASK_COMM_LEN less
// the terminating NUL), so the longest a driver line can carry.
const maxComm = 15

// hardwareFaults are DCGM-style hardware faults (strategy 1 of the talk).
// Their honest limit: an injector can write the driver's kernel line or fill
// DCGM's cache, but neither reaches NVML, which asks the hardware itself;
// only the twin plays all layers at once.
func hardwareFaults() []*Fault {
	all5 := func() []Layer {
		return []Layer{LayerKernelLog, LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload}
	}
	return []*Fault{
		{
			ID:      "hardware.xid",
			Family:  FamilyHardware,
			Summary: "An XID error of any code in the XID table, with that code's consequence",
			Scope:   ScopeGPU,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "code", Type: ParamInt, Default: "13", Min: "1", Help: "XID code; must be in the XID table"},
				{Name: "pid", Type: ParamInt, Default: "-1", Min: "-1", Help: "pid the line names; -1 prints pid='<unknown>' as the driver does when no channel owns the error"},
				{Name: "process", Type: ParamString, Default: "", Help: "process name the line names, at most 15 bytes (the kernel's limit); empty prints <unknown>"},
			},
			Detectable: all5(),
			Mechanisms: []Mechanism{
				kernelLogLineMechanism("the NVRM line of the chosen code", LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload),
				dcgmInjectMechanism("DCGM_FI_DEV_XID_ERRORS (field 230) set to the code", LayerKernelLog, LayerNVML, LayerWorkload),
			},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_XID_ERRORS"},
				Logs:     []string{xidLog(13), xidLog(31), xidLog(79)},
				Workload: "Follows the code's action: restart-app codes (13, 31, 43) kill the CUDA context of the process on that GPU; reset-gpu codes leave the GPU unusable until it is reset; 79 removes the GPU; none and investigate codes leave the job running.",
				Effects:  func(v Values) []Effect { return []Effect{{Kind: EffectXID, Code: int(v.Int("code"))}} },
			},
			Check: checkXID,
		},
		{
			ID:      "hardware.ecc-sbe-storm",
			Family:  FamilyHardware,
			Summary: "A storm of corrected single-bit ECC errors in HBM (XID 92 once the rate is high)",
			Scope:   ScopeGPU,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "rate", Type: ParamFloat, Default: "200", Min: "1", Max: "1000000", Unit: "errors/min", Help: "single-bit errors per minute; above 100/min the driver reports XID 92"},
			},
			Detectable: []Layer{LayerKernelLog, LayerNVML, LayerDCGM, LayerExporterMetrics},
			Mechanisms: []Mechanism{
				dcgmInjectMechanism("a rising DCGM_FI_DEV_ECC_SBE_VOL_TOTAL (field 310) and its aggregate", LayerKernelLog, LayerNVML),
				kernelLogMechanism("(high single-bit error rate)", LayerNVML, LayerDCGM, LayerExporterMetrics),
			},
			Signature: Signature{
				// The ECC counters are opt-in in dcgm-exporter's default
				// counter file; a rule on them needs them switched on.
				Series:   []string{"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_XID_ERRORS"},
				XID:      92,
				Workload: "Nothing: the errors are corrected. A storm is an early sign of failing HBM and of row remaps to come.",
				Effects:  func(v Values) []Effect { return []Effect{{Kind: EffectECC, Value: v.Float("rate")}} },
			},
		},
		{
			ID:      "hardware.ecc-dbe",
			Family:  FamilyHardware,
			Summary: "Uncorrectable double-bit ECC errors in HBM (XID 48); the job on the GPU crashes",
			Scope:   ScopeGPU,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "count", Type: ParamInt, Default: "1", Min: "1", Max: "1000", Unit: "errors", Help: "double-bit errors to raise"},
			},
			Detectable: all5(),
			Mechanisms: []Mechanism{
				dcgmInjectMechanism("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL (field 311) raised by count and XID 48 in field 230", LayerKernelLog, LayerNVML, LayerWorkload),
				kernelLogMechanism("", LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload),
			},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "DCGM_FI_DEV_XID_ERRORS"},
				XID:      48,
				Workload: "The process using the GPU dies with 'uncorrectable ECC error encountered'; the GPU needs a reset before it is used again.",
				Effects:  func(v Values) []Effect { return []Effect{{Kind: EffectECC, Code: int(v.Int("count"))}} },
			},
		},
		{
			ID:         "hardware.row-remap-pending",
			Family:     FamilyHardware,
			Summary:    "An HBM row marked for remapping (XID 63); the remap takes effect at the next GPU reset",
			Scope:      ScopeGPU,
			Safety:     SafetyDisruptive,
			Detectable: []Layer{LayerKernelLog, LayerNVML, LayerDCGM, LayerExporterMetrics},
			Mechanisms: []Mechanism{
				dcgmInjectMechanism("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS (field 393) raised by one and the remap-pending field (396) set", LayerKernelLog, LayerNVML),
				kernelLogMechanism("", LayerNVML, LayerDCGM, LayerExporterMetrics),
			},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_XID_ERRORS"},
				XID:      63,
				Workload: "Nothing now; the GPU should be reset at the next drain so the remap takes effect.",
				Effects:  fixedEffects(Effect{Kind: EffectRowRemap, Mode: "pending"}),
			},
		},
		{
			ID:         "hardware.row-remap-failure",
			Family:     FamilyHardware,
			Summary:    "HBM row remapping failed (XID 64): no spare rows left; the job crashes and the GPU needs a reset",
			Scope:      ScopeGPU,
			Safety:     SafetyDisruptive,
			Detectable: all5(),
			Mechanisms: []Mechanism{
				dcgmInjectMechanism("DCGM_FI_DEV_ROW_REMAP_FAILURE (field 395) set to 1 and the uncorrectable remapped rows (field 394) raised", LayerKernelLog, LayerNVML, LayerWorkload),
				kernelLogMechanism("", LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload),
			},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_XID_ERRORS"},
				XID:      64,
				Workload: "The process on the GPU dies with an uncorrectable ECC error; after a reset the GPU is still suspect and belongs in the red tier.",
				Effects:  fixedEffects(Effect{Kind: EffectRowRemap, Mode: "failure"}),
			},
		},
		{
			ID:      "hardware.thermal-throttle",
			Family:  FamilyHardware,
			Summary: "Failed cooling: the GPU heats past its slowdown temperature and throttles its clocks",
			Scope:   ScopeGPU,
			Safety:  SafetyDisruptive,
			Params: []Param{
				// The default, 8, is cooling so far gone (a failed fan wall, a
				// blocked inlet) that a loaded H200 stays at its slowdown
				// temperature (89 °C, nvidia-smi -q "GPU Slowdown Temp" on
				// HGX H100/H200) even at half clock: the HW thermal slowdown
				// holds, at least halving the SM clock as nvml.h defines it
				// ("reducing the core clocks by a factor of 2 or more",
				// go-nvml v0.13.4-1 pkg/nvml/nvml.h), and power falls to
				// about 130 W. Factors from about 2 to 6.9 cross the
				// slowdown temperature once, engage the HW slowdown briefly
				// and then settle under the SW thermal slowdown near 89 °C
				// with the clock cut by a fifth.
				{Name: "factor", Type: ParamFloat, Default: "8", Min: "1", Max: "10", Unit: "x", Help: "multiplier of the GPU's thermal resistance (a failed fan or blocked airflow); 8 holds a loaded H200 in HW thermal slowdown at half clock or less, about 2.5 takes it just past its slowdown temperature"},
			},
			Detectable: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload},
			Mechanisms: []Mechanism{
				{
					Name: "burn-heat", Planned: targetsLocalK8s(), Safety: SafetyDisruptive,
					Reaches: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload},
					Description: "Heats the GPU with a full SM burn beside the job under a temperature ceiling. Cooling is unchanged, " +
						"so a well-cooled GPU may settle below its slowdown temperature; the burn itself also takes SMs from the job.",
				},
				{
					Name: "dcgm-inject", Planned: targetsLocalK8s(), Safety: SafetyDisruptive,
					Reaches: []Layer{LayerDCGM, LayerExporterMetrics},
					Misses:  []Layer{LayerNVML, LayerWorkload},
					Description: "Writes a high DCGM_FI_DEV_GPU_TEMP (field 150) and a low SM clock into DCGM's cache with dcgmi test --inject. " +
						"dcgm-exporter reports them; NVML and the job see a cool, fast GPU.",
				},
				{
					Name: "nvml-clock-lock", Planned: targetsLocalK8s(), Safety: SafetyHardwareRisk,
					Reaches: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload},
					Description: "Locks the SM clock at the GPU's thermal-slowdown clock with nvmlDeviceSetGpuLockedClocks and restores it on recovery. " +
						"Clocks and step time change as in a real throttle, temperature does not.",
				},
				{
					Name: "nvml-fan-speed", Planned: targetsLocalK8s(), Safety: SafetyHardwareRisk,
					Reaches: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload},
					Description: "Sets the GPU's fans to their minimum with nvmlDeviceSetFanSpeed_v2 and hands them back to the driver on recovery. " +
						"Only boards with their own fans (PCIe cards); SXM modules are cooled by the chassis and refuse.",
				},
			},
			Signature: Signature{
				// THERMAL_VIOLATION is opt-in in dcgm-exporter.
				Series:   []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_THERMAL_VIOLATION", seriesJobStepSeconds},
				Workload: "Steps slow as the SM clock drops; in a synchronous job every rank waits for the throttled one.",
				Effects:  func(v Values) []Effect { return []Effect{{Kind: EffectCooling, Factor: v.Float("factor")}} },
			},
		},
		{
			ID:      "hardware.power-brake",
			Family:  FamilyHardware,
			Summary: "A power brake or cap: the GPU may draw only a fraction of its TDP and clocks drop to fit",
			Scope:   ScopeGPU,
			Safety:  SafetyHardwareRisk,
			Params: []Param{
				{Name: "fraction", Type: ParamFloat, Default: "0.5", Min: "0.05", Max: "1", Unit: "of TDP", Help: "allowed power as a fraction of the board's TDP"},
			},
			Detectable: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload},
			Mechanisms: []Mechanism{
				{
					Name: "nvml-power-limit", Planned: targetsLocalK8s(), Safety: SafetyHardwareRisk,
					Reaches: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload},
					Description: "Lowers the power limit with nvmlDeviceSetPowerManagementLimit to fraction × TDP, clamped to the board's minimum " +
						"limit, and restores the previous limit on recovery.",
				},
				{
					Name: "dcgm-inject", Planned: targetsLocalK8s(), Safety: SafetyDisruptive,
					Reaches: []Layer{LayerDCGM, LayerExporterMetrics},
					Misses:  []Layer{LayerNVML, LayerWorkload},
					Description: "Writes a capped DCGM_FI_DEV_POWER_USAGE (field 155), a lower SM clock and a growing power-violation counter " +
						"into DCGM's cache; the GPU and the job run at full power.",
				},
			},
			Signature: Signature{
				// POWER_VIOLATION is opt-in in dcgm-exporter.
				Series:   []string{"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_POWER_VIOLATION", seriesJobStepSeconds},
				Workload: "Steps slow in proportion to the lost clock; nothing fails.",
				Effects: func(v Values) []Effect {
					return []Effect{{Kind: EffectPowerCap, Mode: "brake", Factor: v.Float("fraction")}}
				},
			},
		},
		{
			ID:         "hardware.nvlink-down",
			Family:     FamilyHardware,
			Summary:    "The GPU's NVLinks go down (XID 74); collectives fall back to PCIe at about a tenth of the bandwidth",
			Scope:      ScopeGPU,
			Safety:     SafetyDisruptive,
			Detectable: all5(),
			Mechanisms: []Mechanism{
				dcgmInjectMechanism("NVLink link states down, a flat DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL and XID 74 in field 230", LayerKernelLog, LayerNVML, LayerWorkload),
				kernelLogMechanism("", LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload),
				{
					Name: "nvlink-reset", Planned: targetsLocal(), Safety: SafetyHardwareRisk,
					Reaches: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload},
					Misses:  []Layer{LayerKernelLog},
					Description: "Resets the GPU with NVLink disabled in the driver (NVreg_NvLinkDisable=1), so the links really are down and NCCL " +
						"really falls back; needs the GPU idle. No XID 74 line is written, because no link failed.",
				},
			},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", seriesJobStepSeconds, seriesJobStepRate},
				XID:      74,
				Workload: "Intra-node collectives run about ten times slower; a job whose NCCL communicator was built over NVLink may instead fail with a transport error.",
				Effects:  fixedEffects(Effect{Kind: EffectNVLink, Mode: "down", Factor: nvlinkDownFactor, Code: 74}),
			},
		},
		{
			ID:      "hardware.nvlink-errors",
			Family:  FamilyHardware,
			Summary: "NVLink CRC and replay errors on the GPU's links; bandwidth holds, the link is degrading",
			Scope:   ScopeGPU,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "rate", Type: ParamFloat, Default: "60", Min: "1", Max: "1000000", Unit: "errors/min", Help: "CRC errors per minute across the GPU's links"},
			},
			Detectable: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics},
			Mechanisms: []Mechanism{
				dcgmInjectMechanism("rising NVLink CRC flit, CRC data and replay error counters", LayerNVML),
			},
			Signature: Signature{
				// Every NVLink error counter is opt-in in dcgm-exporter.
				Series:   []string{"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"},
				Workload: "Nothing visible: replays cost little bandwidth. A rising rate foretells a link going down.",
				Effects:  func(v Values) []Effect { return []Effect{{Kind: EffectNVLink, Mode: "errors", Value: v.Float("rate")}} },
			},
		},
		{
			ID:      "hardware.fallen-off-bus",
			Family:  FamilyHardware,
			Summary: "The GPU falls off the PCIe bus (XID 79): it is gone until the node reboots",
			Scope:   ScopeGPU,
			Safety:  SafetyDisruptive,
			// The device plugin's health check marks the GPU unhealthy, so
			// the node's allocatable GPUs drop in the API too.
			Detectable: []Layer{LayerKernelLog, LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload, LayerK8sAPI},
			// A real disappearance would need a PCIe remove or a link
			// disable, which risks the hardware and the node; there is
			// deliberately no such mechanism.
			Mechanisms: []Mechanism{
				kernelLogMechanism("", LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload, LayerK8sAPI),
				dcgmInjectMechanism("XID 79 in DCGM_FI_DEV_XID_ERRORS (field 230)", LayerKernelLog, LayerNVML, LayerWorkload, LayerK8sAPI),
			},
			Signature: Signature{
				// These series stop: every series of the GPU disappears.
				Series:   []string{"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", seriesJobUp, seriesJobRestartsTotal},
				XID:      79,
				Workload: "The job crashes (CUDA error: unspecified launch failure or GPU is lost) and cannot restart on the node until it reboots; nvidia-smi reports 'Unable to determine the device handle'.",
				Effects:  fixedEffects(Effect{Kind: EffectOffBus}),
			},
		},
		{
			ID:         "hardware.gsp-timeout",
			Family:     FamilyHardware,
			Summary:    "The GPU System Processor stops answering RPCs (XID 119); the GPU needs a reset",
			Scope:      ScopeGPU,
			Safety:     SafetyDisruptive,
			Detectable: all5(),
			Mechanisms: []Mechanism{
				kernelLogMechanism("", LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload),
				dcgmInjectMechanism("XID 119 in DCGM_FI_DEV_XID_ERRORS (field 230)", LayerKernelLog, LayerNVML, LayerWorkload),
			},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_XID_ERRORS", seriesJobUp, seriesJobRestartsTotal},
				XID:      119,
				Workload: "CUDA and NVML calls hang or fail; the job dies and cannot use the GPU until it is reset.",
			},
		},
	}
}

// kernelLogMechanism writes the driver's line of the fault's XID
// (Signature.XID) to /dev/kmsg. It reaches whatever reads the kernel log —
// syslog and journald watchers, node-problem-detector, our XID watcher —
// and nothing else: the driver, NVML and DCGM never hear of it. note, when
// not empty, qualifies "the XID N line" in the description, which
// completeXID writes once the code is known. misses lists the fault's
// other detectable layers.
func kernelLogMechanism(note string, misses ...Layer) Mechanism {
	m := kernelLogLineMechanism("", misses...)
	m.xidNote = note
	return m
}

// kernelLogLineMechanism is the kernel-log mechanism of a fault whose line
// is not one fixed code (hardware.xid's is a parameter); what names it in
// the description.
func kernelLogLineMechanism(what string, misses ...Layer) Mechanism {
	m := Mechanism{
		Name: MechanismKernelLog, Targets: targetsLocalK8s(), Safety: SafetyDisruptive,
		Reaches: []Layer{LayerKernelLog},
		Misses:  misses,
	}
	if what != "" {
		m.Description = kernelLogDescription(what)
	}
	return m
}

// kernelLogDescription is the description of a kernel-log mechanism that
// writes what.
func kernelLogDescription(what string) string {
	return "Writes " + what + " to /dev/kmsg in the driver's exact format (root needed). Kernel-log readers " +
		"(journald and syslog watchers, node-problem-detector, gpuchaos' XID watcher) see it; NVML, DCGM and the job do not."
}

// dcgmInjectMechanism writes values into DCGM's field cache. dcgm-exporter
// reads that cache, so its metrics move too; the hardware, NVML, the driver's
// log and the job do not change. misses lists the fault's other layers.
func dcgmInjectMechanism(what string, misses ...Layer) Mechanism {
	return Mechanism{
		Name: "dcgm-inject", Planned: targetsLocalK8s(), Safety: SafetyDisruptive,
		Reaches: []Layer{LayerDCGM, LayerExporterMetrics},
		Misses:  misses,
		Description: "Injects " + what + " into DCGM's cache with dcgmi test --inject. DCGM and dcgm-exporter, which reads " +
			"DCGM's cache, report it; the driver, NVML and the job see nothing.",
	}
}

// checkXID accepts only codes the XID table knows, because the twin plays a
// code by its table action and the line by its table text, and a process
// name the kernel could have printed: the name goes into a kernel log line,
// so a control character would forge a second line.
func checkXID(v Values) error {
	code := v.Int("code")
	if _, ok := xid.Lookup(int(code)); !ok {
		return &ParamError{Param: "code", Err: fmt.Errorf("XID code %d is not a known XID", code)}
	}
	name := v.String("process")
	if len(name) > maxComm {
		return &ParamError{Param: "process", Err: fmt.Errorf("%q is longer than the kernel's %d-byte process name", name, maxComm)}
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return &ParamError{Param: "process", Err: fmt.Errorf("%q contains a character that is not printable", name)}
		}
	}
	return nil
}
