package catalog

import "math"

// PCIe copy-storm model. The link figure is measured: `gpuchaos exhaust
// pcie` moved 55.4 GB/s host to device and 55.3 back over an H200's Gen5
// x16 link (docs/results/h200-2026-11-30-b.md). The copy share is an
// assumption: a data-loader-fed training step spends about a tenth of its
// time in host-to-device input copies that do not overlap compute.
const (
	pcieLinkBytesPerSecond = 55e9
	pcieCopyShareOfStep    = 0.1
	// pcieMaxTaken caps the share of the link the storm is modelled to
	// take: PCIe arbitrates fairly, so the job always keeps some.
	pcieMaxTaken = 0.9
)

// pcieSlowdown is the step-time factor of a copy storm of rate bytes per
// second: the job's copies get the link share the storm leaves, so their
// time grows by 1/(1-taken), and only the copy share of the step slows.
func pcieSlowdown(rate float64) float64 {
	taken := math.Min(rate/pcieLinkBytesPerSecond, pcieMaxTaken)
	return 1 + pcieCopyShareOfStep*(1/(1-taken)-1)
}

// ceilingParam is the temperature ceiling every burn obeys (DESIGN.md §7:
// burn and soak stop within two seconds of crossing it).
func ceilingParam(def string) Param {
	return Param{Name: "ceiling", Type: ParamInt, Default: def, Min: "40", Max: "95", Unit: "°C", Help: "GPU temperature at which the burn stops within two seconds"}
}

// exhaustionFaults take a resource from the job (strategy 2 of the talk). The
// mechanisms really consume the resource, so they reach every layer a real
// co-tenant would.
func exhaustionFaults() []*Fault {
	gpuLayers := func() []Layer {
		return []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload}
	}
	return []*Fault{
		{
			ID:      "exhaustion.sm-burn",
			Family:  FamilyExhaustion,
			Summary: "A co-tenant kernel keeps the GPU's SMs busy for a share of the time beside the job",
			Scope:   ScopeGPU,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "load", Type: ParamFloat, Default: "0.5", Min: "0.05", Max: "1", Unit: "of the time", Help: "share of the wall time the burn keeps every SM busy (its duty cycle)"},
				ceilingParam("85"),
			},
			Detectable: gpuLayers(),
			Mechanisms: []Mechanism{{
				Name: "burn", Targets: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: gpuLayers(),
				Description: "Runs `gpuchaos burn --duty load` on the GPU as a child process of gpuchaos: cuBLAS matrix products " +
					"(loaded through purego, no CUDA toolkit) on every SM, idling after each batch so that it burns load of the wall time " +
					"and GPU utilisation reads about load, each product checked bit for bit against a reference. It stops within two " +
					"seconds of the temperature ceiling and ends on its own shortly after the experiment; recovery stops the process " +
					"(SIGTERM, SIGKILL after 10 s).",
			}},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", seriesJobStepSeconds},
				Workload: "The rank's kernels share the SMs: its steps slow, and with them the whole synchronous job.",
				Effects:  func(v Values) []Effect { return []Effect{{Kind: EffectSMLoad, Value: v.Float("load")}} },
			},
		},
		{
			ID:      "exhaustion.vram",
			Family:  FamilyExhaustion,
			Summary: "A co-tenant holds most of the GPU's HBM; the job runs out of memory",
			Scope:   ScopeGPU,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "fraction", Type: ParamFloat, Default: "0.9", Min: "0.01", Max: "0.99", Unit: "of free HBM", Help: "share of the GPU's free memory to hold"},
			},
			Detectable: gpuLayers(),
			Mechanisms: []Mechanism{{
				Name: "cuda-malloc", Targets: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: gpuLayers(),
				Description: "Runs `gpuchaos exhaust vram` on the GPU as a child process of gpuchaos: allocates fraction of the " +
					"memory free at that moment (as cuMemGetInfo reports it) with cuMemAlloc in 1 GiB chunks, writes every byte so it " +
					"is really backed, and frees it when recovery stops the process. Memory the job already holds is never taken, so a " +
					"running job fails only at its next allocation.",
			}},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"},
				Workload: "The next allocation that does not fit fails with 'CUDA out of memory'; PyTorch's caching allocator may hide it until the working set grows.",
				Effects:  func(v Values) []Effect { return []Effect{{Kind: EffectVRAM, Value: v.Float("fraction")}} },
			},
		},
		{
			ID:         "exhaustion.thermal-soak",
			Family:     FamilyExhaustion,
			Summary:    "A long full burn that heat-soaks the GPU, its neighbours and the chassis",
			Scope:      ScopeGPU,
			Safety:     SafetyDisruptive,
			Params:     []Param{ceilingParam("87")},
			Detectable: gpuLayers(),
			Mechanisms: []Mechanism{{
				Name: "burn", Targets: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: gpuLayers(),
				Description: "Runs `gpuchaos burn` continuously on the GPU as a child process of gpuchaos for the experiment's " +
					"duration, so heat builds in the board and chassis; it stops within two seconds of the temperature ceiling, and " +
					"recovery stops the process.",
			}},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_THERMAL_VIOLATION"},
				Workload: "The rank slows while the burn shares its SMs, and more once the GPU passes its slowdown temperature.",
				// The heat follows from the load through the twin's thermal
				// model. A long burn also heat-soaks the heatsink and the
				// chassis: the GPU breathes its neighbours' exhaust, so its
				// effective thermal resistance rises. Factor 1.42 is a
				// modelling choice that settles a burning H200 (700 W) near
				// 86 °C, past the 75–85 °C of the public temperature rules
				// and below the burn's default 87 °C ceiling, which a real
				// soak reaches and stops at. For scale: the lent H200 of
				// ../shared/data/h200-telemetry/burn-bf16.json, alone in a
				// well-cooled chassis for 25 s, sat at 56–57 °C at 691 W.
				Effects: fixedEffects(Effect{Kind: EffectSMLoad, Value: 1}, Effect{Kind: EffectCooling, Factor: 1.42}),
			},
		},
		{
			ID:      "exhaustion.pcie",
			Family:  FamilyExhaustion,
			Summary: "A host-device copy storm saturates the GPU's PCIe link and starves the job's input pipeline",
			Scope:   ScopeGPU,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "rate", Type: ParamBytes, Default: "25G", Min: "1M", Max: "128G", Unit: "bytes/s", Help: "host-device copy traffic to generate, both directions together"},
			},
			Detectable: gpuLayers(),
			Mechanisms: []Mechanism{{
				Name: "cuda-memcpy", Targets: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: gpuLayers(),
				Description: "Runs `gpuchaos exhaust pcie --rate rate` on the GPU as a child process of gpuchaos: loops pinned " +
					"host-to-device and device-to-host copies (cuMemcpyHtoDAsync, cuMemcpyDtoHAsync) on two streams at once, each " +
					"copy issued only once the bytes queued so far fit the rate since the start, so the link carries at most rate " +
					"bytes per second on average while each copy runs at link speed. Recovery stops the process.",
			}},
			Signature: Signature{
				Series:   []string{"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_DEV_MEM_COPY_UTIL", seriesJobStepSeconds},
				Workload: "Input copies and any host offload slow down; the step slows by the copies' share of it.",
				Effects: func(v Values) []Effect {
					rate := float64(v.Int("rate"))
					return []Effect{{Kind: EffectPCIe, Value: rate, Factor: pcieSlowdown(rate)}}
				},
			},
		},
		{
			ID:      "exhaustion.noisy-neighbour",
			Family:  FamilyExhaustion,
			Summary: "A second tenant shares the GPU (time-slicing or MPS) and takes SM time and memory",
			Scope:   ScopeGPU,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "share", Type: ParamFloat, Default: "0.5", Min: "0.05", Max: "0.95", Unit: "of the time", Help: "share of the wall time the neighbour keeps the SMs busy"},
				{Name: "memory", Type: ParamFloat, Default: "0.1", Min: "0", Max: "0.9", Unit: "of free HBM", Help: "share of the GPU's free memory the neighbour holds; 0 for none"},
			},
			// In Kubernetes the neighbour is a pod bound to the same GPU,
			// which the API shows.
			Detectable: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload, LayerK8sAPI},
			Mechanisms: []Mechanism{
				{
					Name: "sidecar", Planned: targetsK8s(), Safety: SafetyDisruptive,
					Reaches: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload, LayerK8sAPI},
					Description: "Schedules a burn pod onto the job's GPU through the device plugin's time-slicing or MPS sharing " +
						"and deletes it on recovery; the GPU must be shared for the pod to land there.",
				},
				{
					Name: "burn", Targets: targetsLocalK8s(), Safety: SafetyDisruptive,
					Reaches: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload},
					Misses:  []Layer{LayerK8sAPI},
					Description: "Runs `gpuchaos burn --duty share` (stopping at 85 °C) and, when memory is above 0, `gpuchaos exhaust " +
						"vram --fraction memory` beside it, as child processes of gpuchaos on the node, outside any scheduler; recovery " +
						"stops both.",
				},
			},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", seriesJobStepSeconds},
				Workload: "The rank's steps slow and vary with the neighbour's load; memory headroom shrinks.",
				Effects: func(v Values) []Effect {
					out := []Effect{{Kind: EffectSMLoad, Value: v.Float("share")}}
					if m := v.Float("memory"); m > 0 {
						out = append(out, Effect{Kind: EffectVRAM, Value: m})
					}
					return out
				},
			},
		},
	}
}
