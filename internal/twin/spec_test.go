package twin

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
)

const exampleSpec = "../../examples/twin/h200-2x8.yaml"

func TestExampleIsDefault(t *testing.T) {
	t.Parallel()
	got, err := LoadClusterSpec(exampleSpec)
	if err != nil {
		t.Fatal(err)
	}
	if want := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("%s differs from Default():\n got %+v\nwant %+v", exampleSpec, got, want)
	}
}

func TestSpecRoundTrip(t *testing.T) {
	t.Parallel()
	specs := map[string]ClusterSpec{"default": Default()}
	custom := ClusterSpec{
		Name: "mixed",
		Nodes: NodesSpec{Model: "h100", List: []NodeSpec{
			{Name: "a"}, {Name: "b", Model: "B200", GPUs: 4, Labels: map[string]string{"pool": "big"}},
		}, Labels: map[string]string{"zone": "z1"}},
		Variability: VariabilitySpec{Kind: "pal", Class: "b"},
		Exporter:    ExporterSpec{OptIn: []string{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"}},
		Jobs: []JobSpec{
			{Name: "small", Ranks: 4, CheckpointMode: "sync"},
			{Name: "flops", Ranks: 8, FLOPsPerStep: 4e14},
		},
	}
	if err := custom.normalize(); err != nil {
		t.Fatal(err)
	}
	specs["custom"] = custom
	for name, s := range specs {
		data, err := yaml.Marshal(s)
		if err != nil {
			t.Fatalf("%s: marshal: %v", name, err)
		}
		path := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		back, err := LoadClusterSpec(path)
		if err != nil {
			t.Fatalf("%s: parse back: %v\n%s", name, err, data)
		}
		if !reflect.DeepEqual(back, s) {
			t.Errorf("%s: round trip changed the spec:\n got %+v\nwant %+v", name, back, s)
		}
		if _, err := New(Options{Spec: back}); err != nil {
			t.Errorf("%s: New: %v", name, err)
		}
	}
	// The older name stays as opted in: the twin exports it under that
	// name, so rules written against it match.
	if got := custom.Exporter.OptIn; !reflect.DeepEqual(got, []string{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"}) {
		t.Errorf("throttle reasons alias normalised to %v", got)
	}
	if l := custom.Nodes.List[1].Labels; l["zone"] != "z1" || l["pool"] != "big" {
		t.Errorf("labels not merged: %v", l)
	}
}

func TestBadSpecs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, field string
	}{
		{"unknown top-level field", "nodez: {count: 2}\n", "nodez"},
		{"unknown nested field", "nodes: {count: 2, gpuModel: H200}\n", "gpuModel"},
		{"unknown model", "nodes: {model: V100}\n", "nodes.model"},
		{"unknown model in list", "nodes: {list: [{name: a}, {name: b, model: X1}]}\n", "nodes.list[1].model"},
		{"count disagrees with list", "nodes: {count: 3, list: [{name: a}]}\n", "nodes.count"},
		{"duplicate node", "nodes: {list: [{name: a}, {name: a}]}\n", "nodes.list[1].name"},
		{"negative bandwidth", "network: {nodeBandwidthGBps: -1}\n", "network.nodeBandwidthGBps"},
		{"efficiency above one", "network: {collectiveEfficiency: 1.5}\n", "network.collectiveEfficiency"},
		{"bad variability", "variability: {kind: gaussian}\n", "variability.kind"},
		{"bad PAL class", "variability: {kind: pal, class: E}\n", "variability.class"},
		{"unknown failure class", "failureRates: {cosmic-rays: 1e-6}\n", "failureRates.cosmic-rays"},
		{"negative rate", "failureRates: {hbm3: -1}\n", "failureRates.hbm3"},
		{"unknown opt-in", "exporter: {optIn: [DCGM_FI_DEV_NOPE]}\n", "exporter.optIn[0]"},
		{"unknown exporter", "exporter: {exporters: [nvidia-smi]}\n", "exporter.exporters[0]"},
		{"scrape too fast", "exporter: {scrapeInterval: 100ms}\n", "exporter.scrapeInterval"},
		{"job without name", "jobs: [{gpus: all}]\n", "jobs[0].name"},
		{"too many ranks", "jobs: [{name: a, ranks: 17}]\n", "jobs[0].ranks"},
		{"second job finds no GPUs", "jobs: [{name: a, gpus: all}, {name: b, ranks: 1}]\n", "jobs[1].ranks"},
		{"bad gpus", "jobs: [{name: a, gpus: half}]\n", "jobs[0].gpus"},
		{"bad checkpoint mode", "jobs: [{name: a, ranks: 2, checkpointMode: maybe}]\n", "jobs[0].checkpointMode"},
		{"memory over the GPU", "jobs: [{name: a, ranks: 2, memoryGiB: 200}]\n", "jobs[0].memoryGiB"},
		{"bad duration", "jobs: [{name: a, ranks: 2, restartCost: soon}]\n", "restartCost"},
		{"two documents", "name: a\n---\nname: b\n", "one YAML document"},
		{"empty", "", "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseClusterSpec([]byte(tc.yaml), "bad.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "bad.yaml") || !strings.Contains(msg, tc.field) {
				t.Errorf("error %q should start with the file and name %q", msg, tc.field)
			}
		})
	}
	var fe *v1alpha1.FieldError
	_, err := ParseClusterSpec([]byte("nodes: {model: V100}\n"), "x.yaml")
	if !errors.As(err, &fe) || fe.Path != "nodes.model" {
		t.Errorf("want a *v1alpha1.FieldError for nodes.model, got %v", err)
	}
	if _, err := LoadClusterSpec(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestPresets(t *testing.T) {
	t.Parallel()
	for name, m := range Presets() {
		if m.Name != name || m.ModelName == "" || !(m.IdleWatts < m.TDPWatts) || !(m.BaseSMClockMHz < m.MaxSMClockMHz) ||
			!(m.SlowdownCelsius < m.ShutdownCelsius) || m.NVLinks == 0 || !(m.ThermalResistance > 0) {
			t.Errorf("preset %s inconsistent: %+v", name, m)
		}
	}
	if m, err := Preset("h200"); err != nil || m.ModelName != "NVIDIA H200" || m.MaxSMClockMHz != 1980 || m.NVLinks != 18 {
		t.Errorf("H200 preset %+v, %v", m, err)
	}
	fs, err := palFactors("A")
	if err != nil || len(fs) != 32 {
		t.Fatalf("PAL class A: %d factors, %v", len(fs), err)
	}
}

func FuzzParseClusterSpec(f *testing.F) {
	if data, err := os.ReadFile(exampleSpec); err == nil {
		f.Add(data)
	}
	f.Add([]byte("nodes: {count: 1, gpusPerNode: 2}\njobs: [{name: a, ranks: 2}]\n"))
	f.Add([]byte("nodes: {list: [{name: a, model: B200, gpus: 4}]}\nvariability: {kind: pal}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseClusterSpec(data, "fuzz.yaml")
		if err != nil {
			return
		}
		// Whatever parses must normalise to a fixed point and build.
		again := cloneSpec(s)
		if err := again.normalize(); err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("normalize is not idempotent: %v", err)
		}
		gpus := 0
		for _, n := range s.Nodes.List {
			gpus += n.GPUs
		}
		if gpus <= 256 {
			if _, err := New(Options{Spec: s}); err != nil {
				t.Fatalf("parsed spec does not build: %v", err)
			}
		}
	})
}
