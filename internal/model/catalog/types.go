package catalog

// Family groups faults by the part of the stack they disturb (DESIGN.md §3).
type Family string

// The fault families. Every fault id starts with its family and a dot.
const (
	FamilyHardware   Family = "hardware"
	FamilyExhaustion Family = "exhaustion"
	FamilyNCCL       Family = "nccl"
	FamilyNetwork    Family = "network"
	FamilyEBPF       Family = "ebpf"
	FamilyCheckpoint Family = "checkpoint"
	FamilyNUMA       Family = "numa"
	FamilyWorkload   Family = "workload"
)

// Families lists every family in the order reports show them.
func Families() []Family {
	return []Family{FamilyHardware, FamilyExhaustion, FamilyNCCL, FamilyNetwork,
		FamilyEBPF, FamilyCheckpoint, FamilyNUMA, FamilyWorkload}
}

// Safety says how much harm a fault can do; the engine refuses
// SafetyHardwareRisk without an explicit allow flag (DESIGN.md §7).
type Safety string

// Safety classes, from least to most dangerous.
const (
	SafetySafe         Safety = "safe"
	SafetyDisruptive   Safety = "disruptive"
	SafetyHardwareRisk Safety = "hardware-risk"
)

// Layer is a place where monitoring can see a fault. A mechanism states
// honestly which layers it reaches: a kmsg line reaches syslog watchers but
// not NVML, and DCGM's cache injection reaches only DCGM.
type Layer string

// The observable layers.
const (
	LayerKernelLog       Layer = "kernel-log"
	LayerNVML            Layer = "nvml"
	LayerDCGM            Layer = "dcgm"
	LayerExporterMetrics Layer = "exporter-metrics"
	LayerWorkload        Layer = "workload"
	LayerK8sAPI          Layer = "k8s-api"
)

// Scope is the kind of object one injection of a fault touches.
type Scope string

// Scopes. The engine expands a target selector into objects of the fault's
// scope before it calls an injector (an injector touches one target).
const (
	ScopeGPU  Scope = "gpu"
	ScopeNode Scope = "node"
	ScopeRank Scope = "rank"
	ScopeJob  Scope = "job"
)

// ParamType is the type of a fault parameter's value.
type ParamType string

// Parameter types. Values arrive as YAML scalars and are parsed by type.
const (
	ParamInt      ParamType = "int"
	ParamFloat    ParamType = "float"
	ParamDuration ParamType = "duration" // Go syntax: 30s, 5m, 1h30m
	ParamBytes    ParamType = "bytes"    // integer bytes or 512Mi, 2Gi, 10G
	ParamString   ParamType = "string"
	ParamEnum     ParamType = "enum"
	ParamBool     ParamType = "bool"
	ParamCIDR     ParamType = "cidr"
)

// Param describes one typed parameter of a fault.
type Param struct {
	Name    string    `json:"name"`
	Type    ParamType `json:"type"`
	Default string    `json:"default"`
	// Min and Max bound numeric, duration and byte values (inclusive), in
	// the same syntax as Default; empty means unbounded.
	Min  string   `json:"min,omitempty"`
	Max  string   `json:"max,omitempty"`
	Enum []string `json:"enum,omitempty"`
	Unit string   `json:"unit,omitempty"`
	Help string   `json:"help"`
}

// Mechanism is one way to cause a fault on one kind of target.
type Mechanism struct {
	Name string `json:"name"`
	// Targets lists the targets (twin, local, k8s) where the mechanism is
	// implemented: internal/fault/all has an injector for it on each, and a
	// test holds the two to each other.
	Targets []string `json:"targets"`
	// Planned lists the targets where the mechanism is declared but not
	// built yet. Choosing it there fails with ErrPlanned.
	Planned []string `json:"planned"`
	// Reaches lists the layers that observe what this mechanism does;
	// Misses the layers a real occurrence would reach but this does not.
	Reaches     []Layer `json:"reaches"`
	Misses      []Layer `json:"misses,omitempty"`
	Safety      Safety  `json:"safety"`
	Description string  `json:"description"`
	// Env, set only on mechanisms that relaunch the workload with a changed
	// environment ("env"), returns the KEY=VALUE pairs the mechanism sets
	// for the fault's resolved parameters. It is the one source of which
	// variables a fault sets: `gpuchaos exec` applies exactly these, and
	// the Description is written from the same data.
	Env func(Values) []string `json:"-"`

	// xidNote qualifies "the XID N line" in the description of a
	// kernel-log mechanism whose code is the signature's; buildCatalogue
	// writes that description once the code is known (completeXID).
	xidNote string
}

// Signature says what a real occurrence of the fault changes. The twin plays
// Effects; coverage and people read the rest.
type Signature struct {
	// Series names the exporter series a real occurrence moves.
	Series []string `json:"series,omitempty"`
	// Logs are examples of kernel log lines it writes.
	Logs []string `json:"logs,omitempty"`
	// Workload says what the training job sees.
	Workload string `json:"workload,omitempty"`
	// Silent is true when no GPU metric changes (NUMA misplacement).
	Silent bool `json:"silent,omitempty"`
	// Effects builds the twin-playable effects from the fault's resolved
	// parameters. Never nil in the catalogue.
	Effects func(Values) []Effect `json:"-"`
	// XID is the code of the driver's XID line a real occurrence writes to
	// the kernel log: 0 when it writes none, or when the code is one of
	// the fault's parameters (hardware.xid). It is the one place a fault's
	// code is written: the catalogue builds from it the first of Logs,
	// the kernel-log mechanism's description and, for a fault that names
	// no effects of its own, the XID effect the twin plays; the kernel-log
	// injector (internal/fault/xidfault) writes the line of this code.
	XID int `json:"-"`
}

// Fault is one entry of the catalogue.
type Fault struct {
	ID         string      `json:"id"`
	Family     Family      `json:"family"`
	Summary    string      `json:"summary"`
	Scope      Scope       `json:"scope"`
	Safety     Safety      `json:"safety"`
	Params     []Param     `json:"params"`
	Mechanisms []Mechanism `json:"mechanisms"`
	Signature  Signature   `json:"signature"`
	// Detectable names the layers where a real occurrence shows, the union
	// a complete monitoring stack could use.
	Detectable []Layer `json:"detectable"`
	// Check validates relations between resolved values, or values a
	// single bound cannot express (an XID code that is not in the table).
	// It returns a *ParamError naming the parameter. Nil means no check.
	Check func(Values) error `json:"-"`
}
