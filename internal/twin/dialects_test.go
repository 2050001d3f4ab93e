package twin

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// TestExportersMatchRegistry holds the twin's exporter names to
// internal/detect/rules' registry, which coverage --exporter takes: every name the
// registry knows is one a twin spec accepts, and the defaults agree.
func TestExportersMatchRegistry(t *testing.T) {
	t.Parallel()
	var names []string
	for _, e := range rules.Exporters() {
		names = append(names, e.Name)
	}
	if got := Exporters(); !slices.Equal(got, names) {
		t.Errorf("Exporters() = %v\nregistry = %v", got, names)
	}
	if got, want := DefaultExporters(), rules.DefaultExporters(); !slices.Equal(got, want) {
		t.Errorf("DefaultExporters() = %v\nregistry's declared = %v", got, want)
	}
}

// TestDialectsMatchRegistry holds each dialect to its exporter's rows in
// the registry, both ways: every metric the registry gives that exporter is
// exported or listed as not modelled with a reason, and everything the
// dialect exports or excuses is a metric of that exporter.
func TestDialectsMatchRegistry(t *testing.T) {
	t.Parallel()
	for name, d := range dialects() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if d.name != name || !slices.Contains(Exporters(), name) {
				t.Fatalf("dialect %q filed as %q, known exporters %v", d.name, name, Exporters())
			}
			exported := map[string]bool{}
			for _, m := range d.gpu {
				if exported[m.name] {
					t.Errorf("%s exported twice", m.name)
				}
				exported[m.name] = true
			}
			for _, m := range d.node {
				if exported[m.name] {
					t.Errorf("%s exported twice", m.name)
				}
				exported[m.name] = true
			}
			for _, m := range d.cluster {
				if exported[m.name] {
					t.Errorf("%s exported twice", m.name)
				}
				exported[m.name] = true
			}
			registry := map[string]bool{}
			for _, m := range rules.Known() {
				if m.Source != name {
					continue
				}
				registry[m.Name] = true
				why, skipped := d.notModelled[m.Name]
				switch {
				case exported[m.Name] && skipped:
					t.Errorf("%s is exported and also listed as not modelled", m.Name)
				case !exported[m.Name] && !skipped:
					t.Errorf("%s (%s) is neither exported nor listed as not modelled", m.Name, m.Help)
				case skipped && len(why) < 20:
					t.Errorf("%s: not modelled without a reason: %q", m.Name, why)
				}
			}
			if len(registry) == 0 {
				t.Fatalf("the registry has no metric of %s", name)
			}
			for _, m := range slices.Sorted(maps.Keys(exported)) {
				if !registry[m] {
					t.Errorf("%s is exported but not in the registry under %s", m, name)
				}
			}
			for _, m := range slices.Sorted(maps.Keys(d.notModelled)) {
				if !registry[m] {
					t.Errorf("%s is listed as not modelled but not in the registry under %s", m, name)
				}
			}
		})
	}
}

// TestBadExporter names the field and the known exporters.
func TestBadExporter(t *testing.T) {
	t.Parallel()
	_, err := ParseClusterSpec([]byte("exporter: {exporters: [dcgm-exporter, nvidia-smi]}\n"), "x.yaml")
	if err == nil || !strings.Contains(err.Error(), "exporter.exporters[1]") || !strings.Contains(err.Error(), ExporterNVIDIAGPU) {
		t.Errorf("got %v", err)
	}
}

// TestDialectReadsSameState plays a fault and checks that each dialect
// series reads, at every scrape, its dcgm-exporter equivalent in its own
// unit, and goes stale when the GPU falls off the bus.
func TestDialectReadsSameState(t *testing.T) {
	t.Parallel()
	thermal := signature(t, "hardware.thermal-throttle")
	tests := []struct {
		name, exporter, metric, field string
		// scale converts the DCGM field's unit to the dialect's; tol is
		// the rounding the dialect adds.
		scale, tol float64
		// still: the fault does not move it.
		still bool
		// wantLabels must be on the dialect's series; unwanted must not.
		wantLabels map[string]string
		unwanted   []string
	}{
		{name: "dcgm 1.x temperature", exporter: ExporterDCGM1x, metric: "dcgm_gpu_temp", field: "DCGM_FI_DEV_GPU_TEMP", scale: 1,
			wantLabels: map[string]string{"gpu": "0", "device": "nvidia0", "modelName": "NVIDIA H200", "Hostname": "gpu-node-0"}, unwanted: []string{"UUID"}},
		{name: "dcgm 1.x SM clock", exporter: ExporterDCGM1x, metric: "dcgm_sm_clock", field: "DCGM_FI_DEV_SM_CLOCK", scale: 1},
		{name: "dcgm 1.x power", exporter: ExporterDCGM1x, metric: "dcgm_power_usage", field: "DCGM_FI_DEV_POWER_USAGE", scale: 1},
		{name: "dcgm 1.x last XID", exporter: ExporterDCGM1x, metric: "dcgm_xid_errors", field: "DCGM_FI_DEV_XID_ERRORS", scale: 1, still: true},
		{name: "dcgm 1.x tensor", exporter: ExporterDCGM1x, metric: "dcgm_fi_prof_pipe_tensor_active", field: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", scale: 1},
		{name: "nvidia-smi temperature", exporter: ExporterNVIDIAGPU, metric: "nvidia_smi_temperature_gpu", field: "DCGM_FI_DEV_GPU_TEMP", scale: 1,
			wantLabels: map[string]string{"instance": "gpu-node-0:9835"}, unwanted: []string{"gpu", "Hostname", "UUID"}},
		{name: "nvidia-smi SM clock in Hz", exporter: ExporterNVIDIAGPU, metric: "nvidia_smi_clocks_current_sm_clock_hz", field: "DCGM_FI_DEV_SM_CLOCK", scale: 1e6},
		{name: "nvidia-smi power to 10 mW", exporter: ExporterNVIDIAGPU, metric: "nvidia_smi_power_draw_watts", field: "DCGM_FI_DEV_POWER_USAGE", scale: 1, tol: 0.005},
		{name: "nvidia-smi utilization ratio", exporter: ExporterNVIDIAGPU, metric: "nvidia_smi_utilization_gpu_ratio", field: "DCGM_FI_DEV_GPU_UTIL", scale: 0.01, still: true},
		{name: "nvidia-smi memory used in bytes", exporter: ExporterNVIDIAGPU, metric: "nvidia_smi_memory_used_bytes", field: "DCGM_FI_DEV_FB_USED", scale: 1 << 20, still: true},
		{name: "mindprince temperature", exporter: ExporterNVIDIAGPUProm, metric: "nvidia_gpu_temperature_celsius", field: "DCGM_FI_DEV_GPU_TEMP", scale: 1,
			wantLabels: map[string]string{"minor_number": "0", "name": "NVIDIA H200", "instance": "gpu-node-0:9445"}, unwanted: []string{"gpu", "UUID"}},
		{name: "mindprince power in mW", exporter: ExporterNVIDIAGPUProm, metric: "nvidia_gpu_power_usage_milliwatts", field: "DCGM_FI_DEV_POWER_USAGE", scale: 1000, tol: 0.5},
		{name: "mindprince duty cycle", exporter: ExporterNVIDIAGPUProm, metric: "nvidia_gpu_duty_cycle", field: "DCGM_FI_DEV_GPU_UTIL", scale: 1, still: true},
		{name: "nvidia-smi clock event reasons", exporter: ExporterNVIDIAGPU, metric: "nvidia_smi_clocks_event_reasons_active", field: "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", scale: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := oneNode()
			spec.Exporter.Exporters = []string{ExporterDCGM, tc.exporter}
			spec.Exporter.OptIn = OptInCounters()
			tw := newTwin(t, Options{Spec: spec})
			sleep(t, tw, 2*time.Minute)
			apply(t, tw, "heat", gpuRef(tw, "gpu-node-0", 0), thermal...)
			sleep(t, tw, 10*time.Minute)
			revert(t, tw, "heat")
			apply(t, tw, "bus", gpuRef(tw, "gpu-node-0", 0), catalog.Effect{Kind: catalog.EffectOffBus})
			sleep(t, tw, 2*time.Minute)

			want := gpuSeries(tw, tc.field, "gpu-node-0", 0)
			var got *series.Series
			for _, s := range tw.Select(tc.metric) {
				// Each dialect labels the GPU its own way; the UUID is
				// the one every exporter shows.
				u := want.Labels.Get("UUID")
				if l := s.Labels.Get("uuid"); l == u || l == strings.TrimPrefix(strings.ToLower(u), "gpu-") {
					got = s
				}
			}
			if got == nil || want == nil {
				t.Fatalf("%s: %v, %s: %v", tc.metric, got, tc.field, want)
			}
			if len(tw.Select(tc.metric)) != 8 {
				t.Errorf("%d series of %s, want one per GPU", len(tw.Select(tc.metric)), tc.metric)
			}
			if len(got.Samples) != len(want.Samples) {
				t.Fatalf("%d samples, %s has %d", len(got.Samples), tc.field, len(want.Samples))
			}
			moved := false
			for i, s := range got.Samples {
				w := want.Samples[i]
				if s.T != w.T || series.IsStale(s.V) != series.IsStale(w.V) ||
					!series.IsStale(s.V) && math.Abs(s.V-tc.scale*w.V) > tc.tol+1e-9*math.Abs(s.V) {
					t.Fatalf("sample %d: %v, %s reads %v (scale %g)", i, s, tc.field, w, tc.scale)
				}
				moved = moved || s.V != got.Samples[0].V
			}
			if !moved && !tc.still {
				t.Errorf("%s never moved under the fault", tc.metric)
			}
			if !series.IsStale(got.Samples[len(got.Samples)-1].V) {
				t.Errorf("%s not stale once the GPU fell off the bus", tc.metric)
			}
			for k, v := range tc.wantLabels {
				if got.Labels.Get(k) != v {
					t.Errorf("label %s = %q, want %q", k, got.Labels.Get(k), v)
				}
			}
			for _, k := range tc.unwanted {
				if got.Labels.Get(k) != "" {
					t.Errorf("label %s set: %v", k, got.Labels)
				}
			}
		})
	}
}

// TestDialectsOnlyWhenDeclared keeps a default twin's series what they
// were: a dialect costs only the runs that declare it.
func TestDialectsOnlyWhenDeclared(t *testing.T) {
	t.Parallel()
	base := newTwin(t, Options{Spec: oneNode()})
	for name, d := range dialects() {
		for _, m := range d.gpu {
			if len(base.Select(m.name)) != 0 {
				t.Errorf("%s exported without %s declared", m.name, name)
			}
		}
		spec := oneNode()
		spec.Exporter.Exporters = []string{name, name}
		tw := newTwin(t, Options{Spec: spec})
		if got, want := len(tw.Series())-len(base.Series()), len(d.gpu)*8+len(d.node)+len(d.cluster); got != want {
			t.Errorf("%s declared twice adds %d series, want %d", name, got, want)
		}
	}
}

// TestExporterOwnSeries checks the series exporters export about their
// node or the cluster, before and while a fault plays on gpu-node-0.
func TestExporterOwnSeries(t *testing.T) {
	t.Parallel()
	pluginKill := catalog.Effect{Kind: catalog.EffectNode, Mode: "device-plugin-kill"}
	offBus := catalog.Effect{Kind: catalog.EffectOffBus}
	tests := []struct {
		name, exporter, metric string
		// node picks the series by its label node or instance; "" is
		// the cluster's one series.
		node         string
		effect       catalog.Effect
		before, want float64
	}{
		{"operator counts GPU nodes", ExporterGPUOperator, "gpu_operator_gpu_nodes_total", "", pluginKill, 2, 2},
		{"devices gone with the plugin", ExporterGPUOperator, "gpu_operator_node_device_plugin_devices_total", "gpu-node-0", pluginKill, 8, 0},
		{"other node keeps its devices", ExporterGPUOperator, "gpu_operator_node_device_plugin_devices_total", "gpu-node-1", pluginKill, 8, 8},
		{"plugin validation stamp holds", ExporterGPUOperator, "gpu_operator_node_device_plugin_validation_last_success_ts_seconds", "gpu-node-0", pluginKill,
			float64(defaultStart().Unix() + 120), float64(defaultStart().Unix() + 120)},
		{"off-bus GPU stays unhealthy in capacity", ExporterGPUOperator, "gpu_operator_node_device_plugin_devices_total", "gpu-node-0", offBus, 8, 8},
		{"nvidia-smi collection stays healthy", ExporterNVIDIAGPU, "nvidia_smi_last_collect_success", "gpu-node-0:9835", offBus, 1, 1},
		{"nvidia-smi lists one GPU fewer", ExporterNVIDIAGPU, "nvidia_smi_count", "gpu-node-0:9835", offBus, 8, 7},
		{"NVML still counts the lost GPU", ExporterNVIDIAGPUProm, "nvidia_gpu_num_devices", "gpu-node-0:9445", offBus, 8, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := Default()
			spec.Exporter.Exporters = []string{tc.exporter}
			tw := newTwin(t, Options{Spec: spec})
			pick := func() *series.Series {
				var out *series.Series
				for _, s := range tw.Select(tc.metric) {
					if tc.node == "" || s.Labels.Get("node") == tc.node || s.Labels.Get("instance") == tc.node {
						// nvidia_smi_count is per GPU: take GPU 1's, which
						// stays on the bus.
						if u := s.Labels.Get("uuid"); u == "" || u == nvidiaSMIUUID(tw.byNode["gpu-node-0"].gpus[1]) {
							out = s
						}
					}
				}
				if out == nil {
					t.Fatalf("no %s series for %q", tc.metric, tc.node)
				}
				return out
			}
			sleep(t, tw, 2*time.Minute)
			if got := last(pick()); got != tc.before {
				t.Errorf("before the fault %s = %g, want %g", tc.metric, got, tc.before)
			}
			ref := nodeRef("gpu-node-0")
			if tc.effect.Kind == catalog.EffectOffBus {
				ref = gpuRef(tw, "gpu-node-0", 0)
			}
			apply(t, tw, "fault", ref, tc.effect)
			sleep(t, tw, 5*time.Minute)
			if got := last(pick()); got != tc.want {
				t.Errorf("under the fault %s = %g, want %g", tc.metric, got, tc.want)
			}
		})
	}
}
