package probe_test

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
)

// now is the evaluation time of detector scenarios: 40 minutes of history
// (enough for the 30m..10m baselines) on an aligned step.
var now = t0.Add(40 * time.Minute)

// gpu labels a GPU series as dcgm-exporter does; gpuSubject is the subject
// a detector should report for it.
func gpu(node string, idx int) series.Labels {
	i := strconv.Itoa(idx)
	return lbl("Hostname", node, "UUID", "GPU-"+node+"-"+i, "gpu", i, "pci_bus_id", "00000000:18:00.0")
}

func gpuSubject(node string, idx int) probe.Subject {
	i := strconv.Itoa(idx)
	return probe.Subject{Node: node, GPU: i, UUID: "GPU-" + node + "-" + i, PCI: "0000:18:00"}
}

// h is shorthand for a 40-minute history ending at now.
func h(metric string, ls series.Labels, v func(time.Duration) float64) *series.Series {
	return history(metric, ls, now, v)
}

type scenario struct {
	series []*series.Series
	logs   []series.LogLine
}

func observe(t *testing.T, d *probe.Detector, sc scenario) probe.Observation {
	t.Helper()
	obs, err := d.Probe(&fakeSource{now: now, series: sc.series, logs: sc.logs}).Observe(context.Background())
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	return obs
}

const (
	temp   = "DCGM_FI_DEV_GPU_TEMP"
	clock  = "DCGM_FI_DEV_SM_CLOCK"
	util   = "DCGM_FI_DEV_GPU_UTIL"
	nvlink = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
	steps  = "gpuchaos_job_steps_per_second"
	jobUp  = "gpuchaos_job_up"
	alloc  = "kube_node_status_allocatable"
	cond   = "kube_node_status_condition"
)

var (
	train    = lbl("job", "train")
	trainSub = probe.Subject{Job: "train"}
)

func rank(r int) series.Labels {
	return lbl("Hostname", "n1", "gpu", strconv.Itoa(r), "job", "train", "rank", strconv.Itoa(r))
}

// detectorCases has one row per built-in detector: a scenario where it
// fires, naming exactly the faulty object among healthy ones, and a near
// miss where it must stay quiet.
var detectorCases = []struct {
	name  string
	fire  scenario
	want  []probe.Subject
	quiet scenario
}{
	{
		name: "dcgm-gpu-temp-high",
		fire: scenario{series: []*series.Series{h(temp, gpu("n1", 0), constant(70)), h(temp, gpu("n1", 3), recent(2*time.Minute, 90, 70))}},
		want: []probe.Subject{gpuSubject("n1", 3)},
		// Hot for 45s, short of the 1m `for:`.
		quiet: scenario{series: []*series.Series{h(temp, gpu("n1", 3), recent(45*time.Second, 90, 70))}},
	},
	{
		name: "dcgm-sm-clock-throttled",
		fire: scenario{series: []*series.Series{
			h(clock, gpu("n1", 0), constant(1980)), h(util, gpu("n1", 0), constant(95)),
			h(clock, gpu("n1", 3), recent(3*time.Minute, 1500, 1980)), h(util, gpu("n1", 3), constant(95)),
		}},
		want: []probe.Subject{gpuSubject("n1", 3)},
		// The same clock drop on an idle GPU is power saving, not a fault.
		quiet: scenario{series: []*series.Series{h(clock, gpu("n1", 3), recent(3*time.Minute, 1500, 1980)), h(util, gpu("n1", 3), constant(5))}},
	},
	{
		name:  "dcgm-xid-errors",
		fire:  scenario{series: []*series.Series{h("DCGM_FI_DEV_XID_ERRORS", gpu("n1", 0), constant(0)), h("DCGM_FI_DEV_XID_ERRORS", gpu("n1", 3), recent(time.Minute, 79, 0))}},
		want:  []probe.Subject{gpuSubject("n1", 3)},
		quiet: scenario{series: []*series.Series{h("DCGM_FI_DEV_XID_ERRORS", gpu("n1", 3), constant(0))}},
	},
	{
		name: "dcgm-gpu-missing",
		fire: scenario{series: []*series.Series{
			h(temp, gpu("n1", 0), constant(60)), h(temp, gpu("n1", 1), goneFor(7*time.Minute, 60)),
			h(temp, gpu("n2", 0), constant(60)), h(temp, gpu("n2", 1), constant(60)),
		}},
		want: []probe.Subject{{Node: "n1"}},
		// Gone 5m30s ago: out of the 5m lookback for only 30s, short of
		// the 1m `for:`.
		quiet: scenario{series: []*series.Series{h(temp, gpu("n1", 0), constant(60)), h(temp, gpu("n1", 1), goneFor(5*time.Minute+30*time.Second, 60))}},
	},
	{
		name:  "dcgm-row-remap-failure",
		fire:  scenario{series: []*series.Series{h("DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu("n1", 0), constant(0)), h("DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu("n1", 3), recent(time.Minute, 1, 0))}},
		want:  []probe.Subject{gpuSubject("n1", 3)},
		quiet: scenario{series: []*series.Series{h("DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu("n1", 3), constant(0))}},
	},
	{
		name: "dcgm-remapped-rows",
		// One GPU per branch of the `or`.
		fire: scenario{series: []*series.Series{
			h("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", gpu("n1", 3), recent(5*time.Minute, 2, 0)),
			h("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", gpu("n1", 3), constant(0)),
			h("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", gpu("n1", 0), constant(0)),
			h("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", gpu("n1", 0), recent(5*time.Minute, 1, 0)),
			h("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", gpu("n1", 5), constant(4)),
		}},
		want: []probe.Subject{gpuSubject("n1", 0), gpuSubject("n1", 3)},
		// Rows remapped 20 minutes ago, outside the 15m window.
		quiet: scenario{series: []*series.Series{h("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", gpu("n1", 3), recent(20*time.Minute, 2, 0))}},
	},
	{
		name:  "dcgm-ecc-dbe",
		fire:  scenario{series: []*series.Series{h("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu("n1", 3), recent(time.Minute, 1, 0)), h("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu("n1", 0), constant(0))}},
		want:  []probe.Subject{gpuSubject("n1", 3)},
		quiet: scenario{series: []*series.Series{h("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu("n1", 3), constant(0))}},
	},
	{
		name: "dcgm-ecc-sbe-storm",
		fire: scenario{series: []*series.Series{h("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu("n1", 3), counter(30)), h("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu("n1", 0), counter(1))}},
		want: []probe.Subject{gpuSubject("n1", 3)},
		// 5 a scrape: 95 over the 19 steps inside 5m, not above 100.
		quiet: scenario{series: []*series.Series{h("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu("n1", 3), counter(5))}},
	},
	{
		name:  "dcgm-power-violation",
		fire:  scenario{series: []*series.Series{h("DCGM_FI_DEV_POWER_VIOLATION", gpu("n1", 3), recent(2*time.Minute, 1500, 1000)), h("DCGM_FI_DEV_POWER_VIOLATION", gpu("n1", 0), constant(1000))}},
		want:  []probe.Subject{gpuSubject("n1", 3)},
		quiet: scenario{series: []*series.Series{h("DCGM_FI_DEV_POWER_VIOLATION", gpu("n1", 3), constant(1000))}},
	},
	{
		name: "dcgm-nvlink-bandwidth-drop",
		fire: scenario{series: []*series.Series{
			h(nvlink, gpu("n1", 3), recent(3*time.Minute, 30e9, 100e9)), h(util, gpu("n1", 3), constant(95)),
			h(nvlink, gpu("n1", 0), constant(100e9)), h(util, gpu("n1", 0), constant(95)),
		}},
		want: []probe.Subject{gpuSubject("n1", 3)},
		// 60 % of the baseline is a dip, not a drop below half.
		quiet: scenario{series: []*series.Series{h(nvlink, gpu("n1", 3), recent(3*time.Minute, 60e9, 100e9)), h(util, gpu("n1", 3), constant(95))}},
	},
	{
		name: "dcgm-fb-nearly-full",
		fire: scenario{series: []*series.Series{
			h("DCGM_FI_DEV_FB_USED", gpu("n1", 3), constant(79000)), h("DCGM_FI_DEV_FB_FREE", gpu("n1", 3), constant(1000)),
			h("DCGM_FI_DEV_FB_USED", gpu("n1", 0), constant(40000)), h("DCGM_FI_DEV_FB_FREE", gpu("n1", 0), constant(40000)),
		}},
		want: []probe.Subject{gpuSubject("n1", 3)},
		// 93.75 % used.
		quiet: scenario{series: []*series.Series{h("DCGM_FI_DEV_FB_USED", gpu("n1", 3), constant(75000)), h("DCGM_FI_DEV_FB_FREE", gpu("n1", 3), constant(5000))}},
	},
	{
		name: "dcgm-pcie-saturated",
		fire: scenario{series: []*series.Series{
			h("DCGM_FI_PROF_PCIE_TX_BYTES", gpu("n1", 3), recent(3*time.Minute, 15e9, 1e9)), h("DCGM_FI_PROF_PCIE_RX_BYTES", gpu("n1", 3), recent(3*time.Minute, 15e9, 1e9)),
			h("DCGM_FI_PROF_PCIE_TX_BYTES", gpu("n1", 0), constant(1e9)), h("DCGM_FI_PROF_PCIE_RX_BYTES", gpu("n1", 0), constant(1e9)),
		}},
		want: []probe.Subject{gpuSubject("n1", 3)},
		// 20 GB/s in total.
		quiet: scenario{series: []*series.Series{h("DCGM_FI_PROF_PCIE_TX_BYTES", gpu("n1", 3), constant(15e9)), h("DCGM_FI_PROF_PCIE_RX_BYTES", gpu("n1", 3), constant(5e9))}},
	},
	{
		name: "dcgm-gpu-idle",
		fire: scenario{series: []*series.Series{h(util, gpu("n1", 3), recent(6*time.Minute, 2, 90)), h(util, gpu("n1", 0), constant(90))}},
		want: []probe.Subject{gpuSubject("n1", 3)},
		// Idle for 4 of the 5 minutes.
		quiet: scenario{series: []*series.Series{h(util, gpu("n1", 3), recent(4*time.Minute, 2, 90))}},
	},
	{
		name: "kmsg-xid",
		fire: scenario{logs: []series.LogLine{
			{Time: now.Add(-5 * time.Minute), Node: "n2", Priority: 6, Text: "nvidia-peermem: loaded"},
			{Time: now.Add(-3 * time.Minute), Node: "n1", Priority: 3, Text: xid.FormatLine("00000000:18:00.0", 79, -1, "", "")},
		}},
		want: []probe.Subject{{Node: "n1", PCI: "0000:18:00"}},
		// The same line 11 minutes ago: the watcher's alert has expired.
		quiet: scenario{logs: []series.LogLine{{Time: now.Add(-11 * time.Minute), Node: "n1", Priority: 3, Text: xid.FormatLine("00000000:18:00.0", 79, -1, "", "")}}},
	},
	{
		name:  "job-down",
		fire:  scenario{series: []*series.Series{h(jobUp, train, recent(2*time.Minute, 0, 1)), h(jobUp, lbl("job", "eval"), constant(1))}},
		want:  []probe.Subject{trainSub},
		quiet: scenario{series: []*series.Series{h(jobUp, train, recent(30*time.Second, 0, 1))}},
	},
	{
		name: "job-step-stall",
		fire: scenario{series: []*series.Series{h(steps, train, recent(4*time.Minute, 0, 5)), h(jobUp, train, constant(1))}},
		want: []probe.Subject{trainSub},
		// No steps because the job is down: job-down's business.
		quiet: scenario{series: []*series.Series{h(steps, train, recent(4*time.Minute, 0, 5)), h(jobUp, train, recent(4*time.Minute, 0, 1))}},
	},
	{
		name: "job-slowdown",
		fire: scenario{series: []*series.Series{
			h(steps, train, recent(6*time.Minute, 4, 5)), h(jobUp, train, constant(1)),
			h(steps, lbl("job", "eval"), constant(5)), h(jobUp, lbl("job", "eval"), constant(1)),
		}},
		want: []probe.Subject{trainSub},
		// A one-minute dip averages to 4.75 over 5m, above 0.9 × 5.
		quiet: scenario{series: []*series.Series{h(steps, train, recent(time.Minute, 4, 5)), h(jobUp, train, constant(1))}},
	},
	{
		name: "job-straggler",
		fire: scenario{series: []*series.Series{
			h("gpuchaos_rank_step_seconds", rank(0), constant(1)), h("gpuchaos_rank_step_seconds", rank(1), constant(1)),
			h("gpuchaos_rank_step_seconds", rank(2), recent(3*time.Minute, 1.5, 1)), h("gpuchaos_rank_step_seconds", rank(3), constant(1)),
		}},
		want: []probe.Subject{{Node: "n1", GPU: "2", Job: "train"}},
		// 15 % slower than the median rank.
		quiet: scenario{series: []*series.Series{
			h("gpuchaos_rank_step_seconds", rank(0), constant(1)), h("gpuchaos_rank_step_seconds", rank(1), constant(1)),
			h("gpuchaos_rank_step_seconds", rank(2), recent(3*time.Minute, 1.15, 1)), h("gpuchaos_rank_step_seconds", rank(3), constant(1)),
		}},
	},
	{
		// The agent's NUMA series (labels as the twin and agent write
		// them): a process misplaced for two minutes, another healthy.
		name: "numa-misaligned",
		fire: scenario{series: []*series.Series{
			h("gpuchaos_numa_misaligned", lbl("Hostname", "n1", "comm", "python3", "gpu", "0", "pid", "100"), constant(0)),
			h("gpuchaos_numa_misaligned", lbl("Hostname", "n1", "comm", "python3", "gpu", "3", "pid", "103"), recent(2*time.Minute, 1, 0)),
		}},
		want: []probe.Subject{{Node: "n1", GPU: "3"}},
		// Misplaced for 45 s only: under the 1m for.
		quiet: scenario{series: []*series.Series{
			h("gpuchaos_numa_misaligned", lbl("Hostname", "n1", "comm", "python3", "gpu", "3", "pid", "103"), recent(45*time.Second, 1, 0)),
		}},
	},
	{
		name: "job-restarted",
		fire: scenario{series: []*series.Series{h("gpuchaos_job_restarts_total", train, recent(20*time.Minute, 1, 0))}},
		want: []probe.Subject{trainSub},
		// Restarted 35 minutes ago, outside the 30m window.
		quiet: scenario{series: []*series.Series{h("gpuchaos_job_restarts_total", train, recent(35*time.Minute, 1, 0))}},
	},
	{
		name:  "checkpoint-stale",
		fire:  scenario{series: []*series.Series{h("gpuchaos_job_last_checkpoint_timestamp_seconds", train, constant(float64(now.Add(-30*time.Minute).Unix())))}},
		want:  []probe.Subject{trainSub},
		quiet: scenario{series: []*series.Series{h("gpuchaos_job_last_checkpoint_timestamp_seconds", train, constant(float64(now.Add(-20*time.Minute).Unix())))}},
	},
	{
		name:  "checkpoint-failures",
		fire:  scenario{series: []*series.Series{h("gpuchaos_job_checkpoint_failures_total", train, recent(10*time.Minute, 1, 0))}},
		want:  []probe.Subject{trainSub},
		quiet: scenario{series: []*series.Series{h("gpuchaos_job_checkpoint_failures_total", train, constant(3))}},
	},
	{
		name:  "node-unschedulable",
		fire:  scenario{series: []*series.Series{h("kube_node_spec_unschedulable", lbl("node", "n1"), recent(time.Minute, 1, 0)), h("kube_node_spec_unschedulable", lbl("node", "n2"), constant(0))}},
		want:  []probe.Subject{{Node: "n1"}},
		quiet: scenario{series: []*series.Series{h("kube_node_spec_unschedulable", lbl("node", "n1"), constant(0))}},
	},
	{
		name: "node-gpu-capacity-drop",
		fire: scenario{series: []*series.Series{
			h(alloc, lbl("node", "n1", "resource", "nvidia_com_gpu", "unit", "integer"), recent(2*time.Minute, 7, 8)),
			h(alloc, lbl("node", "n2", "resource", "nvidia_com_gpu", "unit", "integer"), constant(8)),
		}},
		want: []probe.Subject{{Node: "n1"}},
		// Only CPU capacity dropped.
		quiet: scenario{series: []*series.Series{
			h(alloc, lbl("node", "n1", "resource", "nvidia_com_gpu", "unit", "integer"), constant(8)),
			h(alloc, lbl("node", "n1", "resource", "cpu", "unit", "core"), recent(2*time.Minute, 48, 96)),
		}},
	},
	{
		name: "node-not-ready",
		fire: scenario{series: []*series.Series{
			h(cond, lbl("node", "n1", "condition", "Ready", "status", "true"), recent(2*time.Minute, 0, 1)),
			h(cond, lbl("node", "n2", "condition", "Ready", "status", "true"), constant(1)),
		}},
		want: []probe.Subject{{Node: "n1"}},
		// The status="false" series of a Ready node is 0; it must not count.
		quiet: scenario{series: []*series.Series{
			h(cond, lbl("node", "n1", "condition", "Ready", "status", "true"), constant(1)),
			h(cond, lbl("node", "n1", "condition", "Ready", "status", "false"), constant(0)),
		}},
	},
}

func TestDetectorScenarios(t *testing.T) {
	t.Parallel()
	for _, tc := range detectorCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, ok := probe.LookupDetector(tc.name)
			if !ok {
				t.Fatalf("no built-in detector %q", tc.name)
			}
			obs := observe(t, d, tc.fire)
			if !obs.Holds {
				t.Fatalf("fire scenario: detector stayed quiet")
			}
			if !slices.Equal(obs.Subjects, tc.want) {
				t.Errorf("fire scenario: subjects %+v, want %+v", obs.Subjects, tc.want)
			}
			if obs.Detail == "" {
				t.Error("fire scenario: empty detail")
			}
			if obs := observe(t, d, tc.quiet); obs.Holds {
				t.Errorf("quiet scenario: detector fired: %+v", obs)
			}
			if obs := observe(t, d, scenario{}); obs.Holds {
				t.Errorf("no data: detector fired: %+v", obs)
			}
		})
	}
}

// TestEveryDetectorHasAScenario keeps detectorCases in step with the
// built-ins: a new detector without a row fails here.
func TestEveryDetectorHasAScenario(t *testing.T) {
	t.Parallel()
	var names []string
	for _, tc := range detectorCases {
		names = append(names, tc.name)
	}
	for _, d := range probe.Detectors() {
		if !slices.Contains(names, d.Name) {
			t.Errorf("detector %q has no scenario row", d.Name)
		}
	}
	if len(names) != len(probe.Detectors()) {
		t.Errorf("%d scenario rows for %d detectors", len(names), len(probe.Detectors()))
	}
}

func TestDetectorMetadata(t *testing.T) {
	t.Parallel()
	layers := []catalog.Layer{catalog.LayerKernelLog, catalog.LayerNVML, catalog.LayerDCGM,
		catalog.LayerExporterMetrics, catalog.LayerWorkload, catalog.LayerK8sAPI}
	ds := probe.Detectors()
	if len(ds) == 0 {
		t.Fatal("no built-in detectors")
	}
	seen := map[string]bool{}
	for _, d := range ds {
		if d.Name == "" {
			t.Errorf("detector with an empty name: %+v", d)
			continue
		}
		if seen[d.Name] {
			t.Errorf("duplicate detector name %q", d.Name)
		}
		seen[d.Name] = true
		if !slices.Contains(layers, d.Layer) {
			t.Errorf("%s: layer %q is not a catalogue layer", d.Name, d.Layer)
		}
		if len(d.Reads) == 0 || slices.Contains(d.Reads, "") {
			t.Errorf("%s: reads %q", d.Name, d.Reads)
		}
		if d.Rule == "" || d.Description == "" {
			t.Errorf("%s: empty rule or description", d.Name)
		}
		got, ok := probe.LookupDetector(d.Name)
		if !ok || got != d {
			t.Errorf("LookupDetector(%q) = %v, %v", d.Name, got, ok)
		}
		if p := d.Probe(&fakeSource{now: now}); p.Name() != d.Name {
			t.Errorf("%s: probe named %q", d.Name, p.Name())
		}
	}
	if _, ok := probe.LookupDetector("no-such-detector"); ok {
		t.Error("LookupDetector found a detector that does not exist")
	}
}

func TestProbesHonourContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, name := range []string{"dcgm-gpu-temp-high", "kmsg-xid"} {
		d, _ := probe.LookupDetector(name)
		if _, err := d.Probe(&fakeSource{now: now}).Observe(ctx); err == nil {
			t.Errorf("%s: Observe with a cancelled context returned no error", name)
		}
	}
}

// TestDetectorRulesPromtool runs Prometheus' own checker on the built-in
// detectors' rule file: it must load unchanged into Prometheus.
// scripts/setup-prometheus installs promtool beside the server.
func TestDetectorRulesPromtool(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(testutil.Promtool(t), "check", "rules", "detectors.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules detectors.yaml: %v\n%s", err, out)
	}
	if want := strconv.Itoa(len(probe.DetectorRules().Rules)) + " rules found"; !strings.Contains(string(out), want) {
		t.Errorf("promtool says %q, want %q", out, want)
	}
}

// TestDetectorRules checks that every built-in detector but the log
// watcher is its rule of detectors.yaml, shown as PromQL with its for:.
func TestDetectorRules(t *testing.T) {
	t.Parallel()
	set := probe.DetectorRules()
	n := 0
	for _, d := range probe.Detectors() {
		r := d.AlertRule()
		if r == nil {
			if d.Name != "kmsg-xid" {
				t.Errorf("%s: no alerting rule", d.Name)
			}
			continue
		}
		n++
		if r.Name != d.Name || !slices.Contains(set.Rules, r) || r.Interval != probe.EvalInterval {
			t.Errorf("%s: rule %s (interval %s) is not its rule of the set", d.Name, r.Name, r.Interval)
		}
		if d.Rule != probe.RuleText(r) || !strings.HasPrefix(d.Rule, r.Expr) {
			t.Errorf("%s: rule text %q, expression %q", d.Name, d.Rule, r.Expr)
		}
		if (r.For > 0) != strings.Contains(d.Rule, " for ") {
			t.Errorf("%s: rule text %q, for %s", d.Name, d.Rule, r.For)
		}
	}
	if n != len(set.Rules) {
		t.Errorf("%d detectors are rules, the set has %d", n, len(set.Rules))
	}
	d, _ := probe.LookupDetector("dcgm-gpu-temp-high")
	if want := "DCGM_FI_DEV_GPU_TEMP > 85 for 1m"; d.Rule != want {
		t.Errorf("dcgm-gpu-temp-high rule text %q, want %q", d.Rule, want)
	}
}
