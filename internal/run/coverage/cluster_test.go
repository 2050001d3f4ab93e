package coverage_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
)

// clusterRuleFiles are the standard stack's rules in the corpus:
// kube-prometheus' control-plane, node-exporter and kube-state-metrics
// files and kube-state-metrics' own alerts.
var clusterRuleFiles = []string{
	"kube-prometheus-kubernetesControlPlane-prometheusRule.yaml",
	"kube-prometheus-nodeExporter-prometheusRule.yaml",
	"kube-prometheus-kubeStateMetrics-prometheusRule.yaml",
	"kubernetes-kube-state-metrics-alerts.yaml",
}

// TestStandardRulesOnTheTwin runs the standard stack's rules on the twin
// (observation 10 of scripts/coverage-observations): the fault-free twin
// fires none of them, the absent(up{job=…}) alerts included, and the ones
// that read what a fault changes on a real cluster catch it there, no
// sooner than their for: allows. Each row names, for each rule it asserts, exactly the faults of
// the row the rule must detect.
func TestStandardRulesOnTheTwin(t *testing.T) {
	t.Parallel()
	var paths []string
	for _, f := range clusterRuleFiles {
		paths = append(paths, filepath.Join(corpusDir, f))
	}
	set, err := rules.LoadFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		faults []string
		window time.Duration
		// detects maps a rule to the faults it must detect; a rule not
		// listed may detect nothing.
		detects map[string][]string
	}{
		{
			name:   "Kubernetes faults, default window",
			faults: []string{"workload.cordon-drain", "workload.device-plugin-kill", "hardware.fallen-off-bus", "workload.kill-rank", "workload.pod-kill", "workload.hang-rank"},
			detects: map[string][]string{
				// A drained node's replacement pod and the device plugin's
				// new pod stay Pending; a worker whose GPU is gone
				// crash-loops, Running but not ready. Each for 15m.
				"KubePodNotReady": {"hardware.fallen-off-bus", "workload.cordon-drain", "workload.device-plugin-kill"},
				// Back-off starts after the 3-minute restart cost, then
				// 15m of for: caught late, within the window.
				"KubePodCrashLooping": {"hardware.fallen-off-bus"},
				// A killed rank, a killed pod and a hung rank restart
				// once: no standard rule says so.
			},
		},
		{
			name:   "host faults, default window",
			faults: []string{"checkpoint.fill-volume", "numa.memory-pressure", "numa.cpu-saturation", "network.loss"},
			detects: map[string][]string{
				// for: 30m outlasts the 20m window; a hog on one NUMA node
				// keeps the node under 90 % memory and CPU.
				"NodeFilesystemAlmostOutOfSpace": nil,
				"NodeMemoryHighUtilization":      nil,
				"NodeCPUHighUsage":               nil,
			},
		},
		{
			name:   "checkpoint volume filled for 40 minutes",
			faults: []string{"checkpoint.fill-volume"},
			window: 40 * time.Minute,
			detects: map[string][]string{
				// Both of its rules (under 5 % and under 3 %) fire after
				// their 30m; the filling-up rules need a falling trend
				// over 6h and an hour of for.
				"NodeFilesystemAlmostOutOfSpace": {"checkpoint.fill-volume"},
				"NodeFilesystemSpaceFillingUp":   nil,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: set,
				Faults: faults(t, tc.faults...), Window: tc.window})
			if len(res.Baseline.Noisy) > 0 || len(res.Baseline.FalsePositives) > 0 {
				t.Errorf("the fault-free twin fires %+v, want none", res.Baseline.Noisy)
			}
			got := map[string][]string{}
			for _, r := range res.Rules {
				switch r.Status {
				case coverage.Noisy:
					t.Errorf("%s (%s) is noisy: %s", r.Name, r.Source, r.Reason)
				case "ok":
					got[r.Name] = append(got[r.Name], r.Detects...)
				}
				if slices.Contains([]string{"KubeAPIDown", "KubeSchedulerDown", "KubeControllerManagerDown"}, r.Name) && r.Status != "ok" {
					t.Errorf("%s: status %s, want ok (the twin's control plane is up)", r.Name, r.Status)
				}
			}
			for rule, want := range tc.detects {
				have := slices.Compact(slices.Sorted(slices.Values(got[rule])))
				if !slices.Equal(have, want) {
					t.Errorf("%s detects %q, want %q", rule, have, want)
				}
			}
		})
	}
}
