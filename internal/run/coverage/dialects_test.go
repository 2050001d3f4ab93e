package coverage_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
)

// TestExporterDialects evaluates real upstream rules written for another
// GPU exporter than dcgm-exporter: with that exporter declared the twin
// exports its series from the same GPUs and the rule detects the fault;
// under the default exporters the analysis dismisses it, naming the
// exporter.
func TestExporterDialects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		file      string
		rule      string
		exporters []string
		// wantStatus is the rule's status; detects its faults among those
		// run (nil: none), reason a part of its reason.
		wantStatus string
		detects    []string
		reason     string
	}{
		{"dcgm 1.x declared", "zhaodong-arista-dcgm-fake-gpu-exporter-gpu_alerts.yaml", "GPUHighTemperature",
			[]string{"dcgm-exporter-1.x"}, string(rules.StatusOK), []string{"hardware.thermal-throttle"}, ""},
		{"dcgm 1.x beside dcgm-exporter", "zhaodong-arista-dcgm-fake-gpu-exporter-gpu_alerts.yaml", "GPUHighTemperature",
			[]string{"dcgm-exporter", "dcgm-exporter-1.x"}, string(rules.StatusOK), []string{"hardware.thermal-throttle"}, ""},
		{"nvidia-smi declared", "utkuozdemir-nvidia_gpu_exporter-prometheusrule.yaml", "NvidiaGpuTemperatureHigh",
			[]string{"nvidia_gpu_exporter"}, string(rules.StatusOK), []string{"hardware.thermal-throttle"}, ""},
		{"nvidia-smi not declared", "utkuozdemir-nvidia_gpu_exporter-prometheusrule.yaml", "NvidiaGpuTemperatureHigh",
			nil, string(rules.StatusNeverFires), nil, "nvidia_gpu_exporter"},
		{"dcgm 1.x not declared", "zhaodong-arista-dcgm-fake-gpu-exporter-gpu_alerts.yaml", "GPUHighTemperature",
			nil, string(rules.StatusNeverFires), nil, "dcgm-exporter-1.x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set, err := rules.LoadFiles("../../detect/rules/testdata/public/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			res := run(t, coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: set, Exporters: tc.exporters,
				Faults: faults(t, "hardware.thermal-throttle", "workload.kill-rank")})
			i := slices.IndexFunc(res.Rules, func(r coverage.RuleReport) bool { return r.Name == tc.rule })
			if i < 0 {
				t.Fatalf("no report of %s", tc.rule)
			}
			r := res.Rules[i]
			if r.Status != tc.wantStatus || !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("%s: status %s (%s), want %s naming %q", tc.rule, r.Status, r.Reason, tc.wantStatus, tc.reason)
			}
			if strings.Contains(r.Reason, "twin does not export") {
				t.Errorf("%s: %s", tc.rule, r.Reason)
			}
			if !slices.Equal(r.Detects, tc.detects) {
				t.Errorf("%s detects %q, want %q", tc.rule, r.Detects, tc.detects)
			}
		})
	}
}
