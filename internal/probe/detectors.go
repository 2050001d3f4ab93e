package probe

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/series"
	"github.com/gpuchaos/gpuchaos/internal/xid"
)

// EvalInterval is the rule evaluation interval the built-in detectors
// assume for their `for:` clauses (Prometheus' default is 1m; 15s is what
// GPU fleets commonly set for fast alerting).
const EvalInterval = 15 * time.Second

// Detector is a built-in detector: one of the alert rules or watchers a
// typical GPU fleet runs, in a form the twin can evaluate.
type Detector struct {
	Name string `json:"name"`
	// Layer is where the detector looks.
	Layer catalog.Layer `json:"layer"`
	// Reads lists the series or log it reads.
	Reads []string `json:"reads"`
	// Rule is the equivalent Prometheus expression or watcher behaviour.
	Rule        string `json:"rule"`
	Description string `json:"description"`

	expr func(Source) Expr
	log  bool
}

// Probe returns the detector as a probe over src.
func (d *Detector) Probe(src Source) Probe {
	if d.log {
		return &logProbe{name: d.Name, src: src, window: xidWindow, match: xidLine}
	}
	return &exprProbe{name: d.Name, src: src, expr: d.expr(src)}
}

// Detectors returns the built-in detectors in report order.
func Detectors() []*Detector { return builtins }

// LookupDetector returns a built-in detector by name.
func LookupDetector(name string) (*Detector, bool) {
	i := slices.IndexFunc(builtins, func(d *Detector) bool { return d.Name == name })
	if i < 0 {
		return nil, false
	}
	return builtins[i], true
}

// xidWindow is how long a log-watcher alert stays up after an XID line, as a
// node-problem-detector condition or a syslog alert with a silence would.
const xidWindow = 10 * time.Minute

const (
	gpuTemp   = "DCGM_FI_DEV_GPU_TEMP"
	smClock   = "DCGM_FI_DEV_SM_CLOCK"
	gpuUtil   = "DCGM_FI_DEV_GPU_UTIL"
	fbUsed    = "DCGM_FI_DEV_FB_USED"
	fbFree    = "DCGM_FI_DEV_FB_FREE"
	nvlinkBW  = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
	stepsRate = "gpuchaos_job_steps_per_second"
	jobUp     = "gpuchaos_job_up"
)

// busy restricts a GPU expression to GPUs doing work, so an idle GPU's low
// clock or bandwidth is not mistaken for a fault.
func busy(s Source, e Expr) Expr {
	return And(e, Compare(Selector(s, gpuUtil, nil), ">", 50), "Hostname", "gpu")
}

var builtins = []*Detector{
	{
		Name: "dcgm-gpu-temp-high", Layer: catalog.LayerExporterMetrics, Reads: []string{gpuTemp},
		Rule:        gpuTemp + " > 85 for 1m",
		Description: "GPU core temperature above 85 °C, near the slowdown threshold.",
		expr: func(s Source) Expr {
			return For(Compare(Selector(s, gpuTemp, nil), ">", 85), time.Minute, EvalInterval)
		},
	},
	{
		Name: "dcgm-sm-clock-throttled", Layer: catalog.LayerExporterMetrics, Reads: []string{smClock, gpuUtil},
		Rule:        smClock + " < 0.85 * (its median 30m..10m ago) and " + gpuUtil + " > 50, for 2m",
		Description: "A busy GPU runs its SMs 15 % below its own recent clock: thermal or power throttling.",
		expr: func(s Source) Expr {
			return For(busy(s, CompareRatio(Selector(s, smClock, nil), "<", 0.85, Baseline(s, smClock, nil, 30*time.Minute, 10*time.Minute))), 2*time.Minute, EvalInterval)
		},
	},
	{
		Name: "dcgm-xid-errors", Layer: catalog.LayerExporterMetrics, Reads: []string{"DCGM_FI_DEV_XID_ERRORS"},
		Rule:        "DCGM_FI_DEV_XID_ERRORS > 0",
		Description: "DCGM reports an XID (the field holds the last XID seen).",
		expr:        func(s Source) Expr { return Compare(Selector(s, "DCGM_FI_DEV_XID_ERRORS", nil), ">", 0) },
	},
	{
		Name: "dcgm-gpu-missing", Layer: catalog.LayerExporterMetrics, Reads: []string{gpuTemp},
		Rule:        "count by (Hostname) (" + gpuTemp + ") < the number of GPUs the node had, for 1m",
		Description: "A node reports fewer GPUs than it had: a GPU fell off the bus or its exporter lost it.",
		expr: func(s Source) Expr {
			return For(CompareRatio(CountBy(Selector(s, gpuTemp, nil), "Hostname"), "<", 1, MaxSeenCountBy(s, gpuTemp, "Hostname")), time.Minute, EvalInterval)
		},
	},
	{
		Name: "dcgm-row-remap-failure", Layer: catalog.LayerExporterMetrics, Reads: []string{"DCGM_FI_DEV_ROW_REMAP_FAILURE"},
		Rule:        "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
		Description: "HBM row remapping failed: the GPU needs replacing.",
		expr:        func(s Source) Expr { return Compare(Selector(s, "DCGM_FI_DEV_ROW_REMAP_FAILURE", nil), ">", 0) },
	},
	{
		Name: "dcgm-remapped-rows", Layer: catalog.LayerExporterMetrics,
		Reads:       []string{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"},
		Rule:        "increase(DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS[15m]) > 0 or increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[15m]) > 0",
		Description: "HBM rows were remapped: a reset is pending to apply the remap.",
		expr: func(s Source) Expr {
			return Or(Compare(Increase(s, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", nil, 15*time.Minute), ">", 0),
				Compare(Increase(s, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", nil, 15*time.Minute), ">", 0))
		},
	},
	{
		Name: "dcgm-ecc-dbe", Layer: catalog.LayerExporterMetrics, Reads: []string{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"},
		Rule:        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0",
		Description: "Double-bit ECC errors. Reads an opt-in counter that dcgm-exporter's default set leaves off.",
		expr:        func(s Source) Expr { return Compare(Selector(s, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", nil), ">", 0) },
	},
	{
		Name: "dcgm-ecc-sbe-storm", Layer: catalog.LayerExporterMetrics, Reads: []string{"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"},
		Rule:        "increase(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL[5m]) > 100",
		Description: "A storm of single-bit ECC errors. Reads an opt-in counter.",
		expr: func(s Source) Expr {
			return Compare(Increase(s, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", nil, 5*time.Minute), ">", 100)
		},
	},
	{
		Name: "dcgm-power-violation", Layer: catalog.LayerExporterMetrics, Reads: []string{"DCGM_FI_DEV_POWER_VIOLATION"},
		Rule:        "increase(DCGM_FI_DEV_POWER_VIOLATION[5m]) > 0",
		Description: "Time spent clamped by a power limit. Reads an opt-in counter.",
		expr: func(s Source) Expr {
			return Compare(Increase(s, "DCGM_FI_DEV_POWER_VIOLATION", nil, 5*time.Minute), ">", 0)
		},
	},
	{
		Name: "dcgm-nvlink-bandwidth-drop", Layer: catalog.LayerExporterMetrics, Reads: []string{nvlinkBW, gpuUtil},
		Rule:        nvlinkBW + " < 0.5 * (its median 30m..10m ago) on a busy GPU, for 2m",
		Description: "A busy GPU moves less than half its usual NVLink traffic: links down or collectives rerouted.",
		expr: func(s Source) Expr {
			return For(busy(s, CompareRatio(Selector(s, nvlinkBW, nil), "<", 0.5, Baseline(s, nvlinkBW, nil, 30*time.Minute, 10*time.Minute))), 2*time.Minute, EvalInterval)
		},
	},
	{
		Name: "dcgm-fb-nearly-full", Layer: catalog.LayerExporterMetrics, Reads: []string{fbUsed, fbFree},
		Rule:        fbUsed + " / (" + fbUsed + " + " + fbFree + ") > 0.95 for 1m",
		Description: "GPU memory more than 95 % used.",
		expr: func(s Source) Expr {
			used := Selector(s, fbUsed, nil)
			return For(Compare(Divide(used, Sum(used, Selector(s, fbFree, nil))), ">", 0.95), time.Minute, EvalInterval)
		},
	},
	{
		Name: "dcgm-pcie-saturated", Layer: catalog.LayerExporterMetrics, Reads: []string{"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"},
		Rule:        "DCGM_FI_PROF_PCIE_TX_BYTES + DCGM_FI_PROF_PCIE_RX_BYTES > 25e9 for 2m",
		Description: "Host-device traffic above 25 GB/s, about half a PCIe Gen5 x16 link, for two minutes.",
		expr: func(s Source) Expr {
			return For(Compare(Sum(Selector(s, "DCGM_FI_PROF_PCIE_TX_BYTES", nil), Selector(s, "DCGM_FI_PROF_PCIE_RX_BYTES", nil)), ">", 25e9), 2*time.Minute, EvalInterval)
		},
	},
	{
		Name: "dcgm-gpu-idle", Layer: catalog.LayerExporterMetrics, Reads: []string{gpuUtil},
		Rule:        gpuUtil + " < 10 for 5m",
		Description: "An allocated GPU sits idle: the job on it died or stalls.",
		expr: func(s Source) Expr {
			return For(Compare(Selector(s, gpuUtil, nil), "<", 10), 5*time.Minute, EvalInterval)
		},
	},
	{
		Name: "kmsg-xid", Layer: catalog.LayerKernelLog, Reads: []string{"kernel log: NVRM: Xid"},
		Rule:        "an NVRM Xid line in the kernel log within the last 10m",
		Description: "A syslog or node-problem-detector style watcher of kernel XID lines.",
		log:         true,
	},
	{
		Name: "job-down", Layer: catalog.LayerWorkload, Reads: []string{jobUp},
		Rule:        jobUp + " == 0 for 1m",
		Description: "The training job is not running.",
		expr:        func(s Source) Expr { return For(Compare(Selector(s, jobUp, nil), "==", 0), time.Minute, EvalInterval) },
	},
	{
		Name: "job-step-stall", Layer: catalog.LayerWorkload, Reads: []string{stepsRate, jobUp},
		Rule:        stepsRate + " == 0 and " + jobUp + " == 1, for 3m",
		Description: "The job is up but makes no progress: a hung rank or collective.",
		expr: func(s Source) Expr {
			return For(And(Compare(Selector(s, stepsRate, nil), "==", 0), Compare(Selector(s, jobUp, nil), "==", 1), "job"), 3*time.Minute, EvalInterval)
		},
	},
	{
		Name: "job-slowdown", Layer: catalog.LayerWorkload, Reads: []string{stepsRate, jobUp},
		Rule:        "avg_over_time(" + stepsRate + "[5m]) < 0.9 * (its median 30m..10m ago) and " + jobUp + " == 1, for 2m",
		Description: "The running job steps at least 10 % slower than it did over five minutes: the silent kind of fault.",
		expr: func(s Source) Expr {
			slow := CompareRatio(AvgOverTime(s, stepsRate, nil, 5*time.Minute), "<", 0.9, Baseline(s, stepsRate, nil, 30*time.Minute, 10*time.Minute))
			return For(And(slow, Compare(Selector(s, jobUp, nil), "==", 1), "job"), 2*time.Minute, EvalInterval)
		},
	},
	{
		Name: "job-straggler", Layer: catalog.LayerWorkload, Reads: []string{"gpuchaos_rank_step_seconds"},
		Rule:        "max by (job) (gpuchaos_rank_step_seconds) / median by (job) > 1.2 for 2m",
		Description: "One rank computes 20 % slower than the job's median rank.",
		expr: func(s Source) Expr {
			return For(Compare(MaxOverMedianBy(Selector(s, "gpuchaos_rank_step_seconds", nil), "job"), ">", 1.2), 2*time.Minute, EvalInterval)
		},
	},
	{
		Name: "job-restarted", Layer: catalog.LayerWorkload, Reads: []string{"gpuchaos_job_restarts_total"},
		Rule:        "increase(gpuchaos_job_restarts_total[30m]) > 0",
		Description: "The job restarted from a checkpoint.",
		expr: func(s Source) Expr {
			return Compare(Increase(s, "gpuchaos_job_restarts_total", nil, 30*time.Minute), ">", 0)
		},
	},
	{
		Name: "checkpoint-stale", Layer: catalog.LayerWorkload, Reads: []string{"gpuchaos_job_last_checkpoint_timestamp_seconds"},
		Rule:        "time() - gpuchaos_job_last_checkpoint_timestamp_seconds > 1500",
		Description: "No checkpoint for 25 minutes, two and a half of the job's 10-minute intervals.",
		expr: func(s Source) Expr {
			return Compare(Age(Selector(s, "gpuchaos_job_last_checkpoint_timestamp_seconds", nil)), ">", 1500)
		},
	},
	{
		Name: "checkpoint-failures", Layer: catalog.LayerWorkload, Reads: []string{"gpuchaos_job_checkpoint_failures_total"},
		Rule:        "increase(gpuchaos_job_checkpoint_failures_total[30m]) > 0",
		Description: "A checkpoint write or load failed.",
		expr: func(s Source) Expr {
			return Compare(Increase(s, "gpuchaos_job_checkpoint_failures_total", nil, 30*time.Minute), ">", 0)
		},
	},
	{
		Name: "node-unschedulable", Layer: catalog.LayerK8sAPI, Reads: []string{"kube_node_spec_unschedulable"},
		Rule:        "kube_node_spec_unschedulable == 1",
		Description: "A node is cordoned.",
		expr:        func(s Source) Expr { return Compare(Selector(s, "kube_node_spec_unschedulable", nil), "==", 1) },
	},
	{
		Name: "node-gpu-capacity-drop", Layer: catalog.LayerK8sAPI, Reads: []string{"kube_node_status_allocatable"},
		Rule:        `kube_node_status_allocatable{resource="nvidia_com_gpu"} < its median 30m..10m ago, for 1m`,
		Description: "A node advertises fewer GPUs than it did: device plugin down or GPUs marked unhealthy.",
		expr: func(s Source) Expr {
			m := map[string]string{"resource": "nvidia_com_gpu"}
			return For(CompareRatio(Selector(s, "kube_node_status_allocatable", m), "<", 1, Baseline(s, "kube_node_status_allocatable", m, 30*time.Minute, 10*time.Minute)), time.Minute, EvalInterval)
		},
	},
	{
		Name: "node-not-ready", Layer: catalog.LayerK8sAPI, Reads: []string{"kube_node_status_condition"},
		Rule:        `kube_node_status_condition{condition="Ready",status="true"} == 0 for 1m`,
		Description: "A node is not Ready.",
		expr: func(s Source) Expr {
			return For(Compare(Selector(s, "kube_node_status_condition", map[string]string{"condition": "Ready", "status": "true"}), "==", 0), time.Minute, EvalInterval)
		},
	},
}

// exprProbe holds when its expression returns any point.
type exprProbe struct {
	name string
	src  Source
	expr Expr
}

func (p *exprProbe) Name() string { return p.name }

func (p *exprProbe) Observe(ctx context.Context) (Observation, error) {
	if err := ctx.Err(); err != nil {
		return Observation{}, err
	}
	v := p.expr(p.src.Now())
	if len(v) == 0 {
		return Observation{}, nil
	}
	obs := Observation{Holds: true, Value: v[0].V}
	for _, pt := range v {
		obs.Subjects = append(obs.Subjects, subjectOf(pt))
	}
	obs.Detail = fmt.Sprintf("%d series, first %s = %g", len(v), v[0].Labels, v[0].V)
	return obs, nil
}

func subjectOf(p Point) Subject { return SubjectFromLabels(p.Labels) }

// SubjectFromLabels reads what a series or alert is about from the labels
// exporters set: Hostname (dcgm-exporter) or node (kube-state-metrics), gpu,
// UUID, pci_bus_id (turned into the kernel's form, as Subject.PCI is) and
// job.
func SubjectFromLabels(ls series.Labels) Subject {
	node := ls.Get("Hostname")
	if node == "" {
		node = ls.Get("node")
	}
	pci := ls.Get("pci_bus_id")
	if n, ok := xid.NormalizePCI(pci); ok {
		pci = n
	}
	return Subject{Node: node, GPU: ls.Get("gpu"), UUID: ls.Get("UUID"), PCI: pci, Job: ls.Get("job")}
}
