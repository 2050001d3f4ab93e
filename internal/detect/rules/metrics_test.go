package rules

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gpuchaos/gpuchaos/internal/twin"
)

func TestMetricData(t *testing.T) {
	t.Parallel()
	c, err := parseCatalogue(metricFiles)
	if err != nil {
		t.Fatalf("embedded metric data: %v", err)
	}
	sources := map[string]int{}
	for _, m := range c.known {
		sources[m.Source]++
		if m.Name == "" || m.Unit == "" || m.Help == "" || m.Provenance == "" {
			t.Errorf("%s: incomplete row %+v", m.Name, m)
		}
	}
	for _, s := range []string{"dcgm-exporter", "kube-state-metrics", "node-exporter", "prometheus", "gpuchaos"} {
		if sources[s] == 0 {
			t.Errorf("no metrics from %s", s)
		}
	}
	if len(c.elsewhere) == 0 {
		t.Error("no other-exporter metrics")
	}
	if got := Known(); len(got) != len(c.known) {
		t.Errorf("Known() has %d metrics, want %d", len(got), len(c.known))
	}
}

// TestMetricDataMatchesTwin checks the data against what the twin exports:
// its default counters must be default here, its opt-in counters opt-in,
// and its workload and node series known.
func TestMetricDataMatchesTwin(t *testing.T) {
	t.Parallel()
	check := func(names []string, want string) {
		for _, n := range names {
			m, ok := LookupMetric(n)
			if !ok {
				t.Errorf("%s, which the twin exports, is unknown", n)
				continue
			}
			if m.Availability != want {
				t.Errorf("%s is %s here, %s in the twin", n, m.Availability, want)
			}
		}
	}
	check(twin.DefaultCounters(), AvailDefault)
	check(twin.OptInCounters(), AvailOptIn)
	check([]string{
		"gpuchaos_job_step_total", "gpuchaos_job_steps_per_second", "gpuchaos_job_up",
		"gpuchaos_job_restarts_total", "gpuchaos_job_last_checkpoint_step",
		"gpuchaos_job_last_checkpoint_timestamp_seconds", "gpuchaos_job_checkpoint_failures_total",
		"gpuchaos_job_resumed_from_step", "gpuchaos_job_goodput_ratio", "gpuchaos_rank_step_seconds",
		"kube_node_spec_unschedulable", "kube_node_status_allocatable", "kube_node_status_condition",
		"up", "ALERTS", "ALERTS_FOR_STATE",
	}, AvailDefault)
}

func TestLookupMetric(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		ok     bool
		avail  string
		source string
	}{
		{"DCGM_FI_DEV_GPU_TEMP", true, AvailDefault, "dcgm-exporter"},
		{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", true, AvailOptIn, "dcgm-exporter"},
		{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", true, AvailOptIn, "dcgm-exporter"},
		{"kube_pod_container_status_restarts_total", true, AvailDefault, "kube-state-metrics"},
		{"nvidia_gpu_temperature", false, "", ""},
		{"kube_pod_info", true, AvailDefault, "kube-state-metrics"},
		{"DCGM_FI_DEV_POWER_MGMT_LIMIT", true, AvailOptIn, "dcgm-exporter"},
		{"gpu_operator_node_driver_validation", true, AvailDefault, "gpu-operator"},
		{"dcgm_gpu_temp", true, AvailDefault, "dcgm-exporter-1.x"},
		// Other exporters' names are in the registry under their exporter.
		{"nvidia_gpu_temperature_celsius", true, AvailDefault, "nvidia_gpu_prometheus_exporter"},
		{"nvidia_smi_temperature_gpu", true, AvailDefault, "nvidia_gpu_exporter"},
	}
	for _, tt := range tests {
		m, ok := LookupMetric(tt.name)
		if ok != tt.ok || m.Availability != tt.avail || m.Source != tt.source {
			t.Errorf("LookupMetric(%s) = %+v, %v; want %s from %s, %v", tt.name, m, ok, tt.avail, tt.source, tt.ok)
		}
	}
}

func TestParseCatalogueRejects(t *testing.T) {
	t.Parallel()
	const head = "# name,source,availability,unit,help,provenance\n"
	tests := []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"bad availability", fstest.MapFS{"metrics/a.csv": {Data: []byte(head + "x,e,sometimes,u,h,p\n")}}, `availability "sometimes"`},
		{"wrong columns", fstest.MapFS{"metrics/a.csv": {Data: []byte(head + "x,e,default\n")}}, "3 columns"},
		{"duplicate", fstest.MapFS{"metrics/a.csv": {Data: []byte(head + "x,e,default,u,h,p\nx,e,default,u,h,p\n")}}, "x listed twice"},
		{"equivalent unknown", fstest.MapFS{
			"metrics/a.csv":         {Data: []byte(head + "x,e,default,u,h,p\n")},
			"metrics/elsewhere.csv": {Data: []byte("y,other,z,p\n")},
		}, "equivalent z is not a known metric"},
		{"bad quoting", fstest.MapFS{"metrics/a.csv": {Data: []byte(head + "x,e,default,u,say \"hi\",p\n")}}, "bare \""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseCatalogue(tt.files)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want %q", err, tt.want)
			}
		})
	}
}
