package v1alpha1

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GroupVersion is the apiVersion every gpuchaos object carries.
const GroupVersion = "gpuchaos.dev/v1alpha1"

// KindExperiment is the kind of an Experiment object.
const KindExperiment = "Experiment"

// Experiment is one chaos experiment: what to break, where, for how long,
// and what must notice. People write it as a YAML file for `gpuchaos run`;
// the Kubernetes controller serves it as a namespaced custom resource and
// writes its Status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gcx,categories=gpuchaos
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.plannedNodes`
// +kubebuilder:printcolumn:name="Passed",type=string,JSONPath=`.status.passed`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:object:generate=false
type Experiment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ExperimentSpec   `json:"spec"`
	Status            ExperimentStatus `json:"status,omitzero"`

	// src records where Load found each field, for Locate; nil for
	// experiments built in code or decoded from the API server.
	src *sourceMap `json:"-"`
}

// ExperimentSpec is the desired experiment.
type ExperimentSpec struct {
	// Selector picks the targets every fault is injected into.
	Selector Selector `json:"selector"`
	// Faults are injected together at the start of the fault window.
	Faults []FaultSpec `json:"faults"`
	// Duration is how long the faults stay injected before recovery.
	Duration Duration `json:"duration"`
	// SteadyState checks must all hold before anything is injected; the
	// experiment ends in error otherwise.
	SteadyState []Check `json:"steadyState,omitempty"`
	// Expectations say which detector must notice and how soon.
	Expectations []Expectation `json:"expectations,omitempty"`
	// AbortWhen checks end the fault window early, with recovery, as soon
	// as any holds.
	AbortWhen []Check `json:"abortWhen,omitempty"`
	// BlastRadius caps what one run may touch; zero fields take defaults.
	BlastRadius BlastRadius `json:"blastRadius,omitempty"`
	// AllowHardwareRisk must be true to run a hardware-risk mechanism.
	AllowHardwareRisk bool `json:"allowHardwareRisk,omitempty"`
}

// SelectorMode says how many of the matching targets are taken.
type SelectorMode string

// Selector modes, as in Chaos Mesh.
const (
	ModeOne     SelectorMode = "one"     // one matching target, chosen by the seed
	ModeAll     SelectorMode = "all"     // every matching target
	ModeFixed   SelectorMode = "fixed"   // Value targets
	ModePercent SelectorMode = "percent" // Value percent of the matching targets, at least one
)

// Selector picks targets. Fields combine with AND; an empty list matches
// everything at that level, but a selector must name at least one of
// nodes, nodeSelector, gpus or jobs.
type Selector struct {
	Nodes        []string          `json:"nodes,omitempty"`
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// GPUs are indexes ("3") or UUIDs ("GPU-…").
	GPUs []string `json:"gpus,omitempty"`
	// Jobs are training job names; Ranks narrows to ranks of those jobs.
	Jobs  []string     `json:"jobs,omitempty"`
	Ranks []int        `json:"ranks,omitempty"`
	Mode  SelectorMode `json:"mode"`
	// Value is the count for fixed and the percentage for percent.
	Value int `json:"value,omitempty"`
}

// FaultSpec is one fault of an experiment.
type FaultSpec struct {
	// ID is a catalogue id, family.name.
	ID string `json:"id"`
	// Mechanism picks one of the fault's mechanisms; empty takes the
	// first that runs on the target.
	Mechanism string `json:"mechanism,omitempty"`
	// Params override the fault's defaults; values are strings, numbers
	// or booleans.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Params map[string]ParamValue `json:"params,omitempty"`
}

// Expectation is one thing that must notice the fault.
type Expectation struct {
	// Name labels the verdict; defaults to the detector's name.
	Name string `json:"name,omitempty"`
	// Detector names a built-in detector; Probe defines one inline.
	// Exactly one of the two is set.
	Detector string     `json:"detector,omitempty"`
	Probe    *ProbeSpec `json:"probe,omitempty"`
	// Within is the deadline after injection: detected later is late.
	Within Duration `json:"within"`
}

// Check is a named probe whose condition must hold (steady state) or must
// not (abort).
type Check struct {
	Name  string    `json:"name"`
	Probe ProbeSpec `json:"probe"`
}

// ProbeSpec defines a probe; exactly one field is set.
type ProbeSpec struct {
	Detector  string          `json:"detector,omitempty"`
	Threshold *ThresholdProbe `json:"threshold,omitempty"`
	Log       *LogProbe       `json:"log,omitempty"`
	// Prometheus asks a real Prometheus server through its HTTP API; only
	// targets with a server to ask (the live twin) run it.
	Prometheus *PrometheusProbe `json:"prometheus,omitempty"`
	// Workload judges a training job on its own metrics relative to the
	// run (before injection, after recovery), so it is an expectation
	// only: steady-state and abort checks cannot use it.
	Workload *WorkloadProbe `json:"workload,omitempty"`
	// Kubernetes asks the API server about the nodes and pods the
	// experiment touches; only the k8s target runs it.
	Kubernetes *KubernetesProbe `json:"kubernetes,omitempty"`
}

// Kubernetes checks: what the cluster's own remediation does to a node or
// its pods after a fault.
const (
	// KubeNodeCondition holds when a touched node has condition
	// ConditionType with Status (default "True"), and Reason when set:
	// node-problem-detector's or NVSentinel's verdict on the node.
	KubeNodeCondition = "nodeCondition"
	// KubeTaint holds when a touched node carries taint Key (with Value
	// and Effect when set): a quarantine.
	KubeTaint = "taint"
	// KubeLabel holds when a touched node carries label Key (=Value when
	// set).
	KubeLabel = "label"
	// KubeUnschedulable holds when a touched node is cordoned.
	KubeUnschedulable = "unschedulable"
	// KubePodPhase holds when a pod matching Selector in Namespace is in
	// Phase; on the touched nodes unless AnyNode.
	KubePodPhase = "podPhase"
	// KubePodRestarts holds when a matching pod's containers restarted
	// MinRestarts times or more since the experiment started.
	KubePodRestarts = "podRestarts"
	// KubeEvent holds when an Event with Reason (and Type when set) names
	// a touched node or a pod on one, newer than the experiment's start.
	KubeEvent = "event"
	// KubePodsEvicted holds when no pod matching Selector in Namespace
	// runs on the touched nodes any more: drained.
	KubePodsEvicted = "podsEvicted"
	// KubeJobResumed holds when every pod matching Selector in Namespace
	// is Running and Ready again after the fault, on any node: the job
	// (a PyTorchJob's, a JobSet's or an indexed Job's pods) resumed.
	KubeJobResumed = "jobResumed"
)

// KubeChecks lists the Kubernetes checks, in the order the docs give them.
var KubeChecks = []string{KubeNodeCondition, KubeTaint, KubeLabel, KubeUnschedulable, KubePodPhase, KubePodRestarts, KubeEvent, KubePodsEvicted, KubeJobResumed}

// KubernetesProbe checks the cluster's state through the API server. Check
// says what is checked, and the fields it names say about what.
type KubernetesProbe struct {
	// +kubebuilder:validation:Enum=nodeCondition;taint;label;unschedulable;podPhase;podRestarts;event;podsEvicted;jobResumed
	Check string `json:"check"`
	// ConditionType and Status name a node condition (nodeCondition).
	ConditionType string `json:"conditionType,omitempty"`
	Status        string `json:"status,omitempty"`
	// Reason narrows a node condition or names an Event's reason.
	Reason string `json:"reason,omitempty"`
	// Key, Value and Effect name a taint or a label; an empty Value or
	// Effect matches any.
	Key    string `json:"key,omitempty"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect,omitempty"`
	// Type is an Event's type (Normal, Warning); empty matches either.
	Type string `json:"type,omitempty"`
	// Namespace and Selector (a label selector such as
	// training.kubeflow.org/job-name=llm) pick pods.
	Namespace string `json:"namespace,omitempty"`
	Selector  string `json:"selector,omitempty"`
	// Phase is a pod phase (podPhase).
	Phase string `json:"phase,omitempty"`
	// MinRestarts is the restart count that holds (podRestarts); default 1.
	MinRestarts int `json:"minRestarts,omitempty"`
	// AnyNode widens the pod checks from the touched nodes to all.
	AnyNode bool `json:"anyNode,omitempty"`
}

// Workload checks, the verdicts an ML engineer asks of a fault.
const (
	// WorkloadResumed: after a restart the job resumes training from its
	// newest checkpoint, or at most MaxFallback checkpoints older.
	WorkloadResumed = "resumed"
	// WorkloadLostWork: the steps thrown away by a restart (the highest
	// step reached minus the step resumed from) are at most MaxLostSteps,
	// by default the job's checkpoint interval as its metrics show it.
	WorkloadLostWork = "lost-work"
	// WorkloadRateRecovered: after the step rate fell, it is back within
	// Tolerance of its baseline, held For.
	WorkloadRateRecovered = "rate-recovered"
	// WorkloadSlowdown: the step rate falls Tolerance or more below its
	// baseline, held For: a silent slowdown noticed from the job itself.
	WorkloadSlowdown = "slowdown"
	// WorkloadStalled: the job makes no steps, held For.
	WorkloadStalled = "stalled"
	// WorkloadGoodput: the useful steps in the expectation's whole window
	// (within) over what the baseline rate would have made are at least Min.
	WorkloadGoodput = "goodput"
)

// WorkloadChecks lists the workload checks, in the order the docs give them.
var WorkloadChecks = []string{WorkloadResumed, WorkloadLostWork, WorkloadRateRecovered, WorkloadSlowdown, WorkloadStalled, WorkloadGoodput}

// WorkloadProbe judges a training job on the series it exports
// (gpuchaos_job_step_total, gpuchaos_job_steps_per_second,
// gpuchaos_job_last_checkpoint_step, gpuchaos_job_resumed_from_step and the
// supervisor's gpuchaos_job_restarts_total): the reference workload and the
// twin export them. Unlike a detector it measures something and can fail
// its bound, and its within is the time from injection by which the
// measurement must be made (for goodput: the window it is measured over).
type WorkloadProbe struct {
	Check string `json:"check"`
	// Job names the job; empty means every job the experiment touches.
	Job string `json:"job,omitempty"`
	// MaxFallback is how many checkpoints older than the newest a resume
	// may start from (resumed); default 0.
	MaxFallback *int `json:"maxFallback,omitempty"`
	// MaxLostSteps bounds the lost work (lost-work); default: the largest
	// gap between the checkpoint steps the job reported before the fault.
	MaxLostSteps *int64 `json:"maxLostSteps,omitempty"`
	// Tolerance is the share of the baseline rate that counts as the
	// same (rate-recovered) or as slower (slowdown); default 0.05.
	Tolerance *float64 `json:"tolerance,omitempty"`
	// Min is the lowest passing goodput, between 0 and 1 (goodput).
	Min *float64 `json:"min,omitempty"`
	// Baseline is how long before injection the baseline step rate is
	// taken over (its median); default 30s.
	Baseline Duration `json:"baseline,omitempty"`
	// For is how long a rate condition must hold; default 10s for
	// rate-recovered, 0 (one observation) for slowdown and stalled.
	For Duration `json:"for,omitempty"`
}

// ThresholdProbe holds when metric OP value holds for every sample of a
// matching series over the last For (PromQL: `metric{labels} OP value`
// with `for: For`).
type ThresholdProbe struct {
	Metric string            `json:"metric"`
	Labels map[string]string `json:"labels,omitempty"`
	Op     string            `json:"op"`
	Value  float64           `json:"value"`
	For    Duration          `json:"for,omitempty"`
	// Absent holds when no matching series has a sample in the last For
	// (PromQL absent_over_time); Op and Value are then ignored.
	Absent bool `json:"absent,omitempty"`
}

// LogProbe holds when a kernel log line matching Pattern (RE2) appears.
type LogProbe struct {
	Pattern string `json:"pattern"`
}

// PrometheusProbe asks a Prometheus server's HTTP API (/api/v1/query) at
// the moment of each observation. Exactly one of Alert and Query is set.
//
// Alert holds while the named alert is firing: the series
// ALERTS{alertname="Alert",alertstate="firing"} exists. Query holds, with
// Op and Value, when any element of the result satisfies `element Op
// Value`; with Value and Tolerance, when any element is within Tolerance
// of Value; with neither, when the result is not empty (the way an alert
// rule's expression fires). The labels of the elements that hold say which
// GPU, node or job the observation is about (Hostname or node, gpu, UUID,
// pci_bus_id, exported_job or job).
type PrometheusProbe struct {
	// URL is the server's base URL (http://prometheus:9090); empty takes
	// the target's default.
	URL   string `json:"url,omitempty"`
	Alert string `json:"alert,omitempty"`
	Query string `json:"query,omitempty"`
	// Op is one of > < >= <= == != and needs Value.
	Op        string   `json:"op,omitempty"`
	Value     *float64 `json:"value,omitempty"`
	Tolerance *float64 `json:"tolerance,omitempty"`
}

// BlastRadius caps the targets of one run.
type BlastRadius struct {
	// MaxNodes defaults to 1, MaxGPUs to 8.
	MaxNodes int `json:"maxNodes,omitempty"`
	MaxGPUs  int `json:"maxGPUs,omitempty"`
	// MaxConcurrent caps experiments running at once on the same targets
	// (the controller enforces it); defaults to 1.
	MaxConcurrent int `json:"maxConcurrent,omitempty"`
}

// Default blast-radius caps.
const (
	DefaultMaxNodes      = 1
	DefaultMaxGPUs       = 8
	DefaultMaxConcurrent = 1
)

// Duration is a time.Duration written as a Go duration string ("90s").
// +kubebuilder:validation:Type=string
type Duration struct {
	time.Duration
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.Duration.String())
}

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"90s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q", s)
	}
	d.Duration = v
	return nil
}

// ParamValue is one fault parameter as written: a YAML scalar kept as text
// so the catalogue can parse it by the parameter's type.
type ParamValue string

// UnmarshalJSON accepts a string, number or boolean.
func (p *ParamValue) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case string:
		*p = ParamValue(x)
	case float64:
		*p = ParamValue(string(b))
	case bool:
		*p = ParamValue(strconv.FormatBool(x))
	default:
		return fmt.Errorf("parameter must be a scalar, got %s", b)
	}
	return nil
}
