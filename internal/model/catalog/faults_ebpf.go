package catalog

import "fmt"

// ebpfFaults act in the kernel through eBPF programs built in Go (strategy 5
// of the talk), with no C compiler and no netem. Measured on the development
// kernel (DESIGN.md §5): a cls_bpf direct-action program on a clsact qdisc dropped 29–31 %
// of pings at p = 0.30 across a veth pair, and deleting it restored 0 %.
func ebpfFaults() []*Fault {
	workload := func() []Layer { return []Layer{LayerWorkload} }
	return []*Fault{
		{
			ID:      "ebpf.packet-drop",
			Family:  FamilyEBPF,
			Summary: "Kernel-level random packet drop on the GPU network interface by a cls_bpf program",
			Scope:   ScopeNode,
			Safety:  SafetySafe,
			Params: append([]Param{
				{Name: "probability", Type: ParamFloat, Default: "0.1", Min: "0", Max: "1", Help: "probability that a packet is dropped, in each chosen direction"},
				{Name: "direction", Type: ParamEnum, Default: "egress", Enum: []string{"egress", "ingress", "both"}, Help: "which hook of the clsact qdisc carries the program"},
			}, whereParams()...),
			Detectable: workload(),
			Mechanisms: []Mechanism{{
				Name: "cls-bpf", Targets: targetsLocalK8s(), Safety: SafetySafe, Reaches: workload(),
				Description: "Loads a direct-action cls_bpf program (written with cilium/ebpf's assembler) on the chosen hooks of a " +
					"clsact qdisc on the GPU network interface; it returns TC_ACT_SHOT when bpf_get_prandom_u32 falls under " +
					"the probability. Removing the filter restores the path." + kernelStackNote,
			}},
			Signature: Signature{
				Series:   []string{seriesJobStepSeconds, seriesJobStepRate},
				Workload: "As network.loss: retransmits cut inter-node bandwidth; kernel drop counters (tc -s filter) show the program's work.",
				Silent:   true,
				Effects: func(v Values) []Effect {
					p := v.Float("probability")
					if v.String("direction") == "both" {
						// A transfer needs its data one way and its
						// acknowledgements the other; losing either costs a
						// retransmission.
						p = 1 - (1-p)*(1-p)
					}
					return lossEffects(p)
				},
			},
		},
		{
			ID:      "ebpf.port-blackhole",
			Family:  FamilyEBPF,
			Summary: "Silently drop NCCL socket traffic on a port range: collectives hang without an error",
			Scope:   ScopeNode,
			Safety:  SafetyDisruptive,
			Params: append([]Param{
				// NCCL's bootstrap and socket transport listen on ports the
				// kernel hands out, so the default is Linux's ephemeral
				// range (net.ipv4.ip_local_port_range).
				{Name: "min-port", Type: ParamInt, Default: "32768", Min: "1", Max: "65535", Help: "first port of the range (either end of a connection)"},
				{Name: "max-port", Type: ParamInt, Default: "60999", Min: "1", Max: "65535", Help: "last port of the range"},
			}, whereParams()...),
			Detectable: workload(),
			Mechanisms: []Mechanism{{
				Name: "cls-bpf", Targets: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: workload(),
				Description: "Loads cls_bpf programs on ingress and egress of the GPU network interface that drop TCP segments whose " +
					"source or destination port lies in the range; nothing is reset, so peers wait rather than fail. IPv4 only: IPv6 " +
					"segments pass unchanged." + kernelStackNote,
			}},
			Signature: Signature{
				Series:   []string{seriesJobStepsTotal, seriesJobUp, seriesJobRestartsTotal},
				Workload: "Collectives over NCCL's socket transport (and a new job's bootstrap) hang until the watchdog, 10 minutes in PyTorch, kills the job. With an RDMA transport only the bootstrap is hit.",
				Silent:   true,
				Effects:  fixedEffects(Effect{Kind: EffectNetwork, Mode: "partition"}),
			},
			Check: func(v Values) error {
				if lo, hi := v.Int("min-port"), v.Int("max-port"); hi < lo {
					return &ParamError{Param: "max-port", Err: fmt.Errorf("%d is below min-port %d", hi, lo)}
				}
				return nil
			},
		},
	}
}
