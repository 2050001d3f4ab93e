package catalog

import (
	"fmt"
	"strconv"
	"strings"
)

// Collective bandwidth factors of NCCL environment faults: bus bandwidth of a
// 256 MiB bf16 all-reduce under the fault over the default 300.8 GB/s,
// measured with `gpuchaos nccl` (NCCL 2.28.3) on 2× H200 joined by NVLink
// (NV18), each fault applied with `gpuchaos exec`. PyTorch's all-reduce
// (NCCL 2.28.9) in the same session agreed within 4.1 % except for the
// socket fallback (3.8 GB/s against 3.17); DESIGN.md §5's earlier PyTorch
// figures (28, 3.1, 21, 115, 277 of 301) within 3 %.
// docs/results/h200-nccl.md has the table and the commands.
const (
	ncclBaseline         = 300.8
	ncclP2POffFactor     = 28.8 / ncclBaseline  // NCCL_P2P_DISABLE=1: through host memory
	ncclSocketFactor     = 3.17 / ncclBaseline  // P2P, SHM and IB off: TCP sockets
	ncclOneChannelFactor = 21.0 / ncclBaseline  // NCCL_MAX_NCHANNELS=1
	ncclLLFactor         = 114.3 / ncclBaseline // NCCL_PROTO=LL
	ncclLL128Factor      = 276.0 / ncclBaseline // NCCL_PROTO=LL128
)

// ncclProtoFactor maps NCCL_PROTO to its measured factor. Simple is what
// NCCL picks for large messages anyway, so forcing it changes nothing there.
func ncclProtoFactor(proto string) float64 {
	switch proto {
	case "LL":
		return ncclLLFactor
	case "LL128":
		return ncclLL128Factor
	}
	return 1
}

// envVar is one variable an environment fault sets: to a fixed value, or,
// when param is not empty, to the value of the fault's parameter of that
// name.
type envVar struct {
	name, value, param string
}

// setTo is a variable with a fixed value.
func setTo(name, value string) envVar { return envVar{name: name, value: value} }

// fromParam is a variable that takes the value of a parameter.
func fromParam(name, param string) envVar { return envVar{name: name, param: param} }

// describe words the variable for a mechanism's description.
func (e envVar) describe() string {
	if e.param != "" {
		return e.name + " set to the " + e.param + " parameter"
	}
	return e.name + "=" + e.value
}

// resolve returns KEY=VALUE for resolved parameters. A parameter the fault
// lacks yields an empty value, which TestExecCatalogue (internal/cli)
// rejects for every environment fault.
func (e envVar) resolve(v Values) string {
	if e.param == "" {
		return e.name + "=" + e.value
	}
	var val string
	switch x := v[e.param].(type) {
	case string:
		val = x
	case int64:
		val = strconv.FormatInt(x, 10)
	case bool:
		val = strconv.FormatBool(x)
	case nil:
	default:
		val = fmt.Sprint(x)
	}
	return e.name + "=" + val
}

// envMechanism relaunches the job with a changed NCCL environment. The
// transport NCCL then picks is real, so the mechanism reaches every layer a
// real misconfiguration would; reaches is the fault's detectable list. The
// variables feed both Env and the Description, so the text cannot drift
// from what `gpuchaos exec` sets.
func envMechanism(vars []envVar, reaches ...Layer) Mechanism {
	words := make([]string, len(vars))
	for i, e := range vars {
		words[i] = e.describe()
	}
	with := words[0]
	if n := len(words); n > 1 {
		with = strings.Join(words[:n-1], ", ") + " and " + words[n-1]
	}
	return Mechanism{
		Name: "env", Planned: targetsLocalK8s(), Safety: SafetySafe, Reaches: reaches,
		Description: "Relaunches the workload with " + with + " (a restart of the job's ranks, from its last checkpoint) " +
			"and relaunches it with its own environment on recovery.",
		Env: func(v Values) []string {
			out := make([]string, len(vars))
			for i, e := range vars {
				out[i] = e.resolve(v)
			}
			return out
		},
	}
}

// ncclFaults force NCCL onto slower paths through its environment (strategy
// 3 of the talk) — the faults a bad container image or a missing IPC
// permission cause in production without any error.
func ncclFaults() []*Fault {
	linkLayers := func() []Layer {
		return []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload}
	}
	slowSeries := func() []string {
		return []string{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", seriesJobStepRate, seriesJobStepSeconds}
	}
	return []*Fault{
		{
			ID:         "nccl.p2p-off",
			Family:     FamilyNCCL,
			Summary:    "NCCL_P2P_DISABLE=1: intra-node collectives leave NVLink for host memory",
			Scope:      ScopeJob,
			Safety:     SafetySafe,
			Detectable: linkLayers(),
			Mechanisms: []Mechanism{envMechanism([]envVar{setTo("NCCL_P2P_DISABLE", "1")}, linkLayers()...)},
			Signature: Signature{
				Series:   append(slowSeries(), "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"),
				Workload: "All-reduce bus bandwidth falls from 301 to 29 GB/s on 2× H200 and a DDP step over 256 MiB of gradients takes 3.6× as long; NCCL_DEBUG=INFO shows channels 'via SHM/direct/direct' instead of 'via P2P/…'. No error.",
				Effects:  fixedEffects(Effect{Kind: EffectCollective, Mode: "intra", Factor: ncclP2POffFactor}),
			},
		},
		{
			ID:         "nccl.shm-off",
			Family:     FamilyNCCL,
			Summary:    "NCCL_SHM_DISABLE=1: no shared-memory transport; harmless while P2P works",
			Scope:      ScopeJob,
			Safety:     SafetySafe,
			Detectable: []Layer{LayerWorkload},
			Mechanisms: []Mechanism{envMechanism([]envVar{setTo("NCCL_SHM_DISABLE", "1")}, LayerWorkload)},
			Signature: Signature{
				Series:   []string{seriesJobStepRate},
				Workload: "Nothing on an NVLink box: only the NCCL_DEBUG=INFO transport lines show it. Combined with P2P off, traffic falls back to sockets.",
				Silent:   true,
				// Factor 1: NCCL keeps P2P over NVLink between GPUs of one
				// node, and SHM is only its fallback when P2P is impossible,
				// so disabling it alone changes no path on an NVLink box.
				Effects: fixedEffects(Effect{Kind: EffectCollective, Mode: "intra", Factor: 1}),
			},
		},
		{
			ID:         "nccl.socket-fallback",
			Family:     FamilyNCCL,
			Summary:    "P2P, SHM and IB off: every collective goes over TCP sockets",
			Scope:      ScopeJob,
			Safety:     SafetySafe,
			Detectable: linkLayers(),
			Mechanisms: []Mechanism{envMechanism([]envVar{setTo("NCCL_P2P_DISABLE", "1"), setTo("NCCL_SHM_DISABLE", "1"), setTo("NCCL_IB_DISABLE", "1")}, linkLayers()...)},
			Signature: Signature{
				Series:   slowSeries(),
				Workload: "Bus bandwidth falls from 301 to 3.2–3.8 GB/s on 2× H200 (80–95× slower); NCCL_DEBUG=INFO shows 'via NET/Socket'. A DDP step over 256 MiB of gradients takes 27× as long; no error.",
				// One factor for both paths, as measured intra-node. Across
				// nodes TCP over the same NIC loses less against RDMA, so this
				// overstates the inter-node loss; the twin errs towards
				// making the fault visible.
				Effects: fixedEffects(Effect{Kind: EffectCollective, Mode: "all", Factor: ncclSocketFactor}),
			},
		},
		{
			ID:      "nccl.proto",
			Family:  FamilyNCCL,
			Summary: "NCCL_PROTO forces one protocol; LL wastes half of every line on flags",
			Scope:   ScopeJob,
			Safety:  SafetySafe,
			Params: []Param{
				{Name: "proto", Type: ParamEnum, Default: "LL", Enum: []string{"LL", "LL128", "Simple"}, Help: "protocol to force (NCCL_PROTO)"},
			},
			Detectable: linkLayers(),
			Mechanisms: []Mechanism{envMechanism([]envVar{fromParam("NCCL_PROTO", "proto")}, linkLayers()...)},
			Signature: Signature{
				Series:   slowSeries(),
				Workload: "Large all-reduces slow: 114 GB/s with LL, 276 with LL128, against 301 (Simple) on 2× H200; a DDP step takes 1.4× as long with LL. Small messages may get faster.",
				// Mode "all": the protocol is one setting for every
				// transport, so the network path pays it too. The factor
				// measured on NVLink is assumed for the network as well
				// (LL's 8-byte stores with inline flags halve payload
				// efficiency on any transport); not yet measured there.
				Effects: func(v Values) []Effect {
					return []Effect{{Kind: EffectCollective, Mode: "all", Factor: ncclProtoFactor(v.String("proto"))}}
				},
			},
		},
		{
			ID:      "nccl.algo",
			Family:  FamilyNCCL,
			Summary: "NCCL_ALGO forces one collective algorithm; matters at scale, not on one node",
			Scope:   ScopeJob,
			Safety:  SafetySafe,
			Params: []Param{
				{Name: "algo", Type: ParamEnum, Default: "Tree", Enum: []string{"Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "PAT"}, Help: "algorithm to force (NCCL_ALGO); NCCL fails at init when the algorithm is unavailable on the system"},
			},
			Detectable: []Layer{LayerWorkload},
			Mechanisms: []Mechanism{envMechanism([]envVar{fromParam("NCCL_ALGO", "algo")}, LayerWorkload)},
			Signature: Signature{
				Series:   []string{seriesJobStepRate, seriesJobStepSeconds},
				Workload: "Tree on 2× H200: NCCL 2.28.3 ran it 4 % above the default, PyTorch's NCCL 2.28.9 failed at init. At scale Ring against Tree trades bandwidth for latency, so the wrong choice slows large jobs; an unavailable algorithm (CollnetDirect without SHARP, NVLS without NVSwitch) fails NCCL init.",
				Silent:   true,
				// Factor 1, a modelling choice: on 2× H200 every algorithm
				// degenerates to nearly the same exchange (Tree measured
				// 1.04× there), and the twin does not model algorithm
				// choice at scale.
				Effects: fixedEffects(Effect{Kind: EffectCollective, Mode: "all", Factor: 1}),
			},
		},
		{
			ID:         "nccl.one-channel",
			Family:     FamilyNCCL,
			Summary:    "NCCL_MAX_NCHANNELS=1: one channel, one SM's worth of collective bandwidth",
			Scope:      ScopeJob,
			Safety:     SafetySafe,
			Detectable: linkLayers(),
			Mechanisms: []Mechanism{envMechanism([]envVar{setTo("NCCL_MAX_NCHANNELS", "1")}, linkLayers()...)},
			Signature: Signature{
				Series:   slowSeries(),
				Workload: "Bus bandwidth falls from 301 to 21 GB/s on 2× H200 and a DDP step takes 4.8× as long; no error.",
				// Mode "all": one channel limits every transport, the
				// network too (one ring, one NIC). The NVLink factor is
				// assumed for the network; not yet measured there.
				Effects: fixedEffects(Effect{Kind: EffectCollective, Mode: "all", Factor: ncclOneChannelFactor}),
			},
		},
		{
			ID:      "nccl.ib-timeout",
			Family:  FamilyNCCL,
			Summary: "A short NCCL_IB_TIMEOUT: on a lossy fabric, retransmits become hard failures",
			Scope:   ScopeJob,
			Safety:  SafetySafe,
			Params: []Param{
				{Name: "timeout", Type: ParamInt, Default: "1", Min: "1", Max: "22", Help: "NCCL_IB_TIMEOUT exponent: the InfiniBand verbs timeout is 4.096 µs × 2^timeout (NCCL's default is 20 in current releases, 18 or 14 in older ones)"},
			},
			Detectable: []Layer{LayerWorkload},
			Mechanisms: []Mechanism{envMechanism([]envVar{fromParam("NCCL_IB_TIMEOUT", "timeout")}, LayerWorkload)},
			Signature: Signature{
				Series:   []string{seriesJobUp, seriesJobRestartsTotal},
				Workload: "Nothing on a clean fabric. With loss or congestion the queue pair exhausts its retries and the job dies with 'NET/IB : Got completion ... status=12 (transport retry counter exceeded)'.",
				Silent:   true,
				// Factor 1: the timeout changes no bandwidth. It only turns
				// loss into failure, an interaction the twin does not model,
				// so on the twin this fault shows nothing.
				Effects: fixedEffects(Effect{Kind: EffectCollective, Mode: "inter", Factor: 1}),
			},
		},
	}
}
