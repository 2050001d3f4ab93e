package catalog

// Inter-node goodput under loss. RDMA NICs (RoCE, InfiniBand) recover a lost
// packet by go-back-N: everything in flight after it is sent again, so each
// loss costs about one window of packets and goodput falls like
// 1/(1 + W·p). W is the bandwidth-delay product in packets: 400 Gb/s × 8 µs
// round trip / 4 KiB MTU ≈ 100. TCP's Mathis bound (goodput ∝ 1/√p) gives
// the same order between 1 % and 10 % loss. A model assumption, not a
// measurement.
const lossWindowPackets = 100

// lossFactor is the bandwidth factor of packet loss with probability p.
func lossFactor(p float64) float64 { return 1 / (1 + lossWindowPackets*p) }

// lossEffects plays loss; certain loss is a partition, not a slow link.
func lossEffects(p float64) []Effect {
	if p >= 1 {
		return []Effect{{Kind: EffectNetwork, Mode: "partition"}}
	}
	return []Effect{{Kind: EffectNetwork, Factor: lossFactor(p)}}
}

// referenceRailBytesPerSecond is the inter-node bandwidth a rate limit is
// measured against: one 400 Gb/s rail per GPU, as on H100/H200 nodes with
// NDR InfiniBand or 400 GbE. The twin's spec may give a node another rail;
// the catalogue cannot know it.
const referenceRailBytesPerSecond = 50e9

// kernelStackNote is the limit every tc and cls_bpf mechanism shares, said
// once so that each description says it the same way.
const kernelStackNote = " Only traffic through the kernel's network stack is touched — NCCL's socket transport, " +
	"the c10d TCPStore, Gloo, storage; RDMA verbs traffic bypasses the qdisc."

// whereParams are the parameters every network and ebpf fault shares: which
// interface, in which network namespace, the mechanism works on. A pod has
// its own namespace, found from one of its processes, so the agent on the
// node can reach it without entering the pod.
func whereParams() []Param {
	return []Param{
		{Name: "interface", Type: ParamString, Default: "", Help: "network interface to disturb; empty for the one carrying the default route of the namespace"},
		{Name: "pid", Type: ParamInt, Default: "0", Min: "0", Max: "4194304", Help: "a process whose network namespace holds the interface (one of a pod's processes); 0 for the namespace gpuchaos runs in"},
	}
}

// networkFaults disturb the inter-node path of a node (strategy 4 of the
// talk). Neither the development nor the GPU machines have sch_netem, so the
// mechanisms lean on tbf, clsact and cls_bpf, which both have.
func networkFaults() []*Fault {
	workload := func() []Layer { return []Layer{LayerWorkload} }
	series := func() []string { return []string{seriesJobStepSeconds, seriesJobStepRate} }
	return []*Fault{
		{
			ID:      "network.delay",
			Family:  FamilyNetwork,
			Summary: "Added one-way delay on the node's inter-node network",
			Scope:   ScopeNode,
			Safety:  SafetySafe,
			Params: append([]Param{
				{Name: "delay", Type: ParamDuration, Default: "5ms", Min: "1us", Max: "10s", Help: "one-way delay added to every packet leaving the GPU network interface"},
			}, whereParams()...),
			Detectable: workload(),
			Mechanisms: []Mechanism{{
				Name: "netem", Targets: targetsLocalK8s(), Safety: SafetySafe, Reaches: workload(),
				Description: "Adds a netem qdisc with the delay on the GPU network interface. Needs the sch_netem module, which neither " +
					"our development nor our GPU machines have: the injector says so and refuses rather than pretend." + kernelStackNote,
			}},
			Signature: Signature{
				Series:   series(),
				Workload: "Small collectives and the rendezvous slow by the added latency per hop; large ones barely change.",
				Silent:   true,
				Effects: func(v Values) []Effect {
					return []Effect{{Kind: EffectNetwork, Value: v.Duration("delay").Seconds(), Factor: 1}}
				},
			},
		},
		{
			ID:      "network.loss",
			Family:  FamilyNetwork,
			Summary: "Random packet loss on the node's inter-node network",
			Scope:   ScopeNode,
			Safety:  SafetySafe,
			Params: append([]Param{
				{Name: "probability", Type: ParamFloat, Default: "0.1", Min: "0", Max: "1", Help: "probability that a packet is dropped"},
			}, whereParams()...),
			Detectable: workload(),
			Mechanisms: []Mechanism{
				{
					Name: "cls-bpf", Targets: targetsLocalK8s(), Safety: SafetySafe, Reaches: workload(),
					Description: "Attaches a direct-action cls_bpf program to a clsact qdisc on the GPU network interface that drops a " +
						"packet when a random number falls under the probability (29–31 % of pings dropped at 0.30 here)." + kernelStackNote,
				},
				{
					Name: "netem", Targets: targetsLocalK8s(), Safety: SafetySafe, Reaches: workload(),
					Description: "Adds a netem qdisc with the loss probability; needs sch_netem, which our machines lack." + kernelStackNote,
				},
			},
			Signature: Signature{
				Series:   series(),
				Workload: "Retransmits cut inter-node bandwidth roughly like 1/(1 + 100·p); with a short NCCL_IB_TIMEOUT the job fails instead.",
				Silent:   true,
				Effects:  func(v Values) []Effect { return lossEffects(v.Float("probability")) },
			},
		},
		{
			ID:      "network.rate-limit",
			Family:  FamilyNetwork,
			Summary: "The node's inter-node bandwidth capped by a token bucket",
			Scope:   ScopeNode,
			Safety:  SafetySafe,
			Params: append([]Param{
				{Name: "rate", Type: ParamBytes, Default: "1G", Min: "1K", Max: "1T", Unit: "bytes/s", Help: "bandwidth left to traffic leaving the GPU network interface"},
			}, whereParams()...),
			Detectable: workload(),
			Mechanisms: []Mechanism{{
				Name: "tc-tbf", Targets: targetsLocalK8s(), Safety: SafetySafe, Reaches: workload(),
				Description: "Replaces the root qdisc of the GPU network interface with a tbf at the rate and restores the previous one on recovery." + kernelStackNote,
			}},
			Signature: Signature{
				Series:   series(),
				Workload: "Inter-node collectives slow towards the cap; step time grows where the job is communication-bound.",
				Silent:   true,
				Effects: func(v Values) []Effect {
					return []Effect{{Kind: EffectNetwork, Factor: min(1, float64(v.Int("rate"))/referenceRailBytesPerSecond)}}
				},
			},
		},
		{
			ID:      "network.partition",
			Family:  FamilyNetwork,
			Summary: "The node cut off from peers on its inter-node network",
			Scope:   ScopeNode,
			Safety:  SafetyDisruptive,
			Params: append([]Param{
				{Name: "cidr", Type: ParamCIDR, Default: "0.0.0.0/0", Help: "peers to cut off; the default is every peer on the GPU network interface (the management interface is never touched)"},
				{Name: "port", Type: ParamInt, Default: "0", Min: "0", Max: "65535", Help: "peer port to cut off; 0 for every port"},
			}, whereParams()...),
			Detectable: workload(),
			Mechanisms: []Mechanism{
				{
					Name: "cls-bpf", Targets: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: workload(),
					Description: "Attaches cls_bpf programs on ingress and egress of the GPU network interface that drop every packet to or " +
						"from the prefix (and port): the destination address and port on egress, the source on ingress. IPv4 only: IPv6 " +
						"packets pass unchanged, and so do non-first fragments when a port is given." + kernelStackNote,
				},
				{
					Name: "nftables", Planned: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: workload(),
					Description: "Adds a table of its own with drop rules for the prefix (and port) on the GPU network interface, " +
						"through netlink, and deletes the table on recovery." + kernelStackNote,
				},
			},
			Signature: Signature{
				Series:   []string{seriesJobStepsTotal, seriesJobUp, seriesJobRestartsTotal},
				Workload: "Collectives through the node hang; the step counter stops until the NCCL watchdog (10 minutes in PyTorch) kills the job.",
				Silent:   true,
				Effects:  fixedEffects(Effect{Kind: EffectNetwork, Mode: "partition"}),
			},
		},
	}
}
