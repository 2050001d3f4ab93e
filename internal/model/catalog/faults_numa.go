package catalog

// Step-time factors of NUMA faults for a data-loader-heavy job. They are
// model assumptions, not measurements, until someone measures them on our
// machines: remote memory puts a cross-socket hop on every host access of
// the loader and the staging copies (assumed 1.15–1.3×, modelled 1.25),
// wrong affinity adds remote cache misses and a longer path to the GPU's
// PCIe root (assumed 1.1–1.2×), and pressure or saturation on the GPU's
// socket starve the loader in much the same way.
const (
	numaRemoteMemoryFactor   = 1.25
	numaWrongAffinityFactor  = 1.15
	numaMemoryPressureFactor = 1.2
	numaCPUSaturationFactor  = 1.2
)

// numaSpillShare is the share of a rank's host memory that memory pressure
// pushes to the far node in the twin: more than half (the agent's
// misalignment threshold), as the rank's new allocations and page cache
// land there. A model assumption like the factors above. Remote memory and
// wrong affinity bind everything to the far node (share 1); CPU
// saturation moves neither memory nor affinity, so the agent's NUMA
// series do not see it.
const numaSpillShare = 0.6

// nodeParam chooses the NUMA node a NUMA fault uses.
func nodeParam(help string) Param {
	return Param{Name: "node", Type: ParamInt, Default: "-1", Min: "-1", Max: "1023", Help: help}
}

// numaFaults misplace a rank's host memory or threads relative to its GPU
// (strategy 7 of the talk). They are the silent kind: no GPU metric moves
// except utilisation falling, so only the job's step time and the gpuchaos
// agent's NUMA alignment series show them.
func numaFaults() []*Fault {
	workload := func() []Layer { return []Layer{LayerWorkload} }
	series := func() []string { return []string{seriesJobStepSeconds, "DCGM_FI_DEV_GPU_UTIL"} }
	return []*Fault{
		{
			ID:         "numa.remote-memory",
			Family:     FamilyNUMA,
			Summary:    "The rank's host memory bound to the NUMA node far from its GPU",
			Scope:      ScopeRank,
			Safety:     SafetySafe,
			Params:     []Param{nodeParam("NUMA node to move the memory to; -1 for the node farthest from the rank's GPU"), pidParam()},
			Detectable: workload(),
			Mechanisms: []Mechanism{
				{
					Name: "migrate-pages", Targets: targetsLocalK8s(), Safety: SafetySafe, Reaches: workload(),
					Description: "Moves every page of the running rank to the remote node with migrate_pages(2), and on recovery " +
						"moves them to the node that held most of them before; new allocations still follow the rank's own policy. " +
						"Only nodes the rank's cpuset allows memory on are chosen (a pod's cpuset is never widened). " +
						"Refuses on a machine with one node.",
				},
				{
					Name: "numactl-launch", Planned: targetsLocalK8s(), Safety: SafetySafe, Reaches: workload(),
					Description: "Relaunches the rank with its memory policy bound to the remote node (set_mempolicy before exec, " +
						"as numactl --membind does), and relaunches it unbound on recovery.",
				},
			},
			Signature: Signature{
				Series:   series(),
				Workload: "Host-side work (data loading, pinned-memory staging) slows; steps take about 1.25× as long. No error anywhere.",
				Silent:   true,
				Effects:  fixedEffects(Effect{Kind: EffectCompute, Mode: "numa-memory", Value: 1, Factor: numaRemoteMemoryFactor}),
			},
		},
		{
			ID:         "numa.wrong-affinity",
			Family:     FamilyNUMA,
			Summary:    "The rank's threads pinned to CPUs of the socket far from its GPU",
			Scope:      ScopeRank,
			Safety:     SafetySafe,
			Params:     []Param{nodeParam("NUMA node whose CPUs the rank is pinned to; -1 for the node farthest from the rank's GPU"), pidParam()},
			Detectable: workload(),
			Mechanisms: []Mechanism{
				{
					Name: "sched-setaffinity", Targets: targetsLocalK8s(), Safety: SafetySafe, Reaches: workload(),
					Description: "Sets the CPU affinity of every thread of the rank to the remote node's CPUs with sched_setaffinity(2), " +
						"and restores each thread's previous mask on recovery (threads born meanwhile get the main thread's). " +
						"Only the CPUs the rank's cpuset allows are used (a pod's cpuset is never widened). " +
						"Refuses on a machine with one node.",
				},
				{
					Name: "numactl-launch", Planned: targetsLocalK8s(), Safety: SafetySafe, Reaches: workload(),
					Description: "Relaunches the rank bound to the remote node's CPUs (as numactl --cpunodebind does), and unbound on recovery.",
				},
			},
			Signature: Signature{
				Series:   series(),
				Workload: "Kernel launches and data loading run from the far socket; steps take about 1.15× as long. No error anywhere.",
				Silent:   true,
				Effects:  fixedEffects(Effect{Kind: EffectCompute, Mode: "numa-cpu", Value: 1, Factor: numaWrongAffinityFactor}),
			},
		},
		{
			ID:      "numa.memory-pressure",
			Family:  FamilyNUMA,
			Summary: "Memory pressure on the NUMA node local to the rank's GPU; its allocations spill to the far node",
			Scope:   ScopeRank,
			Safety:  SafetySafe,
			Params: []Param{
				{Name: "fraction", Type: ParamFloat, Default: "0.8", Min: "0.1", Max: "0.95", Help: "share of the local node's free memory to take"},
			},
			Detectable: workload(),
			Mechanisms: []Mechanism{{
				Name: "memory-hog", Targets: targetsLocalK8s(), Safety: SafetySafe, Reaches: workload(),
				Description: "Runs a gpuchaos child process that maps fraction × the local node's free memory, binds it to that node " +
					"(mbind MPOL_BIND) and touches every page, as stress-ng's vm stressor would; recovery ends the child, which frees it. " +
					"Node memory metrics show the hog, not the spill. On k8s the agent's hog leaves the agent's pod for the " +
					"node level above it, and outlives an agent restart.",
			}},
			Signature: Signature{
				Series:   series(),
				Workload: "The rank's new host allocations and page cache land on the far node; steps take about 1.2× as long.",
				Silent:   true,
				Effects: func(v Values) []Effect {
					return []Effect{
						{Kind: EffectCompute, Mode: "numa-memory", Value: numaSpillShare, Factor: numaMemoryPressureFactor},
						{Kind: EffectHost, Mode: "memory", Value: v.Float("fraction")},
					}
				},
			},
		},
		{
			ID:      "numa.cpu-saturation",
			Family:  FamilyNUMA,
			Summary: "Busy threads saturate the CPUs of the socket local to the rank's GPU",
			Scope:   ScopeRank,
			Safety:  SafetySafe,
			Params: []Param{
				{Name: "threads", Type: ParamInt, Default: "0", Min: "0", Max: "4096", Help: "busy threads to run; 0 for one per CPU of the local node"},
			},
			Detectable: workload(),
			Mechanisms: []Mechanism{{
				Name: "cpu-hog", Targets: targetsLocalK8s(), Safety: SafetySafe, Reaches: workload(),
				Description: "Runs a gpuchaos child process of busy-loop threads, each locked to its OS thread and pinned to one CPU " +
					"of the local node (as stress-ng's cpu stressor with --taskset would); recovery ends the child. On k8s the " +
					"agent's hog leaves the agent's pod for the node level above it, and outlives an agent restart.",
			}},
			Signature: Signature{
				Series:   series(),
				Workload: "The rank's launch thread and data-loader workers compete for CPU; steps take about 1.2× as long and vary more.",
				Silent:   true,
				// The twin plays the default, one busy thread per CPU of
				// the local socket: all of its CPUs busy.
				Effects: func(v Values) []Effect {
					return []Effect{
						{Kind: EffectCompute, Factor: numaCPUSaturationFactor},
						{Kind: EffectHost, Mode: "cpu", Value: 1},
					}
				},
			},
		},
	}
}
