package rules

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// alertFile wraps expressions into a rule file: records first (name:
// expr), then one alert named A.
func alertFile(expr string, records ...string) []byte {
	var b strings.Builder
	b.WriteString("groups:\n- name: g\n  rules:\n")
	for _, r := range records {
		name, e, _ := strings.Cut(r, "=")
		fmt.Fprintf(&b, "  - record: %s\n    expr: %q\n", strings.TrimSpace(name), strings.TrimSpace(e))
	}
	fmt.Fprintf(&b, "  - alert: A\n    expr: %q\n", expr)
	return []byte(b.String())
}

func analyzeAlert(t *testing.T, expr string, opts AnalyzeOptions, records ...string) Analysis {
	t.Helper()
	set, err := Load(alertFile(expr, records...), "t.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	got := Analyze(set, opts)
	if len(got) != len(set.Rules) {
		t.Fatalf("%d analyses for %d rules", len(got), len(set.Rules))
	}
	return got[len(got)-1]
}

func TestAnalyzeStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		expr    string
		records []string
		optIn   []string
		// exporters and counters, when set, are what the fleet declares.
		exporters []string
		counters  []string
		want      Status
		// reason, when set, is the exact reason expected.
		reason string
	}{
		{name: "default metric", expr: "DCGM_FI_DEV_GPU_TEMP > 85", want: StatusOK},
		{name: "misspelled opt-in counter", expr: "DCGM_FI_DEV_ECC_DBE_VOL > 0", want: StatusNeverFires,
			reason: "A reads DCGM_FI_DEV_ECC_DBE_VOL, which no exporter produces; did you mean DCGM_FI_DEV_ECC_DBE_VOL_TOTAL (opt-in)?"},
		{name: "opt-in counter left off", expr: "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[5m]) > 0", want: StatusOptInOff,
			reason: "A reads DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, an opt-in counter that dcgm-exporter's default set leaves off (enable it in the exporter's counters CSV, then pass it as opt-in)"},
		{name: "opt-in counter enabled", expr: "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[5m]) > 0",
			optIn: []string{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}, want: StatusOK},
		{name: "metric of another exporter", expr: "nvidia_smi_temperature_gpu > 85", want: StatusNeverFires,
			reason: "A reads nvidia_smi_temperature_gpu, which nvidia_gpu_exporter exports, an exporter this fleet does not run (declare it with --exporter nvidia_gpu_exporter); did you mean DCGM_FI_DEV_GPU_TEMP (default)?"},
		{name: "dcgm-exporter 1.x name", expr: "dcgm_gpu_temp > 85", want: StatusNeverFires,
			reason: "A reads dcgm_gpu_temp, which dcgm-exporter-1.x exports, an exporter this fleet does not run (declare it with --exporter dcgm-exporter-1.x); did you mean DCGM_FI_DEV_GPU_TEMP (default)?"},
		{name: "wrong case", expr: "dcgm_fi_dev_gpu_temp > 85", want: StatusNeverFires,
			reason: "A reads dcgm_fi_dev_gpu_temp, which no exporter produces; did you mean DCGM_FI_DEV_GPU_TEMP (default)?"},
		{name: "nothing close", expr: "my_app_requests_total > 0", want: StatusUnknown,
			reason: "A can fire only through metrics no exporter gpuchaos knows lists, so it is evaluated as reading nothing: it reads my_app_requests_total, which no exporter gpuchaos knows lists (unknown)"},
		// Observation 5 of scripts/coverage-observations: real metrics
		// gpuchaos did not know, and metrics of exporters it cannot know,
		// are not "never fires"; a did-you-mean only for a name that
		// measures the same thing.
		{name: "kube-state-metrics default series", expr: "kube_pod_info > 0", want: StatusOK},
		{name: "real DCGM field, not listed", expr: "DCGM_FI_DEV_POWER_USAGE > 0.9 * DCGM_FI_DEV_POWER_MGMT_LIMIT", want: StatusOptInOff,
			reason: "A reads DCGM_FI_DEV_POWER_MGMT_LIMIT, a DCGM field dcgm-exporter exports only when its counters CSV lists it (list it there and pass the file with --exporter dcgm-exporter=FILE; the twin does not export it)"},
		{name: "GPU Operator series", expr: "gpu_operator_node_driver_validation == 0", want: StatusNeverFires,
			reason: "A reads gpu_operator_node_driver_validation, which gpu-operator exports, an exporter this fleet does not run (declare it with --exporter gpu-operator)"},
		{name: "GPU Operator declared", expr: "gpu_operator_node_driver_validation == 0", exporters: []string{"gpu-operator"}, want: StatusOK},
		{name: "Autopilot's own metric", expr: "autopilot_health_checks{health=\"ERR\"} > 0", want: StatusUnknown},
		{name: "no did-you-mean for another quantity", expr: "DCGM_FI_DEV_POWER_CAPPED > 0", want: StatusUnknown},
		// A name merely like another exporter's is not that exporter's;
		// the likeness is a hint in the reason.
		{name: "near another exporter's name", expr: "count(gpu_utilization) by (instance) > 0", want: StatusUnknown,
			reason: "A can fire only through metrics no exporter gpuchaos knows lists, so it is evaluated as reading nothing: it reads gpu_utilization, which no exporter gpuchaos knows lists (unknown; it looks like dcgm_gpu_utilization from dcgm-exporter 1.x, an exporter this fleet does not run); did you mean DCGM_FI_DEV_GPU_UTIL (default)?"},
		{name: "recorded from a name near another exporter's", expr: "node:gpu_utilization:count != on (instance) configured_gpu_count",
			records: []string{"node:gpu_utilization:count = count(gpu_utilization) by (instance)"}, want: StatusUnknown,
			reason: "A can fire only through metrics no exporter gpuchaos knows lists, so it is evaluated as reading nothing: it reads node:gpu_utilization:count, recorded by the rule at t.yaml:4, which can produce a series only through metrics no exporter gpuchaos knows lists: it reads gpu_utilization, which no exporter gpuchaos knows lists (unknown; it looks like dcgm_gpu_utilization from dcgm-exporter 1.x, an exporter this fleet does not run); did you mean DCGM_FI_DEV_GPU_UTIL (default)?; it also reads configured_gpu_count, which no exporter gpuchaos knows lists (unknown)"},
		{name: "pre-Ampere retired pages, exporter not run", expr: "nvidia_smi_retired_pages_pending == 1", want: StatusNeverFires,
			reason: "A reads nvidia_smi_retired_pages_pending, which nvidia_gpu_exporter exports, an exporter this fleet does not run (declare it with --exporter nvidia_gpu_exporter)"},
		{name: "pre-Ampere retired pages, exporter run", expr: "nvidia_smi_retired_pages_double_bit_count > 0", exporters: []string{"nvidia_gpu_exporter"}, want: StatusOK},
		{name: "another exporter's opt-in metric", expr: "node_systemd_unit_state{state=\"failed\"} == 1", want: StatusOptInOff,
			reason: "A reads node_systemd_unit_state, an opt-in metric that node-exporter leaves off by default (enable it there, then pass it with --opt-in)"},
		{name: "another exporter's opt-in metric, enabled", expr: "node_systemd_unit_state{state=\"failed\"} == 1", optIn: []string{"node_systemd_unit_state"}, want: StatusOK},
		// Observation 10 of scripts/coverage-observations: the monitoring
		// stack's own metrics, which kube-prometheus' standard rules read.
		{name: "Prometheus' own metric", expr: "increase(prometheus_rule_evaluation_failures_total[5m]) > 0", want: StatusOK},
		{name: "Alertmanager's own metric", expr: `rate(alertmanager_notifications_failed_total[5m]) / rate(alertmanager_notifications_total[5m]) > 0.01`, want: StatusOK},
		{name: "the operator's config-reloader", expr: "max_over_time(reloader_last_reload_successful[5m]) == 0", want: StatusOK},
		{name: "Alertmanager not run", expr: "alertmanager_config_last_reload_successful == 0", exporters: []string{"dcgm-exporter"}, want: StatusNeverFires,
			reason: "A reads alertmanager_config_last_reload_successful, which alertmanager exports, an exporter this fleet does not run (declare it with --exporter alertmanager)"},
		{name: "Prometheus' own metric whatever the fleet declares", expr: "prometheus_config_last_reload_successful == 0", exporters: []string{"dcgm-exporter"}, want: StatusOK},
		// Observation 6 of scripts/coverage-observations: the exporter the
		// fleet runs.
		{name: "nvidia_gpu_exporter declared", expr: "nvidia_smi_temperature_gpu > 85", exporters: []string{"nvidia_gpu_exporter"}, want: StatusOK},
		{name: "old namespace declared", expr: "dcgm_gpu_temp > 85", exporters: []string{"dcgm-exporter-1.x"}, want: StatusOK},
		{name: "dcgm-exporter not declared", expr: "DCGM_FI_DEV_GPU_TEMP > 85", exporters: []string{"nvidia_gpu_exporter"}, want: StatusNeverFires,
			reason: "A reads DCGM_FI_DEV_GPU_TEMP, which dcgm-exporter exports, an exporter this fleet does not run (declare it with --exporter dcgm-exporter)"},
		{name: "counters CSV is the exact truth", expr: "DCGM_FI_DEV_POWER_MGMT_LIMIT > 0", counters: []string{"DCGM_FI_DEV_POWER_MGMT_LIMIT"}, want: StatusOK},
		{name: "counters CSV drops a default", expr: "DCGM_FI_DEV_GPU_TEMP > 85", counters: []string{"DCGM_FI_DEV_POWER_USAGE"}, want: StatusOptInOff,
			reason: "A reads DCGM_FI_DEV_GPU_TEMP, which the counters CSV given for dcgm-exporter does not list"},
		{name: "unknown metric declared by the caller", expr: "my_app_requests_total > 0",
			optIn: []string{"my_app_requests_total"}, want: StatusOK},
		{name: "or with one side missing", expr: "DCGM_FI_DEV_GPU_TEMP > 85 or nvidia_gpu_temperature_celsius > 85", want: StatusOK,
			reason: "A can fire, but never through the parts of it that read nvidia_gpu_temperature_celsius, which nvidia_gpu_prometheus_exporter exports, an exporter this fleet does not run (declare it with --exporter nvidia_gpu_prometheus_exporter); did you mean DCGM_FI_DEV_GPU_TEMP (default)?"},
		{name: "or with both sides missing", expr: "foo_temp > 1 or DCGM_FI_DEV_THERMAL_VIOLATION > 0", want: StatusUnknown,
			reason: "A can fire only through metrics no exporter gpuchaos knows lists, so it is evaluated as reading nothing: it reads foo_temp, which no exporter gpuchaos knows lists (unknown); it also reads DCGM_FI_DEV_THERMAL_VIOLATION, an opt-in counter that dcgm-exporter's default set leaves off (enable it in the exporter's counters CSV, then pass it as opt-in)"},
		{name: "and needs both", expr: "DCGM_FI_DEV_GPU_TEMP > 85 and DCGM_FI_DEV_POWER_VIOLATION > 0", want: StatusOptInOff},
		{name: "arithmetic needs both", expr: "DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_TOTAL > 0.9", want: StatusOptInOff},
		{name: "unless needs only its left side", expr: "DCGM_FI_DEV_GPU_TEMP > 85 unless DCGM_FI_DEV_RETIRED_PENDING > 0", want: StatusOK},
		{name: "unless with missing left side", expr: "DCGM_FI_DEV_RETIRED_PENDING > 0 unless DCGM_FI_DEV_GPU_TEMP > 85", want: StatusOptInOff},
		{name: "absent of a missing metric fires", expr: "absent(nvidia_gpu_temperature)", want: StatusOK},
		{name: "absent_over_time of a missing metric fires", expr: "absent_over_time(nvidia_gpu_temperature[5m])", want: StatusOK},
		// absent() of a metric nothing known exports fires on a fleet
		// without that exporter, the twin included; whether it is noisy
		// where the exporter runs is unknown.
		{name: "absent of an unknown metric", expr: "absent(ray_gcs_update_resource_usage_time_bucket) == 1", want: StatusUnknown,
			reason: "A asks only whether ray_gcs_update_resource_usage_time_bucket is absent, so it will fire wherever that exporter is not scraped, the twin included: it reads ray_gcs_update_resource_usage_time_bucket, which no exporter gpuchaos knows lists (unknown)"},
		{name: "absent_over_time of an unknown metric", expr: "absent_over_time(my_app_requests_total[5m])", want: StatusUnknown},
		{name: "absent of an unknown metric beside a known one", expr: "absent(my_app_requests_total) or DCGM_FI_DEV_GPU_TEMP > 85", want: StatusUnknown},
		{name: "absent of a known metric", expr: `absent(up{job="dcgm-exporter"} == 1)`, want: StatusOK},
		{name: "vector literal", expr: "vector(1)", want: StatusOK},
		{name: "count or vector(0)", expr: "count(nvidia_gpu_temperature) or vector(0)", want: StatusOK},
		{name: "aggregation of a missing metric", expr: "max by (Hostname) (nvidia_gpu_temperature) > 85", want: StatusNeverFires},
		{name: "scalar arithmetic keeps the vector's fate", expr: "time() - nvidia_gpu_temperature > 5", want: StatusNeverFires},
		{name: "function of a missing metric", expr: `label_replace(nvidia_gpu_temperature, "x", "$1", "gpu", "(.*)") > 1`, want: StatusNeverFires},
		{name: "histogram_quantile", expr: "histogram_quantile(0.9, rate(step_seconds_bucket[5m])) > 1", want: StatusUnknown},
		{name: "subquery", expr: "max_over_time(rate(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL[1m])[10m:1m]) > 1", want: StatusOptInOff},
		{name: "name regex matching a default metric", expr: `{__name__=~"DCGM_FI_DEV_(GPU|MEMORY)_TEMP"} > 85`, want: StatusOK},
		{name: "name regex matching only opt-in metrics", expr: `{__name__=~"DCGM_FI_DEV_ECC_.*"} > 0`, want: StatusOptInOff},
		{name: "name regex matching nothing", expr: `{__name__=~"nvidia_.*"} > 0`, want: StatusNeverFires,
			reason: `A reads {__name__=~"nvidia_.*"}, which matches no metric the declared exporters produce`},
		{name: "selector without a name", expr: `{job="dcgm-exporter"} > 0`, want: StatusOK},
		{name: "negative name matcher", expr: `{__name__!="up", job="x"} > 0`, want: StatusOK},
		{name: "recorded metric", expr: "gpu:temp:max > 85", records: []string{"gpu:temp:max = max by (Hostname) (DCGM_FI_DEV_GPU_TEMP)"}, want: StatusOK},
		{name: "record of a missing metric", expr: "gpu:dbe:rate5m > 0",
			records: []string{"gpu:dbe:rate5m = rate(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[5m])"}, want: StatusNeverFires,
			reason: "A reads gpu:dbe:rate5m, recorded by the rule at t.yaml:4, which never produces a series because it reads DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, an opt-in counter that dcgm-exporter's default set leaves off (enable it in the exporter's counters CSV, then pass it as opt-in)"},
		{name: "chain of records", expr: "b > 0",
			records: []string{"a = nvidia_gpu_temperature * 1", "b = a + 1"}, want: StatusNeverFires},
		{name: "chain of records, enabled", expr: "b > 0",
			records: []string{"a = DCGM_FI_DEV_POWER_VIOLATION * 1", "b = a + 1"}, optIn: []string{"DCGM_FI_DEV_POWER_VIOLATION"}, want: StatusOK},
		{name: "records feeding each other", expr: "b > 0",
			records: []string{"a = b", "b = a"}, want: StatusNeverFires},
		{name: "record with a fallback", expr: "a > 0",
			records: []string{"a = nvidia_gpu_temperature or vector(0)"}, want: StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := analyzeAlert(t, tt.expr, AnalyzeOptions{OptIn: tt.optIn, Exporters: tt.exporters, Counters: tt.counters}, tt.records...)
			if got.Status != tt.want {
				t.Errorf("status = %s, want %s (reason %q)", got.Status, tt.want, got.Reason)
			}
			if tt.reason != "" && got.Reason != tt.reason {
				t.Errorf("reason:\n got %s\nwant %s", got.Reason, tt.reason)
			}
			if got.Status == StatusNeverFires && got.Reason == "" {
				t.Error("never_fires without a reason")
			}
			if got.Status == StatusOK && tt.reason == "" && got.Reason != "" && !strings.Contains(got.Reason, "can fire") {
				t.Errorf("ok rule with reason %q", got.Reason)
			}
		})
	}
}

func TestAnalyzeMetrics(t *testing.T) {
	t.Parallel()
	got := analyzeAlert(t,
		"gpu:temp:max > 85 and on (Hostname) DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0 or absent(nvidia_gpu_temperature) or DCGM_FI_DEV_GPU_TEMP > 90",
		AnalyzeOptions{}, "gpu:temp:max = max by (Hostname) (DCGM_FI_DEV_GPU_TEMP)")
	want := []MetricUse{
		{Name: "gpu:temp:max", Availability: AvailRecorded, Source: "t.yaml:4", Present: true},
		{Name: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Availability: AvailOptIn, Source: "dcgm-exporter"},
		{Name: "nvidia_gpu_temperature", Availability: AvailUnknown, Suggestion: "DCGM_FI_DEV_GPU_TEMP"},
		{Name: "DCGM_FI_DEV_GPU_TEMP", Availability: AvailDefault, Source: "dcgm-exporter", Present: true},
	}
	if !slices.Equal(got.Metrics, want) {
		t.Errorf("metrics:\n got %+v\nwant %+v", got.Metrics, want)
	}
	if got.Status != StatusOK {
		t.Errorf("status = %s, want ok", got.Status)
	}
	for _, m := range []string{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "nvidia_gpu_temperature"} {
		if !strings.Contains(got.Reason, m) {
			t.Errorf("reason %q does not name missing %s", got.Reason, m)
		}
	}
}

func TestAnalyzeOrder(t *testing.T) {
	t.Parallel()
	set, err := Load(alertFile("b > 0", "a = up", "b = a"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := Analyze(set, AnalyzeOptions{})
	for i, a := range got {
		if a.Rule != set.Rules[i] {
			t.Errorf("analysis %d is for %s, want %s", i, a.Rule.Name, set.Rules[i].Name)
		}
		if a.Status != StatusOK {
			t.Errorf("%s: %s (%s)", a.Rule.Name, a.Status, a.Reason)
		}
	}
}
