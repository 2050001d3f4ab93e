package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCoverageExporterFlag: --exporter says which exporters the fleet runs,
// and the static analysis follows it (observation 6 of
// scripts/coverage-observations); wrong
// values fail at flag parsing with one line naming the flag.
func TestCoverageExporterFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(rulesFile, []byte(`groups:
- name: gpu
  rules:
  - alert: SmiHot
    expr: nvidia_smi_temperature_gpu > 85
  - alert: OldNamespaceHot
    expr: dcgm_gpu_temp > 85
  - alert: PowerNearLimit
    expr: DCGM_FI_DEV_POWER_USAGE > 0.95 * DCGM_FI_DEV_POWER_MGMT_LIMIT
  - alert: PodGone
    expr: kube_pod_info{created_by_kind="<none>"} == 1
  - alert: AutopilotUnhealthy
    expr: autopilot_health_checks{health="ERR"} > 0
  - alert: SystemdFailed
    expr: node_systemd_unit_state{state="failed"} == 1
`), 0o600); err != nil {
		t.Fatal(err)
	}
	counters := filepath.Join(dir, "counters.csv")
	if err := os.WriteFile(counters, []byte("# ours\nDCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\nDCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\nDCGM_FI_DEV_POWER_MGMT_LIMIT, gauge, Power limit (in W).\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("gpu_temp, gauge, x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	statuses := func(t *testing.T, extra ...string) (status, reason map[string]string) {
		t.Helper()
		args := append([]string{"coverage", "--rules", rulesFile, "--faults", "hardware.xid", "--suggest=false", "--format", "json", "--parallel", "1"}, extra...)
		code, out, errs := runCLI(t, "", args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var doc struct {
			Rules []struct{ Name, Status, Reason string } `json:"rules"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		status, reason = map[string]string{}, map[string]string{}
		for _, r := range doc.Rules {
			status[r.Name], reason[r.Name] = r.Status, r.Reason
		}
		return status, reason
	}
	for _, tt := range []struct {
		name  string
		extra []string
		want  map[string]string
	}{
		{"defaults", nil, map[string]string{"SmiHot": "never_fires", "OldNamespaceHot": "never_fires", "PowerNearLimit": "opt_in_off", "PodGone": "ok", "AutopilotUnhealthy": "unknown", "SystemdFailed": "opt_in_off"}},
		{"nvidia_gpu_exporter and the old namespace", []string{"--exporter", "nvidia_gpu_exporter,dcgm-exporter-1.x"},
			map[string]string{"SmiHot": "ok", "OldNamespaceHot": "ok", "PowerNearLimit": "never_fires", "PodGone": "never_fires", "AutopilotUnhealthy": "unknown"}},
		{"another exporter's opt-in metric", []string{"--opt-in", "node_systemd_unit_state"}, map[string]string{"SystemdFailed": "ok"}},
		{"a counters CSV", []string{"--exporter", "dcgm-exporter=" + counters, "--exporter", "kube-state-metrics"},
			map[string]string{"SmiHot": "never_fires", "PowerNearLimit": "ok", "PodGone": "ok"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, reason := statuses(t, tt.extra...)
			for rule, want := range tt.want {
				if got[rule] != want {
					t.Errorf("%s: status %q, want %q", rule, got[rule], want)
				}
				// A rule the fleet can fire on but whose series the twin
				// does not export says so; the GPU exporters' dialects
				// the twin exports once declared.
				exported := rule == "SmiHot" || rule == "OldNamespaceHot"
				if off := strings.Contains(reason[rule], "the twin does not export"); want == "ok" && rule != "PodGone" && off == exported {
					t.Errorf("%s: ok, and the reason %q says the twin reads nothing for it: %v", rule, reason[rule], off)
				}
			}
		})
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown exporter", []string{"--exporter", "nvidia-smi"}, `--exporter: "nvidia-smi" is not an exporter gpuchaos knows (known: dcgm-exporter, `},
		{"misspelt exporter", []string{"--exporter", "kube-state-metric"}, `--exporter: "kube-state-metric" is not an exporter gpuchaos knows; did you mean kube-state-metrics?`},
		{"counters file on another exporter", []string{"--exporter", "node-exporter=" + counters}, "--exporter: node-exporter=" + counters + ": only dcgm-exporter takes a counters file"},
		{"missing counters file", []string{"--exporter", "dcgm-exporter=" + filepath.Join(dir, "nope.csv")}, "--exporter: open "},
		{"DCGM field the twin does not export", []string{"--opt-in", "DCGM_FI_DEV_POWER_MGMT_LIMIT"}, "--opt-in: DCGM_FI_DEV_POWER_MGMT_LIMIT is a DCGM field the twin does not export; list it in dcgm-exporter's counters CSV and pass that with --exporter dcgm-exporter=FILE"},
		{"bad counters file", []string{"--exporter", "dcgm-exporter=" + bad}, `bad.csv:1: "gpu_temp" is not a DCGM field name`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCLI(t, "", append([]string{"coverage", "--rules", "pack:seed"}, tt.args...)...)
			if code != 2 || !strings.Contains(errs, tt.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 || out != "" {
				t.Errorf("exit %d, stderr %q; want exit 2 and one line containing %q", code, errs, tt.want)
			}
		})
	}
}

// TestCoverageTableUnknown: the table lists rules over unknown metrics
// apart from those that can never fire (observation 5 of
// scripts/coverage-observations).
func TestCoverageTableUnknown(t *testing.T) {
	t.Parallel()
	rulesFile := filepath.Join(t.TempDir(), "autopilot.yaml")
	if err := os.WriteFile(rulesFile, []byte("groups:\n- name: g\n  rules:\n  - alert: AutopilotUnhealthy\n    expr: autopilot_health_checks > 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "", "coverage", "--rules", rulesFile, "--faults", "hardware.xid", "--suggest=false", "--parallel", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"Rules over metrics no exporter gpuchaos knows lists, evaluated as reading nothing (1 of 1):", "autopilot_health_checks, which no exporter gpuchaos knows lists (unknown)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "can never fire") {
		t.Errorf("table calls an unknown rule never firing:\n%s", out)
	}
}

// TestCoverageExporterDialect runs nvidia_gpu_exporter's own alert rules:
// with the exporter declared the twin exports its nvidia_smi_* series and
// the rules detect the faults they are written for; without it none does.
func TestCoverageExporterDialect(t *testing.T) {
	t.Parallel()
	const upstream = "../detect/rules/testdata/public/utkuozdemir-nvidia_gpu_exporter-prometheusrule.yaml"
	for _, tt := range []struct {
		name  string
		extra []string
		// want maps a rule to the faults it detects; every other rule
		// detects none.
		want map[string][]string
	}{
		{"declared", []string{"--exporter", "nvidia_gpu_exporter"}, map[string][]string{
			"NvidiaGpuTemperatureHigh": {"hardware.thermal-throttle"},
			"NvidiaGpuThermalSlowdown": {"hardware.thermal-throttle"},
			"NvidiaGpuMissing":         {"hardware.fallen-off-bus"},
		}},
		{"default exporters", nil, map[string][]string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"coverage", "--rules", upstream, "--faults", "hardware.thermal-throttle,hardware.fallen-off-bus",
				"--suggest=false", "--format", "json", "--parallel", "1"}, tt.extra...)
			code, out, errs := runCLI(t, "", args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var doc struct {
				Rules []struct {
					Name    string
					Detects []string
				} `json:"rules"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatal(err)
			}
			if len(doc.Rules) != 15 {
				t.Fatalf("%d rules reported, want the file's 15", len(doc.Rules))
			}
			for _, r := range doc.Rules {
				if want := tt.want[r.Name]; !slices.Equal(r.Detects, want) {
					t.Errorf("%s detects %q, want %q", r.Name, r.Detects, want)
				}
			}
		})
	}
}
