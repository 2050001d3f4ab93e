package rules

import "testing"

// TestAnalyzeRecordWording: a recording rule records, it does not fire
// (observation 12 of scripts/coverage-observations).
func TestAnalyzeRecordWording(t *testing.T) {
	t.Parallel()
	set, err := Load([]byte(`groups:
- name: g
  rules:
  - record: gpu:dbe:rate5m
    expr: rate(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[5m])
  - record: gpu:temp:max
    expr: max(DCGM_FI_DEV_GPU_TEMP) or max(nvidia_gpu_temperature_celsius)
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := Analyze(set, AnalyzeOptions{})
	want := []string{
		"gpu:dbe:rate5m never produces a series: it reads DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, an opt-in counter that dcgm-exporter's default set leaves off (enable it in the exporter's counters CSV, then pass it as opt-in)",
		"gpu:temp:max can produce a series, but never through the parts of it that read nvidia_gpu_temperature_celsius, which nvidia_gpu_prometheus_exporter exports, an exporter this fleet does not run (declare it with --exporter nvidia_gpu_prometheus_exporter); did you mean DCGM_FI_DEV_GPU_TEMP (default)?",
	}
	for i, w := range want {
		if got[i].Reason != w {
			t.Errorf("reason of %s:\n got %s\nwant %s", got[i].Rule.Name, got[i].Reason, w)
		}
	}
}
