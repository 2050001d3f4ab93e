package twin

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/rules"
	"github.com/gpuchaos/gpuchaos/internal/series"
)

// TestExportersMatchRegistry holds the twin's exporter names to
// internal/rules' registry, which coverage --exporter takes: every name the
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
		// scale converts the DCGM field's unit to the dialect's.
		scale float64
		// wantLabels must be on the dialect's series; unwanted must not.
		wantLabels map[string]string
		unwanted   []string
	}{
		{"dcgm 1.x temperature", ExporterDCGM1x, "dcgm_gpu_temp", "DCGM_FI_DEV_GPU_TEMP", 1,
			map[string]string{"gpu": "0", "device": "nvidia0", "modelName": "NVIDIA H200", "Hostname": "gpu-node-0"}, []string{"UUID"}},
		{"dcgm 1.x SM clock", ExporterDCGM1x, "dcgm_sm_clock", "DCGM_FI_DEV_SM_CLOCK", 1, nil, nil},
		{"dcgm 1.x power", ExporterDCGM1x, "dcgm_power_usage", "DCGM_FI_DEV_POWER_USAGE", 1, nil, nil},
		{"dcgm 1.x last XID", ExporterDCGM1x, "dcgm_xid_errors", "DCGM_FI_DEV_XID_ERRORS", 1, nil, nil},
		{"dcgm 1.x tensor", ExporterDCGM1x, "dcgm_fi_prof_pipe_tensor_active", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := oneNode()
			spec.Exporter.Exporters = []string{ExporterDCGM, tc.exporter}
			tw := newTwin(t, Options{Spec: spec})
			sleep(t, tw, 2*time.Minute)
			apply(t, tw, "heat", gpuRef(tw, "gpu-node-0", 0), thermal...)
			sleep(t, tw, 10*time.Minute)
			revert(t, tw, "heat")
			apply(t, tw, "bus", gpuRef(tw, "gpu-node-0", 0), catalog.Effect{Kind: catalog.EffectOffBus})
			sleep(t, tw, 2*time.Minute)

			got, want := gpuSeries(tw, tc.metric, "gpu-node-0", 0), gpuSeries(tw, tc.field, "gpu-node-0", 0)
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
					!series.IsStale(s.V) && math.Abs(s.V-tc.scale*w.V) > 1e-9*math.Abs(s.V) {
					t.Fatalf("sample %d: %v, %s reads %v (scale %g)", i, s, tc.field, w, tc.scale)
				}
				moved = moved || s.V != got.Samples[0].V
			}
			if !moved && tc.field != "DCGM_FI_DEV_XID_ERRORS" {
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
		if got, want := len(tw.Series())-len(base.Series()), len(d.gpu)*8; got != want {
			t.Errorf("%s declared twice adds %d series, want %d", name, got, want)
		}
	}
}
