package catalog

import (
	"errors"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// watchdogDefault is PyTorch's NCCL watchdog timeout: a rank stuck in a
// collective is killed after it (DESIGN.md §6).
const watchdogDefault = 10 * time.Minute

// pidParam names a rank's process directly, for a job that does not carry
// GPUCHAOS_JOB and RANK in its environment.
func pidParam() Param {
	return Param{Name: "pid", Type: ParamInt, Default: "0", Min: "0", Max: "4194304", Help: "the rank's process id; 0 finds it by the target's job and rank (GPUCHAOS_JOB and RANK in its environment)"}
}

// workloadFaults are classic workload disruption aimed at training jobs:
// ranks that die, hang or straggle, pods and nodes that go away.
func workloadFaults() []*Fault {
	// A rank or pod that dies frees its GPU memory and idles the GPU, which
	// GPU telemetry shows; in Kubernetes the restart shows in the API.
	deathLayers := func() []Layer {
		return []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload, LayerK8sAPI}
	}
	// A hung rank idles its GPU while its peers spin in NCCL kernels at
	// full utilisation: a pattern GPU telemetry shows before anything dies.
	hangLayers := func() []Layer {
		return []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload}
	}
	return []*Fault{
		{
			ID:      "workload.kill-rank",
			Family:  FamilyWorkload,
			Summary: "Kill one rank's process; the job must notice and restart",
			Scope:   ScopeRank,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "signal", Type: ParamEnum, Default: "SIGKILL", Enum: []string{"SIGKILL", "SIGTERM", "SIGSEGV"}, Help: "signal to send; SIGSEGV mimics a crash"},
				{Name: "group", Type: ParamBool, Default: "false", Help: "signal the process group the rank leads (its data-loader workers too); refused when the rank shares its launcher's group"},
				pidParam(),
			},
			Detectable: deathLayers(),
			Mechanisms: []Mechanism{{
				Name: "signal", Targets: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: deathLayers(),
				Description: "Sends the signal to the rank's process, found by GPUCHAOS_JOB and RANK in /proc/PID/environ (on Kubernetes " +
					"among its pod's processes, by the pod's cgroup) or named by pid, " +
					"and checked by its start time so a reused pid is never hit. A real death: nothing to recover but the job.",
			}},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", seriesJobUp, seriesJobRestartsTotal},
				Workload: "The peers' next collective fails or hangs until torchrun's elastic agent tears the job down and restarts it from the last checkpoint.",
				Effects:  fixedEffects(Effect{Kind: EffectRank, Mode: "kill"}),
			},
		},
		{
			ID:      "workload.hang-rank",
			Family:  FamilyWorkload,
			Summary: "Freeze one rank; its peers wait in a collective until the watchdog fires",
			Scope:   ScopeRank,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "watchdog", Type: ParamDuration, Default: watchdogDefault.String(), Min: "1s", Max: "24h", Help: "the job's collective watchdog timeout (PyTorch's NCCL watchdog: 10 minutes by default)"},
				pidParam(),
			},
			Detectable: hangLayers(),
			Mechanisms: []Mechanism{
				{
					Name: "signal", Targets: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: hangLayers(),
					Description: "Sends SIGSTOP to the rank's process (every thread stops) and SIGCONT on recovery, also from a fresh " +
						"process after a crash; its data-loader workers keep running.",
				},
				{
					Name: "cgroup-freeze", Planned: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: hangLayers(),
					Description: "Freezes the rank's whole cgroup (cgroup.freeze on v2, the freezer controller on v1), loader workers " +
						"included, and thaws it on recovery.",
				},
			},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_GPU_UTIL", seriesJobStepsTotal, seriesJobUp, seriesJobRestartsTotal},
				Workload: "The step counter stops; the other ranks sit at 100 % utilisation inside an NCCL kernel until the watchdog aborts the communicator ('Watchdog caught collective operation timeout') and the job restarts.",
				Effects: func(v Values) []Effect {
					return []Effect{{Kind: EffectRank, Mode: "hang", Value: v.Duration("watchdog").Seconds()}}
				},
			},
		},
		{
			ID:      "workload.straggler",
			Family:  FamilyWorkload,
			Summary: "One rank runs slow; in a synchronous job every step waits for it",
			Scope:   ScopeRank,
			Safety:  SafetySafe,
			Params: []Param{
				{Name: "slowdown", Type: ParamFloat, Default: "1.5", Min: "1", Max: "10", Unit: "x", Help: "multiplier of the rank's step time"},
				{Name: "cpus", Type: ParamFloat, Default: "0", Min: "0", Max: "4096", Help: "CPUs the rank uses unthrottled; 0 measures them over window"},
				{Name: "window", Type: ParamDuration, Default: "1s", Min: "100ms", Max: "1m", Help: "how long to measure the rank's CPU use before throttling"},
				pidParam(),
			},
			Detectable: []Layer{LayerWorkload},
			Mechanisms: []Mechanism{
				{
					Name: "cgroup-cpu", Targets: targetsLocalK8s(), Safety: SafetySafe, Reaches: []Layer{LayerWorkload},
					Description: "Measures the CPUs the rank uses, moves its threads into a cgroup of ours with a CFS quota " +
						"(cpu.max on v2) of 1/slowdown of that, and moves them back on recovery. In a Kubernetes pod the rank " +
						"stays in its container's group, whose own quota is set instead (measured over the container) and " +
						"restored exactly on recovery; a container that runs another rank is refused. GPU kernels already " +
						"queued run at full speed, so the slowdown is approximate for GPU-bound ranks.",
				},
				{
					Name: "duty-cycle", Targets: targetsLocalK8s(), Safety: SafetySafe, Reaches: []Layer{LayerWorkload},
					Description: "Alternates SIGSTOP and SIGCONT on the rank so that it runs 1/slowdown of each 100 ms period, and leaves " +
						"it running on recovery. A CPU-bound rank slows by the factor; what the rank waits for goes on while it is " +
						"stopped (GPU kernels already queued, a sleep, I/O), so a rank that waits much of its step slows less " +
						"(measured in CI: a rank that sleeps 40 ms of each ~120 ms step ran at 0.63-0.69 of its rate at slowdown 2).",
				},
			},
			Signature: Signature{
				Series:   []string{seriesJobStepSeconds, "DCGM_FI_DEV_GPU_UTIL"},
				Workload: "Step time grows by the slowdown for the whole job; the other ranks' utilisation falls as they wait in collectives. Fail-slow episodes last 30 s to 10 h in the field.",
				Silent:   true,
				Effects:  func(v Values) []Effect { return []Effect{{Kind: EffectCompute, Factor: v.Float("slowdown")}} },
			},
		},
		{
			ID:      "workload.pod-kill",
			Family:  FamilyWorkload,
			Summary: "Delete the job's pod on a node; it is rescheduled and the job restarts",
			Scope:   ScopeNode,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "grace", Type: ParamDuration, Default: "0s", Min: "0s", Max: "1h", Help: "grace period of the deletion; 0 kills at once"},
				{Name: "selector", Type: ParamString, Default: "", Help: "label selector of the job's pods (training.kubeflow.org/job-name=llm); empty takes every pod on the node that requests nvidia.com/gpu"},
			},
			Detectable: deathLayers(),
			Mechanisms: []Mechanism{
				{
					Name: "pod-delete", Targets: targetsK8s(), Planned: []string{}, Safety: SafetyDisruptive, Reaches: deathLayers(),
					Description: "Deletes the job's pods on the node (those the selector matches, DaemonSet and mirror pods never) through " +
						"the API with the grace period; their controller recreates them. Nothing to recover.",
				},
				{
					Name: "signal", Planned: targetsLocal(), Safety: SafetyDisruptive,
					Reaches: []Layer{LayerNVML, LayerDCGM, LayerExporterMetrics, LayerWorkload}, Misses: []Layer{LayerK8sAPI},
					Description: "Without Kubernetes: sends SIGTERM, then SIGKILL after the grace period, to every process of the job on the node.",
				},
			},
			Signature: Signature{
				Series:   []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", seriesJobUp, seriesJobRestartsTotal},
				Workload: "Every rank on the node dies at once; the job restarts from its last checkpoint once the pod is back.",
				Effects:  fixedEffects(Effect{Kind: EffectNode, Mode: "pod-kill"}),
			},
			Check: func(v Values) error { return checkSelector(v.String("selector"), true) },
		},
		{
			ID:      "workload.cordon-drain",
			Family:  FamilyWorkload,
			Summary: "Cordon a node and, unless told not to, drain it",
			Scope:   ScopeNode,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "drain", Type: ParamBool, Default: "true", Help: "evict the node's pods after cordoning; false only cordons"},
			},
			Detectable: []Layer{LayerWorkload, LayerK8sAPI},
			Mechanisms: []Mechanism{{
				Name: "node-cordon", Targets: targetsK8s(), Planned: []string{}, Safety: SafetyDisruptive, Reaches: []Layer{LayerWorkload, LayerK8sAPI},
				Description: "Marks the node unschedulable, noting on it that gpuchaos did, and, when draining, evicts its pods " +
					"(DaemonSet and mirror pods excepted, as kubectl drain does) through the Eviction API, retrying those a " +
					"PodDisruptionBudget holds back. Recovery uncordons only a node gpuchaos cordoned; evicted pods are not brought back.",
			}},
			Signature: Signature{
				Series:   []string{"kube_node_spec_unschedulable", seriesJobUp, seriesJobRestartsTotal},
				Workload: "Cordon alone: nothing until the job needs to reschedule. Drain: the job's ranks on the node die and the job waits for capacity elsewhere.",
				Effects: func(v Values) []Effect {
					if v.Bool("drain") {
						return []Effect{{Kind: EffectNode, Mode: "drain"}}
					}
					return []Effect{{Kind: EffectNode, Mode: "cordon"}}
				},
			},
		},
		{
			ID:      "workload.device-plugin-kill",
			Family:  FamilyWorkload,
			Summary: "Kill the node's NVIDIA device plugin; the node stops offering GPUs until it is back",
			Scope:   ScopeNode,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "selector", Type: ParamString, Default: "app=nvidia-device-plugin-daemonset", Help: "label selector of the device plugin's pods (the GPU operator's label by default)"},
			},
			Detectable: []Layer{LayerK8sAPI},
			Mechanisms: []Mechanism{{
				Name: "daemonset-pod-delete", Targets: targetsK8s(), Planned: []string{}, Safety: SafetyDisruptive, Reaches: []Layer{LayerK8sAPI},
				Description: "Deletes the device plugin pod on the node; its DaemonSet recreates it. Until it re-registers, the kubelet " +
					"reports no allocatable GPUs, so new GPU pods stay Pending; running pods keep their GPUs.",
			}},
			Signature: Signature{
				Series:   []string{"kube_node_status_allocatable"},
				Workload: "Running jobs continue; a job restarting on the node cannot get its GPUs until the plugin is back.",
				Effects:  fixedEffects(Effect{Kind: EffectNode, Mode: "device-plugin-kill"}),
			},
			// An empty selector would match every pod on the node.
			Check: func(v Values) error { return checkSelector(v.String("selector"), false) },
		},
		{
			ID:      "workload.node-taint",
			Family:  FamilyWorkload,
			Summary: "Taint a node as a remediation controller would quarantine it",
			Scope:   ScopeNode,
			Safety:  SafetyDisruptive,
			Params: []Param{
				{Name: "key", Type: ParamString, Default: "gpuchaos.dev/quarantine", Help: "the taint's key, a qualified name (prefix/name)"},
				{Name: "value", Type: ParamString, Default: "", Help: "the taint's value; empty for none"},
				{Name: "effect", Type: ParamEnum, Default: "NoExecute", Enum: []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}, Help: "NoExecute evicts the pods that do not tolerate it; NoSchedule and PreferNoSchedule only keep new ones away"},
			},
			Detectable: []Layer{LayerWorkload, LayerK8sAPI},
			Mechanisms: []Mechanism{{
				Name: "node-taint", Targets: targetsK8s(), Planned: []string{}, Safety: SafetyDisruptive, Reaches: []Layer{LayerWorkload, LayerK8sAPI},
				Description: "Adds the taint to the node, noting on it that gpuchaos did; recovery removes that taint only, never one " +
					"another controller set. A NoExecute taint makes the taint manager evict the pods without a toleration.",
			}},
			Signature: Signature{
				Series:   []string{"kube_node_spec_taint", seriesJobUp, seriesJobRestartsTotal},
				Workload: "NoSchedule and PreferNoSchedule: nothing until the job needs to reschedule. NoExecute: the job's ranks on the node die unless they tolerate the taint.",
				// A taint is not a cordon: spec.unschedulable stays false,
				// so NoSchedule plays nothing the twin models, and NoExecute
				// plays the evictions alone.
				Effects: func(v Values) []Effect {
					if v.String("effect") == "NoExecute" {
						return []Effect{{Kind: EffectNode, Mode: "pod-kill"}}
					}
					return []Effect{}
				},
			},
			Check: func(v Values) error {
				if errs := validation.IsQualifiedName(v.String("key")); len(errs) > 0 {
					return &ParamError{Param: "key", Err: errors.New(strings.Join(errs, "; "))}
				}
				if v := v.String("value"); v != "" {
					if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
						return &ParamError{Param: "value", Err: errors.New(strings.Join(errs, "; "))}
					}
				}
				return nil
			},
		},
	}
}

// checkSelector parses a label selector parameter; an empty one is
// refused unless emptyOK (where the fault gives empty a narrower meaning
// than every pod on the node).
func checkSelector(s string, emptyOK bool) error {
	if strings.TrimSpace(s) == "" {
		if emptyOK {
			return nil
		}
		return &ParamError{Param: "selector", Err: errors.New("must not be empty: it would select every pod on the node")}
	}
	if _, err := labels.Parse(s); err != nil {
		return &ParamError{Param: "selector", Err: err}
	}
	return nil
}
