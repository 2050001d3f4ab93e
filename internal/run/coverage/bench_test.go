package coverage_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
)

// genRules writes n distinct GPU rules as one plain rule file, in groups of
// 25, shaped like a large fleet's alerting: thresholds and `for:` on the
// dcgm-exporter default set, increases of counters, fleet aggregations,
// alerts on opt-in counters that are off by default, and alerts on metrics
// no exporter of the fleet produces (another exporter's names, typos).
// Every 50th rule is a recording rule that a later alert of its group
// reads. Names and thresholds differ per rule, so no two are the same.
func genRules(n int) string {
	defaults := []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK",
		"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
		"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"}
	counters := []string{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
		"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}
	optIn := []string{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_THERMAL_VIOLATION",
		"DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_RETIRED_DBE",
		"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
	nowhere := []string{"nvidia_gpu_temperature", "nvidia_smi_utilization_gpu_ratio", "DCGM_FI_DEV_ECC_DBE_VOL",
		"gpu_power_watts", "DCGM_FI_DEV_XID_ERROR", "nvidia_gpu_memory_used_bytes"}
	fors := []string{"", "30s", "1m", "2m", "5m", "10m"}
	var b strings.Builder
	b.WriteString("groups:\n")
	lastRecord := ""
	for i := range n {
		if i%25 == 0 {
			fmt.Fprintf(&b, "- name: gen-%d\n  rules:\n", i/25)
			lastRecord = ""
		}
		th := i / 40
		// The fraction makes every threshold, and so every rule, unique.
		frac := fmt.Sprintf(".%05d", i)
		var expr string
		switch k := i % 50; {
		case k == 0:
			m := defaults[(i/50)%len(defaults)]
			lastRecord = fmt.Sprintf("gen:%s:avg5m_%d", strings.ToLower(m), i)
			fmt.Fprintf(&b, "  - record: %s\n    expr: avg by (Hostname, gpu) (avg_over_time(%s[%ds]))\n", lastRecord, m, 240+i/50)
			continue
		case k == 1 && lastRecord != "":
			expr = fmt.Sprintf("%s < 0.%d%s * %s offset 10m", lastRecord, 5+th%4, frac[1:], lastRecord)
		case k%10 == 2:
			expr = fmt.Sprintf("increase(%s[%dm]) > %d%s", counters[i%len(counters)], 5+th%10, th%3, frac)
		case k%10 == 4:
			expr = fmt.Sprintf("increase(%s[%dm]) > %d%s", optIn[i%len(optIn)], 5+th%10, th%3, frac)
		case k%10 == 6:
			expr = fmt.Sprintf("%s > %d%s", nowhere[i%len(nowhere)], 50+th%200, frac)
		case k%10 == 8:
			expr = fmt.Sprintf("count by (Hostname) (%s) < %d%s", defaults[i%len(defaults)], 7-th%3, frac)
		case k%10 == 9:
			m := defaults[i%len(defaults)]
			expr = fmt.Sprintf("%s < 0.%d%s * avg_over_time(%s[10m] offset 10m)", m, 3+th%6, frac[1:], m)
		default:
			expr = fmt.Sprintf("%s > %d%s", defaults[i%len(defaults)], 40+(i*7+th)%400, frac)
		}
		fmt.Fprintf(&b, "  - alert: Gen%d\n    expr: %s\n", i, expr)
		if f := fors[i%len(fors)]; f != "" {
			fmt.Fprintf(&b, "    for: %s\n", f)
		}
		b.WriteString("    labels:\n      severity: warning\n")
	}
	return b.String()
}

// benchFaults is a fixed representative subset of the catalogue, one fault
// of each scope and of the families that move GPU metrics, so the
// benchmark runs in minutes on a shared machine; cmd: gpuchaos coverage
// measures the whole catalogue (see CHANGELOG).
var benchFaults = []string{"hardware.xid", "hardware.fallen-off-bus", "hardware.thermal-throttle",
	"exhaustion.pcie", "workload.hang-rank", "numa.remote-memory"}

// BenchmarkCoverage runs the generated rules against benchFaults and
// reports the cost per rule, which must stay flat as the rule count grows
// (within 1.5× from 1,000 to 10,000 rules: a fleet's pile of rules must not
// make coverage quadratic).
func BenchmarkCoverage(b *testing.B) {
	faults := faults(b, benchFaults...)
	for _, n := range []int{1000, 3000, 10000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			set, err := rules.Load([]byte(genRules(n)), "gen.yaml")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			start, cpu0 := time.Now(), cpuTime(b)
			for b.Loop() {
				if _, err := coverage.Run(context.Background(), coverage.Options{Seed: 1, Faults: faults,
					Detectors: []*probe.Detector{}, Rules: set}); err != nil {
					b.Fatal(err)
				}
			}
			per := float64(b.N * n)
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/per, "ns/rule")
			// CPU time is the figure to compare on a shared machine, where
			// wall time moves with the neighbours' load.
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/per, "cpu-ns/rule")
		})
	}
}

// cpuTime is the CPU time this process has used so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestGenRules keeps the generator honest: the rules load, are distinct,
// and include every kind the benchmark claims, never-firing ones among
// them.
func TestGenRules(t *testing.T) {
	t.Parallel()
	set, err := rules.Load([]byte(genRules(1000)), "gen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Rules) != 1000 {
		t.Fatalf("%d rules, want 1000", len(set.Rules))
	}
	seen := map[string]bool{}
	status := map[rules.Status]int{}
	for _, a := range rules.Analyze(set, rules.AnalyzeOptions{}) {
		key := a.Rule.Expr + " for " + a.Rule.For.String()
		if seen[key] {
			t.Errorf("rule %s repeats %s", a.Rule.Name, key)
		}
		seen[key] = true
		status[a.Status]++
	}
	if status[rules.StatusNeverFires]+status[rules.StatusOptInOff] < 100 || status[rules.StatusOK] < 500 {
		t.Errorf("statuses %v: want both kinds in numbers", status)
	}
}
