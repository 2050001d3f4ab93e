package twin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/model/limitread"
)

// ClusterSpec describes a simulated cluster: hardware, variability, failure
// rates, what the exporter exports and the training jobs. The zero value of
// a field means its documented default; ParseClusterSpec and Default return
// specs with every default filled in, so two specs compare equal when they
// describe the same cluster.
type ClusterSpec struct {
	// Name labels the cluster in reports.
	Name  string    `json:"name" yaml:"name"`
	Nodes NodesSpec `json:"nodes" yaml:"nodes"`
	// Network is the inter-node fabric.
	Network NetworkSpec `json:"network" yaml:"network"`
	// Storage is where checkpoints go.
	Storage StorageSpec `json:"storage" yaml:"storage"`
	// AmbientCelsius is the inlet temperature; default 25.
	AmbientCelsius float64 `json:"ambientCelsius" yaml:"ambientCelsius"`
	// ThermalTimeConstant is the first-order time constant of GPU
	// temperature; default 90s (a loaded HGX board reaches 63 % of a step
	// change in one to two minutes).
	ThermalTimeConstant time.Duration `json:"thermalTimeConstant" yaml:"thermalTimeConstant"`
	// PhysicsStep is how often GPU physics is integrated; default 1s.
	PhysicsStep time.Duration `json:"physicsStep" yaml:"physicsStep"`
	// Variability is the per-GPU performance spread.
	Variability VariabilitySpec `json:"variability" yaml:"variability"`
	// FailureRates are background failures per GPU-hour by class (see
	// FailureClasses); they fire only with Options.BackgroundFailures.
	FailureRates map[string]float64 `json:"failureRates" yaml:"failureRates"`
	// RepairTime is how long a background hardware failure keeps its GPU
	// or node out before the twin repairs it; default 30m.
	RepairTime time.Duration `json:"repairTime" yaml:"repairTime"`
	// Exporter says which series dcgm-exporter exports and how often.
	Exporter ExporterSpec `json:"exporter" yaml:"exporter"`
	// Jobs are the training jobs, placed on GPUs in node order.
	Jobs []JobSpec `json:"jobs" yaml:"jobs"`
}

// NodesSpec describes the nodes either by count (all alike) or as an
// explicit list; the fields beside List are the defaults of its entries.
// After defaults are applied List always holds every node.
type NodesSpec struct {
	// Count nodes named NamePrefix0, NamePrefix1…; default 2.
	Count int `json:"count" yaml:"count"`
	// NamePrefix defaults to gpu-node-.
	NamePrefix string `json:"namePrefix" yaml:"namePrefix"`
	// GPUsPerNode defaults to 8.
	GPUsPerNode int `json:"gpusPerNode" yaml:"gpusPerNode"`
	// Model is a preset name (A100, H100, H200, B200); default H200.
	Model string `json:"model" yaml:"model"`
	// NUMASockets splits a node's GPUs evenly over sockets (GPUs 0–3 on
	// socket 0, 4–7 on 1 with the default 2).
	NUMASockets int `json:"numaSockets" yaml:"numaSockets"`
	// NodesPerRack groups nodes into racks rack-0, rack-1…; default 4.
	NodesPerRack int `json:"nodesPerRack" yaml:"nodesPerRack"`
	// NodesPerNVLinkDomain is 1 for HGX boards (NVLink stays inside the
	// node) and larger for rack-scale NVLink (NVL72); default 1.
	NodesPerNVLinkDomain int `json:"nodesPerNVLinkDomain" yaml:"nodesPerNVLinkDomain"`
	// Labels are added to every node.
	Labels map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	// List names the nodes explicitly.
	List []NodeSpec `json:"list" yaml:"list"`
}

// NodeSpec is one node.
type NodeSpec struct {
	Name         string            `json:"name" yaml:"name"`
	GPUs         int               `json:"gpus" yaml:"gpus"`
	Model        string            `json:"model" yaml:"model"`
	NUMASockets  int               `json:"numaSockets" yaml:"numaSockets"`
	Rack         string            `json:"rack" yaml:"rack"`
	NVLinkDomain string            `json:"nvlinkDomain" yaml:"nvlinkDomain"`
	Labels       map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
}

// NetworkSpec is the inter-node network and collective model.
type NetworkSpec struct {
	// NodeBandwidthGBps is a node's inter-node bandwidth in GB/s; default
	// 400 (8 rails × 400 Gb/s). Each GPU gets an equal share.
	NodeBandwidthGBps float64 `json:"nodeBandwidthGBps" yaml:"nodeBandwidthGBps"`
	// Latency is the one-way latency per hop; default 5µs.
	Latency time.Duration `json:"latency" yaml:"latency"`
	// CollectiveEfficiency is the fraction of the one-way link bandwidth a
	// ring all-reduce reaches as bus bandwidth; default 0.67 (DESIGN.md §5:
	// 301 GB/s busbw over 450 GB/s one-way NVLink4 on H200).
	CollectiveEfficiency float64 `json:"collectiveEfficiency" yaml:"collectiveEfficiency"`
	// PCIeFallbackFactor is the share of NVLink bandwidth left when NVLink
	// is down and NCCL falls back to PCIe/SHM; default 0.09 (DESIGN.md §5:
	// 28 of 301 GB/s with NCCL_P2P_DISABLE=1).
	PCIeFallbackFactor float64 `json:"pcieFallbackFactor" yaml:"pcieFallbackFactor"`
}

// StorageSpec is the checkpoint storage.
type StorageSpec struct {
	// BandwidthGBps is the aggregate write bandwidth; default 10.
	BandwidthGBps float64 `json:"bandwidthGBps" yaml:"bandwidthGBps"`
}

// VariabilitySpec is the per-GPU slowdown distribution: each GPU's compute
// time is multiplied by a factor drawn once at New.
type VariabilitySpec struct {
	// Kind is lognormal (default), pal (sampled from the embedded PAL
	// per-GPU factors) or none.
	Kind string `json:"kind" yaml:"kind"`
	// Sigma of the lognormal; default 0.03 (p5–p95 ≈ 0.95–1.05).
	Sigma float64 `json:"sigma" yaml:"sigma"`
	// Class is the PAL application class column, A–D; default A.
	Class string `json:"class" yaml:"class"`
}

// ExporterSpec says what the nodes' exporters export.
type ExporterSpec struct {
	// ScrapeInterval defaults to 30s, dcgm-exporter's collection interval.
	ScrapeInterval time.Duration `json:"scrapeInterval" yaml:"scrapeInterval"`
	// Counters are the default-on DCGM fields; default DefaultCounters().
	Counters []string `json:"counters" yaml:"counters"`
	// OptIn adds counters that are off by default (OptInCounters()).
	OptIn []string `json:"optIn" yaml:"optIn"`
	// Exporters names the exporters the fleet runs (Exporters() lists the
	// known names); default DefaultExporters(). dcgm-exporter's series and
	// the twin's own are exported whatever it says; another GPU exporter
	// named here (dcgm-exporter-1.x, nvidia_gpu_exporter, …) adds its
	// series, read off the same GPUs.
	Exporters []string `json:"exporters" yaml:"exporters"`
}

// Checkpoint modes.
const (
	CheckpointSync  = "sync"
	CheckpointAsync = "async"
)

// JobSpec is one data-parallel training job.
type JobSpec struct {
	Name string `json:"name" yaml:"name"`
	// GPUs "all" takes every GPU; otherwise Ranks GPUs are taken in node
	// order after the jobs listed before it.
	GPUs  string `json:"gpus,omitempty" yaml:"gpus,omitempty"`
	Ranks int    `json:"ranks,omitempty" yaml:"ranks,omitempty"`
	// StepCompute is one rank's compute time per step on a median GPU at
	// full clock. Alternatively FLOPsPerStep (per rank) and MFU give it as
	// FLOPs / (peak bf16 × MFU). Default 0.9s.
	StepCompute  time.Duration `json:"stepCompute,omitempty" yaml:"stepCompute,omitempty"`
	FLOPsPerStep float64       `json:"flopsPerStep,omitempty" yaml:"flopsPerStep,omitempty"`
	MFU          float64       `json:"mfu,omitempty" yaml:"mfu,omitempty"`
	// GradientBytes are all-reduced every step; default 7e9 (a 3.5B
	// parameter model in bf16).
	GradientBytes float64 `json:"gradientBytes" yaml:"gradientBytes"`
	// MemoryGiB is each rank's working set in HBM; default 60 % of the
	// smallest GPU's memory.
	MemoryGiB float64 `json:"memoryGiB" yaml:"memoryGiB"`
	// CheckpointInterval defaults to 10m; CheckpointGB (all ranks
	// together) to 50.
	CheckpointInterval time.Duration `json:"checkpointInterval" yaml:"checkpointInterval"`
	CheckpointGB       float64       `json:"checkpointGB" yaml:"checkpointGB"`
	// CheckpointMode is sync (the job stalls for the whole write) or async
	// (default: it stalls for AsyncStall while state is copied to host
	// memory, then writes in the background).
	CheckpointMode string        `json:"checkpointMode" yaml:"checkpointMode"`
	AsyncStall     time.Duration `json:"asyncStall" yaml:"asyncStall"`
	// RestartCost is the time from a crash to training again (rescheduling,
	// process start, NCCL init, checkpoint load); default 3m.
	RestartCost time.Duration `json:"restartCost" yaml:"restartCost"`
	// StopGrace is added to RestartCost when one rank dies and the others
	// live on: they wait in their next collective, where they do not
	// answer the launcher's SIGTERM, and are killed only when its grace
	// period ends (measured on 2× H200: 2.0 s when a rank got out on
	// SIGTERM, 5.2 s at a 5 s grace). Default 0.
	StopGrace time.Duration `json:"stopGrace" yaml:"stopGrace"`
	// WatchdogTimeout is the NCCL watchdog: a collective stalled this long
	// kills the job; default 10m (PyTorch's default).
	WatchdogTimeout time.Duration `json:"watchdogTimeout" yaml:"watchdogTimeout"`
}

// FailureClasses lists the background failure classes in a fixed order;
// DefaultFailureRates gives their default rates.
func FailureClasses() []string {
	return []string{"faulty-gpu", "hbm3", "software", "network", "host", "sram", "gsp", "other"}
}

// DefaultFailureRates returns interruptions per GPU-hour by class: about
// 2e-5 in total, split as Llama 3's 419 interruptions on 16,384 H100s in 54
// days (DESIGN.md §6); "other" is NIC, NCCL watchdog, silent data corruption
// and thermal sensors together.
func DefaultFailureRates() map[string]float64 {
	// Literals (2e-5 × share) rather than products, so a spec file that
	// writes the same numbers compares equal.
	return map[string]float64{
		"faulty-gpu": 6.0e-6, "hbm3": 3.4e-6, "software": 2.6e-6,
		"network": 1.6e-6, "host": 1.6e-6, "sram": 9.0e-7,
		"gsp": 8.0e-7, "other": 3.1e-6,
	}
}

// DefaultCounters returns dcgm-exporter's default-on DCGM fields that the
// twin exports (DESIGN.md §6).
func DefaultCounters() []string {
	return []string{
		"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP",
		"DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
		"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
		"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
		"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
		"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
		"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
		"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
		"DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_FB_RESERVED",
		"DCGM_FI_DEV_VGPU_LICENSE_STATUS",
	}
}

// OptInCounters returns the fields the twin can export that dcgm-exporter
// leaves off by default: every dcgm-exporter counter internal/detect/rules'
// metric data marks opt-in (a test holds the two lists equal), so every
// counter the rules analysis tells a user to enable can be enabled here.
// DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, the older name of
// DCGM_FI_DEV_CLOCKS_EVENT_REASONS, is exported under the name opted in.
func OptInCounters() []string {
	return []string{
		"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
		"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
		"DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION",
		"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
		"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
		"DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
		"DCGM_FI_DEV_LOW_UTIL_VIOLATION", "DCGM_FI_DEV_RELIABILITY_VIOLATION",
		"DCGM_EXP_CLOCK_EVENTS_COUNT", "DCGM_EXP_XID_ERRORS_COUNT",
		"DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_EXP_P2P_STATUS",
		"DCGM_FI_DEV_FB_TOTAL",
		"DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_RETIRED_PENDING",
		"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
		"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0",
		"DCGM_FI_DEV_ROW_REMAP_PENDING",
		"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
		"DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
	}
}

// Default returns the demo cluster: two nodes of eight H200s and one job,
// llm-pretrain, on all sixteen GPUs (rank r on node r/8, GPU r%8), stepping
// about every 1.35 s and checkpointing asynchronously every ten minutes.
// examples/twin/h200-2x8.yaml is the same cluster as a file.
func Default() ClusterSpec {
	s := ClusterSpec{
		Name:  "h200-2x8",
		Nodes: NodesSpec{Count: 2, GPUsPerNode: 8, Model: "H200"},
		Jobs:  []JobSpec{{Name: "llm-pretrain", GPUs: "all"}},
	}
	if err := s.normalize(); err != nil {
		// The literal above is valid; a failure here is a bug in this file.
		panic("twin: default cluster spec is invalid: " + err.Error())
	}
	return s
}

// LoadClusterSpec reads and parses a cluster spec file of at most
// MaxClusterSpecBytes. The size is checked before reading, and reading stops
// past it too, so a device or a pipe (/dev/zero) cannot fill memory.
func LoadClusterSpec(path string) (ClusterSpec, error) {
	data, err := limitread.File(path, MaxClusterSpecBytes)
	if tl := (*limitread.TooLargeError)(nil); errors.As(err, &tl) {
		return ClusterSpec{}, fmt.Errorf("load cluster spec: %s: larger than the limit of %d KiB", path, MaxClusterSpecBytes>>10)
	}
	if err != nil {
		return ClusterSpec{}, fmt.Errorf("load cluster spec: %w", err)
	}
	spec, err := ParseClusterSpec(data, path)
	if err != nil {
		if kind := documentKind(data); kind != "" {
			// An Experiment passed where a cluster spec belongs: say so and
			// how to run it, rather than list fields a spec does not have.
			return ClusterSpec{}, fmt.Errorf("%s has kind: %s, not a twin cluster spec: run it with 'gpuchaos run %s' (a cluster spec has name, nodes and jobs; see examples/twin/)", path, kind, path)
		}
	}
	return spec, err
}

// documentKind returns the kind: of a Kubernetes-style YAML document, or ""
// when it has none.
func documentKind(data []byte) string {
	var head struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
	}
	if yaml.NewDecoder(bytes.NewReader(data)).Decode(&head) != nil || head.APIVersion == "" {
		return ""
	}
	return head.Kind
}

// LoadCluster returns the cluster spec at path, or the embedded default
// when path is empty.
func LoadCluster(path string) (ClusterSpec, error) {
	if path == "" {
		return Default(), nil
	}
	return LoadClusterSpec(path)
}

// ParseClusterSpec parses a YAML cluster spec, rejecting unknown fields,
// fills defaults and validates it. Errors start with source (a file name)
// and name the offending field (nodes.list[1].model).
func ParseClusterSpec(data []byte, source string) (ClusterSpec, error) {
	var s ClusterSpec
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return ClusterSpec{}, fmt.Errorf("%s: empty cluster spec", source)
		}
		return ClusterSpec{}, fmt.Errorf("%s: %s%w", source, fieldsOf(data, err), err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return ClusterSpec{}, fmt.Errorf("%s: a cluster spec is one YAML document", source)
	}
	if err := s.normalize(); err != nil {
		return ClusterSpec{}, fmt.Errorf("%s: %w", source, err)
	}
	return s, nil
}

// fieldErr is an invalid field of a cluster spec, field its path. It is
// the experiment's *v1alpha1.FieldError: one type says "this field, this
// problem" for every spec gpuchaos reads.
func fieldErr(field, format string, args ...any) error {
	return &v1alpha1.FieldError{Path: field, Msg: fmt.Sprintf(format, args...)}
}

// normalize fills defaults in place and validates the result.
func (s *ClusterSpec) normalize() error {
	if s.Name == "" {
		s.Name = "cluster"
	}
	if s.AmbientCelsius == 0 {
		s.AmbientCelsius = 25
	}
	if !(s.AmbientCelsius >= -20 && s.AmbientCelsius <= 60) {
		return fieldErr("ambientCelsius", "%g °C is outside -20..60", s.AmbientCelsius)
	}
	if err := defaultDuration(&s.ThermalTimeConstant, 90*time.Second, "thermalTimeConstant"); err != nil {
		return err
	}
	if err := defaultDuration(&s.PhysicsStep, time.Second, "physicsStep"); err != nil {
		return err
	}
	if s.PhysicsStep > time.Minute || s.PhysicsStep < 10*time.Millisecond {
		return fieldErr("physicsStep", "%s is outside 10ms..1m", s.PhysicsStep)
	}
	if err := defaultDuration(&s.RepairTime, 30*time.Minute, "repairTime"); err != nil {
		return err
	}
	if err := s.Nodes.normalize(); err != nil {
		return err
	}
	if err := s.Network.normalize(); err != nil {
		return err
	}
	if s.Storage.BandwidthGBps == 0 {
		s.Storage.BandwidthGBps = 10
	}
	if !positive(s.Storage.BandwidthGBps) {
		return fieldErr("storage.bandwidthGBps", "must be a finite positive number, got %g", s.Storage.BandwidthGBps)
	}
	if err := s.Variability.normalize(); err != nil {
		return err
	}
	if s.FailureRates == nil {
		s.FailureRates = DefaultFailureRates()
	}
	total := 0.0
	for _, k := range sortedKeys(s.FailureRates) {
		v := s.FailureRates[k]
		if !slices.Contains(FailureClasses(), k) {
			return fieldErr("failureRates."+k, "unknown failure class (known: %s)", strings.Join(FailureClasses(), ", "))
		}
		if !(v >= 0) || math.IsInf(v, 0) {
			return fieldErr("failureRates."+k, "rate must be a non-negative number per GPU-hour, got %g", v)
		}
		if v > MaxFailureRate {
			return fieldErr("failureRates."+k, "%g per GPU-hour is over the limit of %g (a failure every GPU-hour; Llama 3's fleet saw 2e-5)", v, MaxFailureRate)
		}
		total += v
	}
	if total > MaxFailureRate {
		return fieldErr("failureRates", "%g per GPU-hour in all is over the limit of %g (a failure every GPU-hour; Llama 3's fleet saw 2e-5)", total, MaxFailureRate)
	}
	if err := s.Exporter.normalize(); err != nil {
		return err
	}
	gpus := 0
	for _, n := range s.Nodes.List {
		gpus += n.GPUs
	}
	minMem := math.Inf(1)
	for _, n := range s.Nodes.List {
		m, _ := Preset(n.Model)
		minMem = min(minMem, m.MemoryMiB/1024)
	}
	names := map[string]bool{}
	used := 0
	for i := range s.Jobs {
		j := &s.Jobs[i]
		f := fmt.Sprintf("jobs[%d]", i)
		if err := j.normalize(f, gpus-used, minMem); err != nil {
			return err
		}
		if names[j.Name] {
			return fieldErr(f+".name", "duplicate job name %q", j.Name)
		}
		names[j.Name] = true
		used += j.Ranks
	}
	return nil
}

func (n *NodesSpec) normalize() error {
	if n.NamePrefix == "" {
		n.NamePrefix = "gpu-node-"
	}
	if n.GPUsPerNode == 0 {
		n.GPUsPerNode = 8
	}
	if n.Model == "" {
		n.Model = "H200"
	}
	if n.NUMASockets == 0 {
		n.NUMASockets = 2
	}
	if n.NodesPerRack == 0 {
		n.NodesPerRack = 4
	}
	if n.NodesPerNVLinkDomain == 0 {
		n.NodesPerNVLinkDomain = 1
	}
	switch {
	case n.GPUsPerNode < 0 || n.GPUsPerNode > MaxGPUsPerNode:
		return fieldErr("nodes.gpusPerNode", "%d is outside 1..%d", n.GPUsPerNode, MaxGPUsPerNode)
	case n.NUMASockets < 0:
		return fieldErr("nodes.numaSockets", "must be positive, got %d", n.NUMASockets)
	case n.NodesPerRack < 0:
		return fieldErr("nodes.nodesPerRack", "must be positive, got %d", n.NodesPerRack)
	case n.NodesPerNVLinkDomain < 0:
		return fieldErr("nodes.nodesPerNVLinkDomain", "must be positive, got %d", n.NodesPerNVLinkDomain)
	}
	if _, err := Preset(n.Model); err != nil {
		return fieldErr("nodes.model", "%v", err)
	}
	n.Model = strings.ToUpper(n.Model)
	if len(n.List) == 0 {
		if n.Count == 0 {
			n.Count = 2
		}
		// Checked before the list is made: the count sizes it.
		if n.Count < 0 || n.Count > MaxGPUs {
			return fieldErr("nodes.count", "%d is outside 1..%d", n.Count, MaxGPUs)
		}
		if g := n.Count * n.GPUsPerNode; g > MaxGPUs {
			return fieldErr("nodes.count", "%d nodes of %d GPUs are %d GPUs, over the limit of %d", n.Count, n.GPUsPerNode, g, MaxGPUs)
		}
		n.List = make([]NodeSpec, n.Count)
	} else if n.Count != 0 && n.Count != len(n.List) {
		return fieldErr("nodes.count", "is %d but nodes.list has %d entries", n.Count, len(n.List))
	}
	if len(n.List) > MaxGPUs {
		return fieldErr("nodes.list", "%d nodes, over the limit of %d GPUs", len(n.List), MaxGPUs)
	}
	n.Count = len(n.List)
	seen := map[string]bool{}
	gpus := 0
	for i := range n.List {
		e := &n.List[i]
		f := fmt.Sprintf("nodes.list[%d]", i)
		if e.Name == "" {
			e.Name = n.NamePrefix + strconv.Itoa(i)
		}
		if seen[e.Name] {
			return fieldErr(f+".name", "duplicate node name %q", e.Name)
		}
		seen[e.Name] = true
		if e.GPUs == 0 {
			e.GPUs = n.GPUsPerNode
		}
		if e.GPUs < 0 || e.GPUs > MaxGPUsPerNode {
			return fieldErr(f+".gpus", "%d is outside 1..%d", e.GPUs, MaxGPUsPerNode)
		}
		if gpus += e.GPUs; gpus > MaxGPUs {
			return fieldErr(f+".gpus", "brings the cluster to %d GPUs, over the limit of %d", gpus, MaxGPUs)
		}
		if e.Model == "" {
			e.Model = n.Model
		}
		if _, err := Preset(e.Model); err != nil {
			return fieldErr(f+".model", "%v", err)
		}
		e.Model = strings.ToUpper(e.Model)
		if e.NUMASockets == 0 {
			e.NUMASockets = n.NUMASockets
		}
		if e.NUMASockets < 0 || e.NUMASockets > e.GPUs {
			return fieldErr(f+".numaSockets", "%d is outside 1..%d", e.NUMASockets, e.GPUs)
		}
		if e.Rack == "" {
			e.Rack = "rack-" + strconv.Itoa(i/n.NodesPerRack)
		}
		if e.NVLinkDomain == "" {
			e.NVLinkDomain = "nvl-" + strconv.Itoa(i/n.NodesPerNVLinkDomain)
		}
		if len(n.Labels) > 0 {
			merged := make(map[string]string, len(n.Labels)+len(e.Labels))
			for k, v := range n.Labels {
				merged[k] = v
			}
			for k, v := range e.Labels {
				merged[k] = v
			}
			e.Labels = merged
		}
	}
	return nil
}

func (n *NetworkSpec) normalize() error {
	if n.NodeBandwidthGBps == 0 {
		n.NodeBandwidthGBps = 400
	}
	if n.Latency == 0 {
		n.Latency = 5 * time.Microsecond
	}
	if n.CollectiveEfficiency == 0 {
		n.CollectiveEfficiency = 0.67
	}
	if n.PCIeFallbackFactor == 0 {
		n.PCIeFallbackFactor = 0.09
	}
	switch {
	case !positive(n.NodeBandwidthGBps):
		return fieldErr("network.nodeBandwidthGBps", "must be a finite positive number, got %g", n.NodeBandwidthGBps)
	case n.Latency < 0:
		return fieldErr("network.latency", "must not be negative, got %s", n.Latency)
	case !(n.CollectiveEfficiency > 0 && n.CollectiveEfficiency <= 1):
		return fieldErr("network.collectiveEfficiency", "must be in (0,1], got %g", n.CollectiveEfficiency)
	case !(n.PCIeFallbackFactor > 0 && n.PCIeFallbackFactor <= 1):
		return fieldErr("network.pcieFallbackFactor", "must be in (0,1], got %g", n.PCIeFallbackFactor)
	}
	return nil
}

func (v *VariabilitySpec) normalize() error {
	if v.Kind == "" {
		v.Kind = "lognormal"
	}
	switch v.Kind {
	case "lognormal":
		if v.Sigma == 0 {
			v.Sigma = 0.03
		}
		if !(v.Sigma > 0 && v.Sigma < 1) {
			return fieldErr("variability.sigma", "must be in (0,1), got %g", v.Sigma)
		}
	case "pal":
		if v.Class == "" {
			v.Class = "A"
		}
		v.Class = strings.ToUpper(v.Class)
		if !slices.Contains([]string{"A", "B", "C", "D"}, v.Class) {
			return fieldErr("variability.class", "unknown PAL class %q (known: A, B, C, D)", v.Class)
		}
	case "none":
	default:
		return fieldErr("variability.kind", "unknown kind %q (known: lognormal, pal, none)", v.Kind)
	}
	return nil
}

func (e *ExporterSpec) normalize() error {
	if err := defaultDuration(&e.ScrapeInterval, 30*time.Second, "exporter.scrapeInterval"); err != nil {
		return err
	}
	if e.ScrapeInterval < time.Second {
		return fieldErr("exporter.scrapeInterval", "%s is shorter than 1s", e.ScrapeInterval)
	}
	if e.Counters == nil {
		e.Counters = DefaultCounters()
	}
	for i, c := range e.Counters {
		if !slices.Contains(DefaultCounters(), c) {
			return fieldErr(fmt.Sprintf("exporter.counters[%d]", i), "unknown default counter %q", c)
		}
	}
	if e.OptIn == nil {
		e.OptIn = []string{}
	}
	for i, c := range e.OptIn {
		if !slices.Contains(OptInCounters(), c) {
			return fieldErr(fmt.Sprintf("exporter.optIn[%d]", i), "unknown opt-in counter %q (known: %s)", c, strings.Join(OptInCounters(), ", "))
		}
	}
	if e.Exporters == nil {
		e.Exporters = DefaultExporters()
	}
	for i, x := range e.Exporters {
		if !slices.Contains(Exporters(), x) {
			return fieldErr(fmt.Sprintf("exporter.exporters[%d]", i), "unknown exporter %q (known: %s)", x, strings.Join(Exporters(), ", "))
		}
	}
	return nil
}

func (j *JobSpec) normalize(f string, free int, minMemGiB float64) error {
	if j.Name == "" {
		return fieldErr(f+".name", "is required")
	}
	switch {
	case j.GPUs == "all" && j.Ranks == 0:
		j.Ranks = free
		j.GPUs = ""
	case j.GPUs == "all" && j.Ranks == free:
		// A normalised spec round-trips: gpus is dropped once ranks is set.
		j.GPUs = ""
	case j.GPUs != "":
		return fieldErr(f+".gpus", "must be \"all\" (or give ranks instead), got %q", j.GPUs)
	}
	if j.Ranks <= 0 {
		return fieldErr(f+".ranks", "must be positive (or set gpus: all), got %d", j.Ranks)
	}
	if j.Ranks > free {
		return fieldErr(f+".ranks", "%d ranks but only %d GPUs are free", j.Ranks, free)
	}
	if !(j.FLOPsPerStep >= 0 && !math.IsInf(j.FLOPsPerStep, 0) && j.MFU >= 0 && j.MFU <= 1) {
		return fieldErr(f+".mfu", "flopsPerStep must be ≥ 0 and mfu in (0,1]")
	}
	if j.FLOPsPerStep > 0 && j.MFU == 0 {
		j.MFU = 0.4
	}
	if j.FLOPsPerStep > 0 && j.FLOPsPerStep < 2.5e12*j.MFU {
		// Below 1ms per step even on a B200 at this MFU; see stepCompute.
		return fieldErr(f+".flopsPerStep", "%g FLOPs is under 1ms of compute per step", j.FLOPsPerStep)
	}
	if j.FLOPsPerStep > 0 && j.StepCompute != 0 {
		return fieldErr(f+".stepCompute", "give stepCompute or flopsPerStep, not both")
	}
	if j.FLOPsPerStep == 0 {
		if err := defaultDuration(&j.StepCompute, 900*time.Millisecond, f+".stepCompute"); err != nil {
			return err
		}
		if j.StepCompute < time.Millisecond {
			// One event per step: sub-millisecond steps would make an hour
			// of simulation cost millions of events.
			return fieldErr(f+".stepCompute", "%s is shorter than 1ms", j.StepCompute)
		}
	}
	if j.GradientBytes == 0 {
		j.GradientBytes = 7e9
	}
	if !positive(j.GradientBytes) {
		return fieldErr(f+".gradientBytes", "must be a finite positive number, got %g", j.GradientBytes)
	}
	if j.MemoryGiB == 0 {
		j.MemoryGiB = math.Round(0.6 * minMemGiB)
	}
	if !(j.MemoryGiB > 0 && j.MemoryGiB <= minMemGiB) {
		return fieldErr(f+".memoryGiB", "must be in (0, %g], got %g", minMemGiB, j.MemoryGiB)
	}
	if err := defaultDuration(&j.CheckpointInterval, 10*time.Minute, f+".checkpointInterval"); err != nil {
		return err
	}
	if j.CheckpointGB == 0 {
		j.CheckpointGB = 50
	}
	if !positive(j.CheckpointGB) {
		return fieldErr(f+".checkpointGB", "must be a finite positive number, got %g", j.CheckpointGB)
	}
	if j.CheckpointMode == "" {
		j.CheckpointMode = CheckpointAsync
	}
	if j.CheckpointMode != CheckpointSync && j.CheckpointMode != CheckpointAsync {
		return fieldErr(f+".checkpointMode", "must be sync or async, got %q", j.CheckpointMode)
	}
	if err := defaultDuration(&j.AsyncStall, 2*time.Second, f+".asyncStall"); err != nil {
		return err
	}
	if err := defaultDuration(&j.RestartCost, 3*time.Minute, f+".restartCost"); err != nil {
		return err
	}
	if j.StopGrace < 0 {
		return fieldErr(f+".stopGrace", "must not be negative, got %s", j.StopGrace)
	}
	return defaultDuration(&j.WatchdogTimeout, 10*time.Minute, f+".watchdogTimeout")
}

// fieldsOf names the fields on the lines a YAML type error points at
// ("jobs[0].restartCost: "), since yaml.v3 reports only line numbers for
// values it cannot convert.
func fieldsOf(data []byte, err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return ""
	}
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return ""
	}
	var paths []string
	for _, msg := range te.Errors {
		var line int
		if _, err := fmt.Sscanf(msg, "line %d:", &line); err != nil {
			continue
		}
		// The message quotes the offending value: `soon`.
		want := ""
		if i := strings.IndexByte(msg, '`'); i >= 0 {
			if j := strings.IndexByte(msg[i+1:], '`'); j >= 0 {
				want = msg[i+1 : i+1+j]
			}
		}
		if p := pathAtLine(&root, line, want, ""); p != "" && !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return ""
	}
	return strings.Join(paths, ", ") + ": "
}

// pathAtLine finds the deepest mapping key or sequence item whose scalar
// value sits on line (and reads want, when given) and returns its path.
func pathAtLine(n *yaml.Node, line int, want, path string) string {
	hit := func(v *yaml.Node) bool {
		return v.Kind == yaml.ScalarNode && v.Line == line && (want == "" || v.Value == want)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p := pathAtLine(c, line, want, path); p != "" {
				return p
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if sub := pathAtLine(v, line, want, p); sub != "" {
				return sub
			}
			if hit(v) {
				return p
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			if sub := pathAtLine(c, line, want, p); sub != "" {
				return sub
			}
			if hit(c) {
				return p
			}
		}
	}
	return ""
}

// positive reports whether x is a finite number above zero: an infinite
// bandwidth or size would turn into a duration that overflows.
func positive(x float64) bool { return x > 0 && !math.IsInf(x, 1) }

func defaultDuration(d *time.Duration, def time.Duration, field string) error {
	if *d == 0 {
		*d = def
	}
	if *d < 0 {
		return fieldErr(field, "must be positive, got %s", *d)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
