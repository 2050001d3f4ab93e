package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTwinSimulateJSON(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "", "twin", "simulate", "--gpus", "16384", "--days", "30", "--format", "json")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	for _, k := range []string{"interruptions_total", "interruptions_by_class", "goodput", "ettr", "lost_gpu_hours",
		"gpus", "days", "seed", "rates", "checkpoint_interval", "checkpoint_cost_seconds", "checkpoint_async",
		"restart_cost_seconds", "mtbf_hours", "checkpoint_interval_optimal"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("key %q missing", k)
		}
	}
	var got struct {
		GPUs          int                `json:"gpus"`
		Days          float64            `json:"days"`
		Total         int                `json:"interruptions_total"`
		ByClass       map[string]int     `json:"interruptions_by_class"`
		Rates         map[string]float64 `json:"rates"`
		Goodput       float64            `json:"goodput"`
		ETTR          float64            `json:"ettr"`
		Lost          float64            `json:"lost_gpu_hours"`
		MTBF          *float64           `json:"mtbf_hours"`
		Optimal       string             `json:"checkpoint_interval_optimal"`
		OptimalSecond float64            `json:"checkpoint_interval_optimal_seconds"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, n := range got.ByClass {
		sum += n
	}
	// 30 days of 16,384 GPUs at 1.97e-5 per GPU-hour: 233 expected, SD 15.
	if got.GPUs != 16384 || got.Days != 30 || got.Total != sum || got.Total < 170 || got.Total > 300 {
		t.Errorf("gpus %d, days %v, %d interruptions, by class summing to %d", got.GPUs, got.Days, got.Total, sum)
	}
	if len(got.Rates) != 12 || len(got.ByClass) != 12 {
		t.Errorf("%d rates and %d classes counted, want 12 each", len(got.Rates), len(got.ByClass))
	}
	if got.ETTR <= 0.5 || got.ETTR >= 1 || got.Goodput != got.ETTR {
		t.Errorf("ETTR %v, goodput %v", got.ETTR, got.Goodput)
	}
	if want := 16384 * 30 * 24 * (1 - got.ETTR); got.Lost < want*0.999 || got.Lost > want*1.001 {
		t.Errorf("lost GPU-hours %v, want GPUs × (wall − productive) = %v", got.Lost, want)
	}
	if got.MTBF == nil || *got.MTBF < 2.5 || *got.MTBF > 4 {
		t.Errorf("mtbf_hours %v, want about 3.1", got.MTBF)
	}
	// √(2 · 60 s · 3.1 h) ≈ 19 min.
	if got.OptimalSecond < 15*60 || got.OptimalSecond > 23*60 || got.Optimal == "" {
		t.Errorf("checkpoint_interval_optimal %q (%v s), want about 19 min", got.Optimal, got.OptimalSecond)
	}
}

func TestTwinSimulateTable(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "", "twin", "simulate", "--gpus", "1024", "--days", "10", "--seed", "3", "--async")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"1,024 × H100", "10 days, seed 3", "asynchronous", "CLASS", "MTBF:", "Goodput:", "ETTR:", "Lost GPU-hours:", "Young's interval:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestTwinSimulateIsReproducible(t *testing.T) {
	t.Parallel()
	args := []string{"twin", "simulate", "--gpus", "4096", "--days", "20", "--seed", "9", "--format", "json"}
	_, a, _ := runCLI(t, "", args...)
	_, b, _ := runCLI(t, "", args...)
	if a != b || a == "" {
		t.Fatal("the same seed printed different results")
	}
}

func TestTwinSimulateRatesFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "rates.yaml")
	// Everything off but software bugs, at ten times the default.
	body := "faulty-gpu: 0\nhbm3: 0\nnetwork-switch: 0\nhost-maintenance: 0\nsram: 0\ngsp: 0\nnic: 0\n" +
		"nccl-watchdog: 0\nsilent-data-corruption: 0\nthermal-sensor: 0\nother: 0\nsoftware-bug: 2.5e-5\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "", "twin", "simulate", "--gpus", "1024", "--days", "30", "--rates", file, "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var got struct {
		Total   int            `json:"interruptions_total"`
		ByClass map[string]int `json:"interruptions_by_class"`
		File    string         `json:"rates_file"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	// 1024 × 720 h × 2.5e-5 ≈ 18 expected.
	if got.Total == 0 || got.ByClass["software-bug"] != got.Total || got.File != file {
		t.Errorf("%d interruptions, %d software bugs, rates_file %q", got.Total, got.ByClass["software-bug"], got.File)
	}
}

func TestTwinSimulateRejectsBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.yaml")
	negative := filepath.Join(dir, "negative.json")
	if err := os.WriteFile(unknown, []byte("cosmic-rays: 1e-6\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(negative, []byte(`{"hbm3": -1e-6}`), 0o600); err != nil {
		t.Fatal(err)
	}
	rates := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"zero GPUs", []string{"--gpus", "0"}, []string{"--gpus", "positive"}},
		{"negative GPUs", []string{"--gpus", "-5"}, []string{"--gpus"}},
		{"zero days", []string{"--days", "0"}, []string{"--days"}},
		{"negative days", []string{"--days", "-1"}, []string{"--days"}},
		{"days past the clock", []string{"--days", "1e9"}, []string{"--days"}},
		{"gpus per node", []string{"--gpus-per-node", "0"}, []string{"--gpus-per-node"}},
		{"model", []string{"--model", "V100"}, []string{"--model", "V100"}},
		{"interval", []string{"--checkpoint-interval", "0s"}, []string{"--checkpoint-interval"}},
		{"cost", []string{"--checkpoint-cost", "-1s"}, []string{"--checkpoint-cost"}},
		{"restart", []string{"--restart-cost", "0s"}, []string{"--restart-cost"}},
		{"async stall without async", []string{"--async-stall", "5s"}, []string{"--async-stall", "--async"}},
		{"unknown class in rates", []string{"--rates", unknown}, []string{"--rates", "unknown.yaml", "cosmic-rays"}},
		{"negative rate", []string{"--rates", negative}, []string{"--rates", "negative.json", "hbm3", "negative"}},
		{"missing rates file", []string{"--rates", filepath.Join(dir, "absent.yaml")}, []string{"absent.yaml"}},
		{"GPUs past the limit", []string{"--gpus", "2000000000"}, []string{"--gpus: at most 1,048,576, got 2000000000"}},
		{"GPUs per node past the limit", []string{"--gpus-per-node", "100"}, []string{"--gpus-per-node: at most 72, got 100"}},
		{"rate 1000", []string{"--rates", rates("r1000.yaml", "faulty-gpu: 1000\n")},
			[]string{"--rates", "r1000.yaml", `class "faulty-gpu"`, "over the limit of 1"}},
		{"rate 1e30", []string{"--rates", rates("r1e30.yaml", "faulty-gpu: 1e30\n")},
			[]string{"--rates", "r1e30.yaml", `class "faulty-gpu"`, "over the limit of 1"}},
		{"NaN rate", []string{"--rates", rates("nan.yaml", "hbm3: .nan\n")}, []string{"--rates", "nan.yaml", `class "hbm3"`, "not a finite number"}},
		{"infinite rate", []string{"--rates", rates("inf.json", `{"hbm3": 1e999}`)}, []string{"--rates", "inf.json", `class "hbm3"`}},
		{"rates adding up past the limit", []string{"--rates", rates("sum.yaml", "faulty-gpu: 0.6\nhbm3: 0.6\n")},
			[]string{"--rates", "sum.yaml", "add up to", "over the limit of 1"}},
		{"too many interruptions expected", []string{"--rates", rates("half.yaml", "faulty-gpu: 0.5\n"), "--days", "5"},
			[]string{"--days", "expect 983,065 interruptions, over the limit of 500,000", "--gpus", "--rates"}},
		{"default rates over a long window of the largest fleet", []string{"--gpus", "1048576", "--days", "36500"},
			[]string{"--days", "over the limit of 500,000"}},
		{"format", []string{"--format", "xml"}, []string{"--format"}},
		{"unknown flag", []string{"--nodes", "3"}, []string{"--nodes"}},
		{"not a number", []string{"--gpus", "many"}, []string{"--gpus"}},
		{"stray argument", []string{"extra"}, []string{"extra"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCLI(t, "", append([]string{"twin", "simulate"}, tt.args...)...)
			if code == 0 {
				t.Fatalf("exit 0, stdout %q", out)
			}
			if strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "gpuchaos: ") {
				t.Errorf("stderr %q, want one line starting gpuchaos:", errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q lacks %q", errs, w)
				}
			}
		})
	}
}

func TestTwinWithoutSubcommandShowsHelp(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(t, "", "twin")
	if code != 0 || !strings.Contains(out, "simulate") {
		t.Errorf("exit %d, output %q", code, out)
	}
}

func TestThousands(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0"}, {999, "999"}, {1000, "1,000"}, {16384, "16,384"}, {2042581.34, "2,042,581"}, {999999.6, "1,000,000"}, {-1234, "-1,234"},
	}
	for _, tt := range tests {
		if got := thousands(tt.in); got != tt.want {
			t.Errorf("thousands(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestWrapList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		items []string
		width int
		want  string
	}{
		{"fits on one line", []string{"a", "b"}, 20, "  a, b"},
		{"breaks before the item that would overflow", []string{"aaaa", "bbbb", "cccc"}, 14, "  aaaa, bbbb,\n  cccc"},
		{"an item longer than the width gets its own line", []string{"a", "bbbbbbbbbbbb"}, 8, "  a,\n  bbbbbbbbbbbb"},
		{"empty", nil, 10, "  "},
	}
	for _, tt := range tests {
		if got := wrapList(tt.items, "  ", tt.width); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestWarmupBounds: every command that warms a twin up refuses a warm-up
// outside 0..twin.MaxWarmup up front, in one line naming the flag and the
// limit, with exit 2 (before, run --warmup -5m exited 1 with "sleep:
// negative duration", and 100000h ate 5 GB).
func TestWarmupBounds(t *testing.T) {
	t.Parallel()
	const exp = "../../examples/thermal-throttle.yaml"
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"run negative", []string{"run", exp, "--warmup", "-5m"}, 2, "gpuchaos: --warmup: must not be negative, got -5m0s\n"},
		{"run past the limit", []string{"run", exp, "--warmup", "100000h"}, 2, "gpuchaos: --warmup: at most 24h0m0s, got 100000h0m0s\n"},
		{"run live past the limit", []string{"run", exp, "--target", "live", "--warmup", "25h"}, 2, "gpuchaos: --warmup: at most 24h0m0s, got 25h0m0s\n"},
		{"run at the limit", []string{"run", exp, "--dry-run", "--warmup", "24h"}, 0, ""},
		{"twin serve past the limit", []string{"twin", "serve", "--warmup", "10000h"}, 2, "gpuchaos: --warmup: at most 24h0m0s, got 10000h0m0s\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, errs := runCLI(t, "", tc.args...)
			if code != tc.code || errs != tc.want {
				t.Errorf("exit %d, stderr %q; want exit %d, stderr %q", code, errs, tc.code, tc.want)
			}
		})
	}
}
