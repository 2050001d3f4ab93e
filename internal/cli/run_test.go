package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/node/gpu/nvmlgpu"
)

// TestRunBadFiles covers the bad experiment files of
// api/v1alpha1/testdata/bad end to end: each exits 2 with one line naming
// the file and the field.
func TestRunBadFiles(t *testing.T) {
	t.Parallel()
	dir := "../../api/v1alpha1/testdata/bad/"
	tests := []struct {
		file, want string
	}{
		{"unknown-fault.yaml", `spec.faults[0].id: unknown fault "hardware.xdi" (did you mean hardware.xid?)`},
		{"param-out-of-range.yaml", "spec.faults[0].params.factor: 20 is above the maximum 10"},
		{"unknown-xid.yaml", "spec.faults[1].params.code: XID code 1000 is not a known XID"},
		{"unknown-field.yaml", "unknown field"},
		{"malformed.yaml", "malformed YAML"},
		{"empty-selector.yaml", "spec.selector: empty selector; name nodes, nodeSelector, gpus or jobs"},
		{"blast-radius.yaml", "spec.blastRadius: selection touches 16 GPUs on 2 nodes, over the cap maxGPUs=4"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCLI(t, "", "run", dir+tt.file)
			if code != 2 {
				t.Errorf("exit %d, want 2 (stdout %q)", code, out)
			}
			if !strings.Contains(errs, tt.want) || !strings.Contains(errs, tt.file) {
				t.Errorf("stderr %q, want it to name %s and contain %q", errs, tt.file, tt.want)
			}
			if strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Errorf("error is not one line: %q", errs)
			}
			if out != "" {
				t.Errorf("bad input printed to stdout: %q", out)
			}
		})
	}
}

func TestRunExample(t *testing.T) {
	t.Parallel()
	rec := filepath.Join(t.TempDir(), "run.json")
	code, out, errs := runCLI(t, "", "run", "../../examples/thermal-throttle.yaml", "--record", rec)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	if !strings.Contains(out, "dcgm-gpu-temp-high  PASS") {
		t.Errorf("no passing verdict in:\n%s", out)
	}
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Verdicts []struct {
			Verdict    string   `json:"verdict"`
			TTDSeconds *float64 `json:"ttd_seconds"`
		} `json:"verdicts"`
		Timeline []struct{ Kind string }    `json:"timeline"`
		Plan     struct{ Injections []any } `json:"plan"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Verdicts) != 1 || r.Verdicts[0].Verdict != "pass" || r.Verdicts[0].TTDSeconds == nil || len(r.Plan.Injections) != 1 {
		t.Errorf("record: %s", b)
	}
}

// TestRunWorkloadChecks runs the workload example on the twin: the checks
// are judged after recovery, their measurements printed, and a goodput
// under its bound fails the run.
func TestRunWorkloadChecks(t *testing.T) {
	t.Parallel()
	rec := filepath.Join(t.TempDir(), "run.json")
	code, out, errs := runCLI(t, "", "run", "../../examples/kill-rank-goodput.yaml", "--record", rec)
	if code != 1 || !strings.Contains(errs, "not every expectation passed") {
		t.Fatalf("exit %d (%s), want 1: the example's goodput bound is not met\n%s", code, errs, out)
	}
	for _, want := range []string{
		"resumed-from-newest  PASS", "lost-work            PASS", "rate-back            PASS", "goodput-30m          FAILED",
		"resumed-from-newest: llm-pretrain: resumed from step", "its newest checkpoint",
		"goodput-30m: llm-pretrain: goodput 0.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Every detector cleared") {
		t.Errorf("a clearing line for a run with no detector:\n%s", out)
	}
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Verdicts []struct {
			Name    string   `json:"name"`
			Verdict string   `json:"verdict"`
			Value   *float64 `json:"value"`
		} `json:"verdicts"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	for _, v := range r.Verdicts {
		if v.Value == nil {
			t.Errorf("%s: no measured value in the record", v.Name)
		}
		if v.Name == "goodput-30m" && (v.Verdict != "failed" || *v.Value <= 0 || *v.Value >= 0.8) {
			t.Errorf("goodput verdict %s %v, want failed under 0.8", v.Verdict, *v.Value)
		}
	}
}

// TestRunMissedExitsOne: a run whose expectation is missed is a failed run,
// not bad input.
func TestRunMissedExitsOne(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "", "run", "../../examples/nccl-p2p-off.yaml")
	if code != 1 || !strings.Contains(out, "MISSED") || !strings.Contains(errs, "not every expectation passed") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestRunDryRun(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "", "run", "../../examples/vram-fill-percent.yaml", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "Nothing was injected") || strings.Count(out, "exhaustion.vram") != 2 {
		t.Errorf("dry run should list the two GPUs of 25%% of a node:\n%s", out)
	}
	code, out, _ = runCLI(t, "", "run", "../../examples/vram-fill-percent.yaml", "--dry-run", "--format", "json")
	var plan struct {
		Injections []struct {
			Fault  string `json:"fault"`
			Target struct {
				UUID string `json:"uuid"`
			} `json:"target"`
		} `json:"injections"`
	}
	if err := json.Unmarshal([]byte(out), &plan); code != 0 || err != nil || len(plan.Injections) != 2 || plan.Injections[0].Target.UUID == "" {
		t.Errorf("json dry run: exit %d, err %v, %s", code, err, out)
	}
}

func TestRunK8sNeedsAKubeconfig(t *testing.T) {
	t.Parallel()
	code, _, errs := runCLI(t, "", "run", "../../examples/thermal-throttle.yaml", "--target", "k8s", "--kubeconfig", filepath.Join(t.TempDir(), "missing"))
	if code != 2 || !strings.Contains(errs, "--kubeconfig: ") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Errorf("exit %d, stderr %q; want 2 and one line naming --kubeconfig", code, errs)
	}
}

// TestRunLocalWithoutGPU: without NVML a local run still recovers its
// ledger and goes on with what it can select; a GPU fault then fails on
// the selector, naming the GPU, and says why no GPU is listed.
func TestRunLocalWithoutGPU(t *testing.T) {
	t.Parallel()
	if src, err := nvmlgpu.Open(); err == nil {
		src.Close()
		t.Skip("this machine has a GPU driver; the test is about one without")
	}
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	code, out, errs := runCLI(t, "", "run", "../../examples/local/xid-kernel-log.yaml", "--target", "local", "--ledger", ledgerPath)
	if code != 2 || !strings.Contains(errs, `spec.selector.gpus[0]: GPU "0" is not on the inventory`) ||
		!strings.Contains(errs, "note: no GPUs listed") || !strings.Contains(errs, "node, job, rank and checkpoint faults can") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 naming the GPU the selector asks for and why none is listed", code, out, errs)
	}
}

// TestRefusalsSayWhatToDo: the two YAML files gpuchaos reads, each passed
// where the other belongs, an endless file, a local experiment run on the
// twin, a warm-up out of bounds: one line that names the flag or says what
// to do instead, exit 2.
func TestRefusalsSayWhatToDo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"cluster spec as the experiment", []string{"run", "../../examples/twin/h200-2x8.yaml"}, "this is a twin cluster spec (nodes, jobs), not an Experiment: pass it with --cluster"},
		{"experiment as demo's cluster", []string{"demo", "--cluster", "../../examples/thermal-throttle.yaml"}, "--cluster: ../../examples/thermal-throttle.yaml has kind: Experiment, not a twin cluster spec: run it with 'gpuchaos run ../../examples/thermal-throttle.yaml'"},
		{"experiment as run's cluster", []string{"run", "../../examples/thermal-throttle.yaml", "--cluster", "../../examples/thermal-throttle.yaml"}, "has kind: Experiment, not a twin cluster spec"},
		{"an endless cluster spec", []string{"demo", "--cluster", "/dev/zero"}, "--cluster: load cluster spec: /dev/zero: larger than the limit"},
		{"a negative warm-up", []string{"run", "../../examples/thermal-throttle.yaml", "--warmup", "-5m"}, "--warmup: must not be negative, got -5m0s"},
		{"a warm-up past the limit", []string{"run", "../../examples/thermal-throttle.yaml", "--warmup", "100000h"}, "--warmup: at most 24h0m0s, got 100000h0m0s"},
		{"local experiment on the twin", []string{"run", "../../examples/local/sm-burn.yaml"}, `"burn" of exhaustion.sm-burn runs on target local or k8s, not twin: use --target local, or leave the mechanism out to use twin's own (twin)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, errs := runCLI(t, "", tt.args...)
			if code != 2 || !strings.Contains(errs, tt.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Errorf("exit %d, stderr %q; want 2 and one line containing %q", code, errs, tt.want)
			}
		})
	}
}

func TestDemoJSON(t *testing.T) {
	t.Parallel()
	html := filepath.Join(t.TempDir(), "demo.html")
	code, out, errs := runCLI(t, "", "demo", "--format", "json", "--html", html)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		Faults []struct {
			ID     string `json:"id"`
			Family string `json:"family"`
		} `json:"faults"`
		Detectors []struct {
			Name string `json:"name"`
		} `json:"detectors"`
		Matrix []struct {
			Fault      string   `json:"fault"`
			Detector   string   `json:"detector"`
			Detected   *bool    `json:"detected"`
			TTDSeconds *float64 `json:"ttd_seconds"`
		} `json:"matrix"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	families := map[string]bool{}
	for _, f := range doc.Faults {
		families[f.Family] = true
	}
	for _, f := range []string{"hardware", "exhaustion", "nccl", "network", "ebpf", "checkpoint", "numa", "workload"} {
		if !families[f] {
			t.Errorf("no fault of family %s", f)
		}
	}
	if len(doc.Faults) < 30 || len(doc.Detectors) == 0 || len(doc.Matrix) != len(doc.Faults)*len(doc.Detectors) {
		t.Errorf("%d faults, %d detectors, %d cells", len(doc.Faults), len(doc.Detectors), len(doc.Matrix))
	}
	for _, c := range doc.Matrix {
		if c.Fault == "" || c.Detector == "" || c.Detected == nil || *c.Detected != (c.TTDSeconds != nil) {
			t.Fatalf("bad cell %+v", c)
		}
	}
	if b, err := os.ReadFile(html); err != nil || !strings.Contains(string(b), "<table>") {
		t.Errorf("heatmap not written: %v", err)
	}
}

func TestDemoTable(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "", "demo", "--faults", "numa,hardware.xid", "--html", "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// The agent's NUMA check catches three of the four NUMA faults;
	// cpu-saturation moves neither affinity nor placement.
	for _, want := range []string{"numa.remote-memory", "numa-misaligned 1.5m", "MISSED by all", "hardware.xid", "kmsg-xid", "Detected within the deadline: 4 of 5 faults", "Goodput:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, _, errs := runCLI(t, "", "demo", "--faults", "bogus"); code != 2 || !strings.Contains(errs, `"bogus" is neither a fault id nor a family`) {
		t.Errorf("bad --faults: exit %d, %q", code, errs)
	}
}
