package promeval_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// fiftyRules builds 50 rules of the kinds teams deploy: 10 recording
// rules and 40 alerts with for, rate, increase, avg_over_time, count by,
// offset baselines, joins and alerts over records, in three groups (one
// with a 1m interval).
func fiftyRules() string {
	gpuMetrics := []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_UTIL"}
	var rec, gpu, slow []string
	for _, m := range gpuMetrics {
		short := strings.ToLower(strings.TrimPrefix(m, "DCGM_FI_DEV_"))
		rec = append(rec, fmt.Sprintf("  - record: gpu:%s:avg2m\n    expr: avg_over_time(%s[2m])", short, m))
	}
	rec = append(rec,
		"  - record: node:gpus:count\n    expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)",
		"  - record: node:busy_gpus:count\n    expr: count by (Hostname) (DCGM_FI_DEV_GPU_UTIL > 50)",
		"  - record: node:power:sum\n    expr: sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE)",
		"  - record: job:steps:rate5m\n    expr: rate(gpuchaos_job_step_total[5m])",
		"  - record: gpu:energy:rate5m\n    expr: rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5m])",
	)
	alert := func(list *[]string, name, expr, forDur string) {
		a := fmt.Sprintf("  - alert: %s\n    expr: %s", name, expr)
		if forDur != "" {
			a += "\n    for: " + forDur
		}
		*list = append(*list, a+"\n    labels:\n      severity: warning")
	}
	for i, m := range gpuMetrics {
		short := strings.ToLower(strings.TrimPrefix(m, "DCGM_FI_DEV_"))
		alert(&gpu, "High_"+short, fmt.Sprintf("%s > %d", m, 80+i*100), "1m")
		alert(&gpu, "Drop_"+short, fmt.Sprintf("gpu:%s:avg2m < 0.8 * avg_over_time(%s[5m] offset 15m)", short, m), "2m")
		alert(&gpu, "Spike_"+short, fmt.Sprintf("%s > 1.3 * avg_over_time(%s[10m])", m, m), "")
	}
	for _, c := range []string{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "gpuchaos_job_restarts_total", "gpuchaos_job_checkpoint_failures_total"} {
		alert(&gpu, "Increase_"+c, fmt.Sprintf("increase(%s[15m]) > 0", c), "")
		alert(&slow, "Rate_"+c, fmt.Sprintf("rate(%s[5m]) > 0.01", c), "1m")
	}
	alert(&gpu, "GPUMissing", "node:gpus:count < 8", "1m")
	alert(&gpu, "GPUMissingVsBefore", "count by (Hostname) (DCGM_FI_DEV_GPU_TEMP) < count by (Hostname) (DCGM_FI_DEV_GPU_TEMP offset 10m)", "1m")
	alert(&gpu, "BusyDrop", "node:busy_gpus:count < 8", "2m")
	alert(&gpu, "PowerDrop", "node:power:sum < 0.8 * node:power:sum offset 10m", "1m")
	alert(&gpu, "Xid", "DCGM_FI_DEV_XID_ERRORS > 0", "")
	alert(&gpu, "ClockFlat", "stddev_over_time(DCGM_FI_DEV_SM_CLOCK[10m]) == 0 and on (Hostname, gpu) DCGM_FI_DEV_GPU_UTIL > 50", "5m")
	alert(&gpu, "HotterThanNode", "DCGM_FI_DEV_GPU_TEMP > on (Hostname) group_left () (avg by (Hostname) (DCGM_FI_DEV_GPU_TEMP) + 5)", "2m")
	alert(&gpu, "FBFull", "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > 0.95", "1m")
	alert(&slow, "Straggler", "max by (job) (gpuchaos_rank_step_seconds) / quantile by (job) (0.5, gpuchaos_rank_step_seconds) > 1.2", "2m")
	alert(&gpu, "NVLinkDrop", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL < 0.5 * avg_over_time(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[10m] offset 10m)", "2m")
	alert(&slow, "JobDown", "gpuchaos_job_up == 0", "1m")
	alert(&slow, "JobSlow", "job:steps:rate5m < 0.8 * job:steps:rate5m offset 15m", "2m")
	alert(&slow, "JobStalled", "increase(gpuchaos_job_step_total[3m]) == 0 and on (job) gpuchaos_job_up == 1", "")
	alert(&slow, "CheckpointStale", "time() - gpuchaos_job_last_checkpoint_timestamp_seconds > 1500", "")
	alert(&slow, "EnergyRateDrop", "gpu:energy:rate5m < 0.7 * gpu:energy:rate5m offset 10m", "2m")
	n := len(rec) + len(gpu) + len(slow)
	if n != 50 {
		panic(fmt.Sprintf("fiftyRules built %d rules", n))
	}
	return "groups:\n- name: records\n  rules:\n" + strings.Join(rec, "\n") +
		"\n- name: gpus\n  rules:\n" + strings.Join(gpu, "\n") +
		"\n- name: slow\n  interval: 1m\n  rules:\n" + strings.Join(slow, "\n") + "\n"
}

// BenchmarkEvaluate50Rules evaluates 50 rules over a 50-minute twin run
// (20 minutes of warm-up, a GPU off the bus, 30 minutes more): the unit of
// a coverage run. "default" builds the engine per call as Options{} does;
// "shared-engine" reuses one, as a coverage run over the catalogue can.
func BenchmarkEvaluate50Rules(b *testing.B) {
	ctx := context.Background()
	tw := newTwin(b)
	t0 := tw.Now()
	inject(b, tw, "hardware.fallen-off-bus", nil, gpuRef(b, tw, 3))
	if err := tw.Sleep(ctx, 30*time.Minute); err != nil {
		b.Fatal(err)
	}
	set := load(b, fiftyRules())
	start, end := t0.Add(-warmUp), tw.Now()
	for _, bc := range []struct {
		name string
		opts promeval.Options
	}{
		{"default", promeval.Options{}},
		{"shared-engine", promeval.Options{Engine: promeval.NewEngine(0)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := promeval.Evaluate(ctx, set, tw, start, end, bc.opts)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Errors) > 0 {
					b.Fatal(res.Errors[0])
				}
			}
		})
	}
}

// TestFiftyRulesEvaluate keeps the benchmark's rules valid: they load,
// evaluate without errors and detect the fault the benchmark injects.
func TestFiftyRulesEvaluate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTwin(t)
	t0 := tw.Now()
	ref := gpuRef(t, tw, 3)
	inject(t, tw, "hardware.fallen-off-bus", nil, ref)
	if err := tw.Sleep(ctx, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	set := load(t, fiftyRules())
	if len(set.Rules) != 50 {
		t.Fatalf("%d rules", len(set.Rules))
	}
	res, err := promeval.Evaluate(ctx, set, tw, t0.Add(-warmUp), tw.Now(), promeval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Errors {
		t.Error(e)
	}
	// GPUMissing reads a record of another group: one evaluation later
	// than the scrape, then its for.
	want := firstScrape + promeval.DefaultInterval + time.Minute
	at, ok := res.FirstFiring(rule(t, set, "GPUMissing"), t0, nil)
	if !ok || at.Sub(t0) != want {
		t.Errorf("GPUMissing first fires at %v (%v), want T+%v", at.Sub(t0), ok, want)
	}
}

// BenchmarkCatalogue50Rules is the coverage run we budget at 5 s:
// for every catalogue fault, a fresh default twin, 20 minutes of warm-up,
// the fault on its default target, 30 minutes more, and 50 rules
// evaluated over the 50 minutes, one fault after another on one core.
func BenchmarkCatalogue50Rules(b *testing.B) {
	ctx := context.Background()
	set := load(b, fiftyRules())
	opts := promeval.Options{Engine: promeval.NewEngine(0)}
	for b.Loop() {
		for _, f := range catalog.All() {
			tw := newTwin(b)
			t0 := tw.Now()
			var ref inventory.Ref
			switch f.Scope {
			case catalog.ScopeGPU:
				ref = gpuRef(b, tw, 3)
			case catalog.ScopeRank:
				ref = rankRef(b, tw, 3)
			case catalog.ScopeNode:
				ref = inventory.Ref{Kind: catalog.ScopeNode, Node: tw.Inventory().Nodes[0].Name}
			case catalog.ScopeJob:
				ref = inventory.Ref{Kind: catalog.ScopeJob, Job: tw.Inventory().Jobs[0].Name}
			}
			values, err := f.Resolve(nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := tw.Apply(f.ID, ref, f.Signature.Effects(values)); err != nil {
				b.Fatalf("%s: %v", f.ID, err)
			}
			if err := tw.Sleep(ctx, 30*time.Minute); err != nil {
				b.Fatal(err)
			}
			if _, err := promeval.Evaluate(ctx, set, tw, t0.Add(-warmUp), tw.Now(), opts); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(len(catalog.All())), "faults/op")
}
