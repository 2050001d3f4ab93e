package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The API group and kinds the controller serves.
const (
	Group            = "gpuchaos.dev"
	Version          = "v1alpha1"
	KindNodeFault    = "NodeFault"
	KindSchedule     = "Schedule"
	KindExperimentLs = "ExperimentList"
)

// SchemeGroupVersion is the group and version of every kind here.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// AddToScheme registers the kinds with a runtime.Scheme (a client's or a
// manager's), so typed clients can read and write them.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion,
		&Experiment{}, &ExperimentList{},
		&NodeFault{}, &NodeFaultList{},
		&Schedule{}, &ScheduleList{},
	)
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// Labels, annotations and finalizers the controller and agents agree on.
const (
	// LabelChaos on a namespace opts it in: experiments are admitted only
	// in namespaces labelled gpuchaos.dev/chaos=enabled.
	LabelChaos = "gpuchaos.dev/chaos"
	// ChaosEnabled is the value LabelChaos must carry.
	ChaosEnabled = "enabled"
	// AnnotationAbort set to "true" on an Experiment recovers every fault
	// at once (kubectl annotate experiment X gpuchaos.dev/abort=true).
	AnnotationAbort = "gpuchaos.dev/abort"
	// AnnotationGPUs on a Node is the agent's report of its GPUs, a JSON
	// list of GPUReport.
	AnnotationGPUs = "gpuchaos.dev/gpus"
	// AnnotationCordoned on a Node says gpuchaos cordoned it, naming the
	// NodeFault; a node cordoned without it is never uncordoned by
	// gpuchaos.
	AnnotationCordoned = "gpuchaos.dev/cordoned-by"
	// AnnotationTainted on a Node records the taints gpuchaos added, a
	// JSON object from each NodeFault's name to its taint (key, value,
	// effect); a taint not recorded there is never removed by gpuchaos.
	AnnotationTainted = "gpuchaos.dev/tainted-by"
	// LabelExperiment and LabelExperimentNamespace on a NodeFault name the
	// Experiment that made it (owner references cannot cross from a
	// cluster-scoped object to a namespaced one).
	LabelExperiment          = "gpuchaos.dev/experiment"
	LabelExperimentNamespace = "gpuchaos.dev/experiment-namespace"
	// LabelNode on a NodeFault is its node, so an agent lists only its own.
	LabelNode = "gpuchaos.dev/node"
	// LabelInjection on a NodeFault names the engine injection it carries
	// part of (kubetarget.NodeFaultName of the Experiment's uid and the
	// injection key): one injection aimed at pods makes a NodeFault per
	// pod, and a controller that did not make them finds them all by it.
	LabelInjection = "gpuchaos.dev/injection"
	// LabelSchedule on an Experiment names the Schedule that made it.
	LabelSchedule = "gpuchaos.dev/schedule"
	// FinalizerRecover holds an Experiment or a NodeFault until its
	// faults are recovered.
	FinalizerRecover = "gpuchaos.dev/recover"
)

// ScheduleConditionValid is the Schedule condition that is False, with
// reason InvalidSchedule or InvalidTimeZone, while spec.schedule or
// spec.timeZone cannot be read; no run starts until they are fixed.
const ScheduleConditionValid = "Valid"

// GPUReport is one GPU as an agent reports it on its Node.
type GPUReport struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	BusID string `json:"busId,omitempty"`
	Model string `json:"model,omitempty"`
}

// ExperimentPhase is where an Experiment is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Recovering;Succeeded;Failed;Aborted
type ExperimentPhase string

// Experiment phases. Succeeded, Failed and Aborted are final.
const (
	PhasePending    ExperimentPhase = "Pending"
	PhaseRunning    ExperimentPhase = "Running"
	PhaseRecovering ExperimentPhase = "Recovering"
	PhaseSucceeded  ExperimentPhase = "Succeeded"
	PhaseFailed     ExperimentPhase = "Failed"
	PhaseAborted    ExperimentPhase = "Aborted"
)

// Final says whether nothing more happens to an experiment in phase p.
func (p ExperimentPhase) Final() bool {
	return p == PhaseSucceeded || p == PhaseFailed || p == PhaseAborted
}

// Condition types of an Experiment.
const (
	// ConditionAdmitted is False with one reason when the experiment is
	// refused before anything is created on nodes.
	ConditionAdmitted = "Admitted"
	// ConditionInjected is True once every NodeFault reports applied.
	ConditionInjected = "Injected"
	// ConditionRecovered is True once every NodeFault reports recovered.
	ConditionRecovered = "Recovered"
)

// ExperimentStatus is what the controller observed of a run.
type ExperimentStatus struct {
	// Phase is where the run is.
	Phase ExperimentPhase `json:"phase,omitempty"`
	// ObservedGeneration is the spec generation this status is about.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// StartTime is when injection began; CompletionTime when the run
	// reached a final phase.
	StartTime      *metav1.Time `json:"startTime,omitempty"`
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// PlannedNodes counts the nodes the run touches.
	PlannedNodes int `json:"plannedNodes,omitempty"`
	// Passed is "3/4": expectations passed of those judged.
	Passed string `json:"passed,omitempty"`
	// Targets are the planned injections, one per NodeFault.
	// +listType=atomic
	Targets []PlannedTarget `json:"targets,omitempty"`
	// Verdicts are one per expectation.
	// +listType=atomic
	Verdicts []VerdictStatus `json:"verdicts,omitempty"`
	// Conditions are Admitted, Injected and Recovered.
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Events are the run's timeline, oldest first, at most the last
	// MaxStatusEvents.
	// +listType=atomic
	Events []EventStatus `json:"events,omitempty"`
	// EventsTotal counts every event of the run, those dropped from
	// Events included, so a follower knows what it missed.
	EventsTotal int `json:"eventsTotal,omitempty"`
}

// MaxStatusEvents bounds ExperimentStatus.Events, so a long run cannot
// grow an object past etcd's size limit.
const MaxStatusEvents = 200

// PlannedTarget is one injection of an experiment on one node.
type PlannedTarget struct {
	// NodeFault is the gpuchaos.dev/injection label of the NodeFaults
	// that carry it: the name of the one NodeFault of a gpu, rank or
	// plain node injection; an injection the target aims at pods (a
	// network fault narrowed to jobs, a job fault) makes one per pod.
	NodeFault string `json:"nodeFault"`
	Node      string `json:"node"`
	Fault     string `json:"fault"`
	Mechanism string `json:"mechanism,omitempty"`
	// Target is the inventory key (node, node/gpu, job/rank).
	Target string `json:"target"`
	// Phase mirrors the NodeFault's.
	Phase NodeFaultPhase `json:"phase,omitempty"`
}

// VerdictStatus is one expectation's verdict.
type VerdictStatus struct {
	Name     string `json:"name"`
	Detector string `json:"detector,omitempty"`
	// Result is detected, late, missed or error.
	Result string `json:"result"`
	// TimeToDetect is from injection to the first observation that held.
	TimeToDetect *metav1.Duration `json:"timeToDetect,omitempty"`
	Within       metav1.Duration  `json:"within"`
	Detail       string           `json:"detail,omitempty"`
	Passed       bool             `json:"passed"`
}

// EventStatus is one line of a run's timeline.
type EventStatus struct {
	Time   metav1.Time `json:"time"`
	Kind   string      `json:"kind"`
	Name   string      `json:"name,omitempty"`
	Detail string      `json:"detail,omitempty"`
}

// ExperimentList is a list of Experiments.
// +kubebuilder:object:root=true
type ExperimentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Experiment `json:"items"`
}

// NodeFault is the desired state of one fault on one node: the controller
// creates it, the node's agent applies it and reports. It is level
// triggered: the agent makes the node match Spec.Action whenever it sees
// the object, so a missed event or a restart changes nothing.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gcnf,categories=gpuchaos
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Fault",type=string,JSONPath=`.spec.fault`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Expires",type=date,JSONPath=`.spec.expiresAt`
type NodeFault struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NodeFaultSpec   `json:"spec"`
	Status            NodeFaultStatus `json:"status,omitempty"`
}

// NodeFaultAction is what the node should look like.
// +kubebuilder:validation:Enum=Apply;Recover
type NodeFaultAction string

// NodeFault actions.
const (
	ActionApply   NodeFaultAction = "Apply"
	ActionRecover NodeFaultAction = "Recover"
)

// NodeFaultSpec is one fault on one node.
// +kubebuilder:validation:XValidation:rule="self.nodeName == oldSelf.nodeName && self.fault == oldSelf.fault && self.target == oldSelf.target",message="nodeName, fault and target are immutable"
// +kubebuilder:validation:XValidation:rule="oldSelf.action != 'Recover' || self.action == 'Recover'",message="a recovered NodeFault cannot be applied again"
type NodeFaultSpec struct {
	// NodeName is the node whose agent applies the fault.
	// +kubebuilder:validation:MinLength=1
	NodeName string `json:"nodeName"`
	// Fault is a catalogue id (family.name).
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]+\.[a-z0-9.-]+$`
	Fault string `json:"fault"`
	// Mechanism is the catalogue mechanism the controller chose.
	Mechanism string `json:"mechanism"`
	// Params are the fault's resolved parameters, as text.
	Params map[string]string `json:"params,omitempty"`
	// Target is what on the node the fault acts on.
	Target NodeFaultTarget `json:"target"`
	// Action is Apply while the fault should be in effect and Recover once
	// it should be undone.
	Action NodeFaultAction `json:"action"`
	// ExpiresAt is when the agent recovers on its own, whether or not it
	// can reach the API server.
	ExpiresAt metav1.Time `json:"expiresAt"`
}

// NodeFaultTarget is the inventory reference the fault acts on.
type NodeFaultTarget struct {
	// Kind is node, gpu, rank or job (the fault's scope). A node fault
	// with PodUID acts in that pod's network namespace instead of the
	// node's; a job fault always names one pod of the job (Job, Pod,
	// PodUID) and acts from it, one NodeFault per pod it reaches.
	// +kubebuilder:validation:Enum=node;gpu;rank;job
	Kind string `json:"kind"`
	// GPU is the GPU index on the node (gpu, rank); UUID when known.
	GPU  *int   `json:"gpu,omitempty"`
	UUID string `json:"uuid,omitempty"`
	// Job and Rank name a training rank; Pod is its pod (namespace/name)
	// and PodUID the pod's uid, which the agent finds in the cgroups.
	Job    string `json:"job,omitempty"`
	Rank   *int   `json:"rank,omitempty"`
	Pod    string `json:"pod,omitempty"`
	PodUID string `json:"podUID,omitempty"`
	// Key is the inventory key the engine planned (node, node/gpu).
	Key string `json:"key"`
}

// NodeFaultPhase is what the agent last did.
// +kubebuilder:validation:Enum=Pending;Applied;Recovered;Failed
type NodeFaultPhase string

// NodeFault phases.
const (
	NodeFaultPending   NodeFaultPhase = "Pending"
	NodeFaultApplied   NodeFaultPhase = "Applied"
	NodeFaultRecovered NodeFaultPhase = "Recovered"
	NodeFaultFailed    NodeFaultPhase = "Failed"
)

// NodeFaultStatus is the agent's report.
type NodeFaultStatus struct {
	Phase NodeFaultPhase `json:"phase,omitempty"`
	// AppliedAt and RecoveredAt are the agent's clock.
	AppliedAt   *metav1.Time `json:"appliedAt,omitempty"`
	RecoveredAt *metav1.Time `json:"recoveredAt,omitempty"`
	// Message is the agent's last word: an error, or how it recovered
	// (on expiry, target gone).
	Message string `json:"message,omitempty"`
	// Agent names the agent (pod) that reported.
	Agent string `json:"agent,omitempty"`
	// ObservedGeneration is the spec generation the report is about.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// NodeFaultList is a list of NodeFaults.
// +kubebuilder:object:root=true
type NodeFaultList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeFault `json:"items"`
}

// ConcurrencyPolicy says what a Schedule does when a run is due while the
// previous one is still going, as a CronJob's does.
// +kubebuilder:validation:Enum=Forbid;Replace;Allow
type ConcurrencyPolicy string

// Concurrency policies.
const (
	ForbidConcurrent  ConcurrencyPolicy = "Forbid"
	ReplaceConcurrent ConcurrencyPolicy = "Replace"
	AllowConcurrent   ConcurrencyPolicy = "Allow"
)

// Schedule runs an experiment on a cron schedule.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gcs,categories=gpuchaos
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 54",message="metadata.name: at most 54 characters, so that a run's name (the name, a dash and its due minute) stays within the 63 an Experiment may have"
type Schedule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ScheduleSpec   `json:"spec"`
	Status            ScheduleStatus `json:"status,omitempty"`
}

// ScheduleSpec is when and what to run.
type ScheduleSpec struct {
	// Schedule is a cron expression (five fields, or @hourly, @every 1h).
	// +kubebuilder:validation:MinLength=1
	Schedule string `json:"schedule"`
	// TimeZone is an IANA zone name; empty is UTC.
	TimeZone string `json:"timeZone,omitempty"`
	// ConcurrencyPolicy defaults to Forbid.
	// +kubebuilder:default=Forbid
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`
	// Suspend stops new runs; running ones go on.
	Suspend bool `json:"suspend,omitempty"`
	// SuccessfulHistoryLimit and FailedHistoryLimit keep that many
	// finished Experiments; defaults 3 and 1.
	// +kubebuilder:validation:Minimum=0
	SuccessfulHistoryLimit *int32 `json:"successfulHistoryLimit,omitempty"`
	// +kubebuilder:validation:Minimum=0
	FailedHistoryLimit *int32 `json:"failedHistoryLimit,omitempty"`
	// Experiment is the spec each run gets.
	Experiment ExperimentSpec `json:"experiment"`
}

// ScheduleStatus is what the Schedule last did.
type ScheduleStatus struct {
	// LastScheduleTime is the due time of the newest run started.
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// LastSkippedTime is the newest due time that started no run: under
	// Forbid while one was still running, or found later than the
	// controller's starting deadline (it was down, or the Schedule was
	// suspended then). A due time is acted on once, run or skipped.
	LastSkippedTime *metav1.Time `json:"lastSkippedTime,omitempty"`
	// Active names the Experiments of this Schedule still running.
	// +listType=atomic
	Active []string `json:"active,omitempty"`
	// Conditions carry a bad cron expression or time zone.
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ScheduleList is a list of Schedules.
// +kubebuilder:object:root=true
type ScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Schedule `json:"items"`
}
