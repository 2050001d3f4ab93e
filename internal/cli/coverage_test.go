package cli

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
)

func TestCoverageBadRules(t *testing.T) {
	t.Parallel()
	dir := "../../internal/detect/rules/testdata/"
	tmp := t.TempDir()
	// Sparse: 50 MB that take no disk and, if read, would be zeros.
	huge := filepath.Join(tmp, "huge.yaml")
	if f, err := os.Create(huge); err != nil {
		t.Fatal(err)
	} else if err := f.Truncate(50 << 20); err != nil || f.Close() != nil {
		t.Fatal(err)
	}
	many := filepath.Join(tmp, "many.yaml")
	var doc strings.Builder
	doc.WriteString("groups:\n- name: g\n  rules:\n")
	for i := range coverage.MaxRules + 1 {
		fmt.Fprintf(&doc, "  - {alert: A%d, expr: up}\n", i)
	}
	if err := os.WriteFile(many, []byte(doc.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"not YAML", []string{"--rules", dir + "not_yaml.yaml"}, "not_yaml.yaml:6: not YAML"},
		{"PromQL syntax error", []string{"--rules", dir + "bad_expr.yaml"}, `bad_expr.yaml: group "gpu" rule "GpuHot" (line 6): expr: 1:27: parse error`},
		{"duplicate rule", []string{"--rules", dir + "dup_alert.yaml"}, `rule "GpuHot" (line 13): duplicate alert name`},
		{"missing file", []string{"--rules", dir + "nope.yaml"}, "nope.yaml"},
		{"no rules", nil, "--rules: name at least one rule file"},
		{"unknown pack", []string{"--rules", "pack:nope"}, `unknown rule pack "nope"`},
		{"bad format", []string{"--rules", "pack:seed", "--format", "pdf"}, `--format: "pdf" is not one of table, json, junit or html`},
		{"file over the size limit", []string{"--rules", huge}, "huge.yaml: 50.0 MiB, over the 4 MiB limit for a rule file"},
		{"rules over the count limit", []string{"--rules", many}, "--rules: 20001 rules, over the 20000 one coverage run evaluates"},
		{"unknown opt-in", []string{"--rules", "pack:seed", "--opt-in", "NOT_A_METRIC"},
			"--opt-in: NOT_A_METRIC is not a dcgm-exporter opt-in counter gpuchaos knows (known: DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, "},
		{"default counter as opt-in", []string{"--rules", "pack:seed", "--opt-in", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,DCGM_FI_DEV_GPU_TEMP"},
			"--opt-in: DCGM_FI_DEV_GPU_TEMP is exported by default (dcgm-exporter)"},
		{"misspelt opt-in", []string{"--rules", "pack:seed", "--opt-in", "DCGM_FI_DEV_FB_TOTL"},
			"--opt-in: DCGM_FI_DEV_FB_TOTL is not a dcgm-exporter opt-in counter gpuchaos knows; did you mean DCGM_FI_DEV_FB_TOTAL?"},
		{"scrape interval under the twin's", []string{"--rules", "pack:seed", "--scrape-interval", "500ms"}, "--scrape-interval: must be between 1s and 10m, got 500ms"},
		{"negative evaluation interval", []string{"--rules", "pack:seed", "--evaluation-interval", "-15s"}, "--evaluation-interval: must be between 1s and 10m, got -15s"},
		{"evaluation interval past the deadline", []string{"--rules", "pack:seed", "--evaluation-interval", "1h"}, "--evaluation-interval: must be between 1s and 10m, got 1h0m0s"},
		{"unknown finding", []string{"--rules", "pack:seed", "--fail-on", "missed,loud"}, `--fail-on: "loud" is not one of missed, never-fires, opt-in-off, noisy or unknown`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCLI(t, "", append([]string{"coverage"}, tt.args...)...)
			if code != 2 || !strings.Contains(errs, tt.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 || out != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 2 and one line containing %q", code, errs, out, tt.want)
			}
		})
	}
}

// TestCoverageFormats runs the seed's rule and a two-rule file of our own
// against three faults in every format.
func TestCoverageFormats(t *testing.T) {
	t.Parallel()
	rulesFile := filepath.Join(t.TempDir(), "team.yaml")
	if err := os.WriteFile(rulesFile, []byte(`apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: team}
spec:
  groups:
  - name: gpu
    rules:
    - alert: GpuXid
      expr: DCGM_FI_DEV_XID_ERRORS > 0
    - alert: GpuEccDbe
      expr: DCGM_FI_DEV_ECC_DBE_VOL > 0
`), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"coverage", "--rules", rulesFile + ",pack:seed", "--faults", "hardware.xid,hardware.fallen-off-bus,numa.remote-memory"}

	code, out, errs := runCLI(t, "", append(args, "--format", "json")...)
	if code != 0 {
		t.Fatalf("json: exit %d: %s", code, errs)
	}
	var doc struct {
		Rules []struct {
			Name, Kind, Status, Reason string
			Metrics, Detects           []string
		} `json:"rules"`
		Matrix []struct {
			Fault, Detector string
			Detected        bool
			TTD             *float64 `json:"ttd_seconds"`
		} `json:"matrix"`
		Suggestions []struct{ Fault, Rule string } `json:"suggestions"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for i, r := range doc.Rules {
		byName[r.Name] = i
	}
	xid := doc.Rules[byName["GpuXid"]]
	if xid.Status != "ok" || xid.Kind != "alert" || strings.Join(xid.Detects, ",") != "hardware.xid" {
		t.Errorf("GpuXid: %+v; want ok, detecting hardware.xid only (XID 79 takes the series with it)", xid)
	}
	ecc := doc.Rules[byName["GpuEccDbe"]]
	if ecc.Status != "never_fires" || !strings.Contains(ecc.Reason, "did you mean DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") {
		t.Errorf("GpuEccDbe: %+v", ecc)
	}
	if seed := doc.Rules[byName["GPUThrottlingDetected"]]; seed.Status != "never_fires" || !strings.Contains(seed.Reason, "nvidia_gpu_temperature") {
		t.Errorf("seed rule: %+v", seed)
	}
	if len(doc.Matrix) != 3*3 {
		t.Errorf("%d cells, want 9 (3 faults × 3 alerts; no built-ins without --builtin)", len(doc.Matrix))
	}
	sugg := map[string]string{}
	for _, s := range doc.Suggestions {
		sugg[s.Fault] = s.Rule
	}
	if sugg["hardware.fallen-off-bus"] == "" {
		t.Errorf("no rule suggested for XID 79: %v", sugg)
	}

	code, out, _ = runCLI(t, "", append(args, "--format", "junit")...)
	var suites struct {
		Suite struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal([]byte(out), &suites); code != 0 || err != nil || suites.Suite.Tests != 3 || suites.Suite.Failures != 2 {
		t.Errorf("junit: exit %d, err %v, %+v", code, err, suites.Suite)
	}

	html := filepath.Join(t.TempDir(), "c.html")
	if code, _, errs := runCLI(t, "", append(args, "--format", "html", "-o", html)...); code != 0 {
		t.Fatalf("html: exit %d: %s", code, errs)
	}
	b, _ := os.ReadFile(html)
	if !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "GpuXid") {
		t.Error("html report lacks the timeline or the rule columns")
	}

	code, out, _ = runCLI(t, "", args...)
	for _, want := range []string{"Rules that can never fire (2 of 3)", "GpuEccDbe", "Suggestions for the faults no rule caught", "hardware.fallen-off-bus: add "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestCoverageFailOn runs two faults that the rules catch one of, with a
// rule that never fires, one that needs an opt-in counter and none that is
// noisy, under each --fail-on: the
// report is written in full either way, and the exit status and its one
// line follow the findings named.
func TestCoverageFailOn(t *testing.T) {
	t.Parallel()
	rulesFile := filepath.Join(t.TempDir(), "team.yaml")
	if err := os.WriteFile(rulesFile, []byte(`groups:
- name: gpu
  rules:
  - alert: GpuXid
    expr: DCGM_FI_DEV_XID_ERRORS > 0
  - alert: GpuEccDbe
    expr: DCGM_FI_DEV_ECC_DBE_VOL > 0
  - alert: GpuDbeCount
    expr: DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0
`), 0o600); err != nil {
		t.Fatal(err)
	}
	noisyFile := filepath.Join(t.TempDir(), "noisy.yaml")
	if err := os.WriteFile(noisyFile, []byte("groups:\n- name: hot\n  rules:\n  - {alert: GpuWarm, expr: DCGM_FI_DEV_GPU_TEMP > 0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unknownFile := filepath.Join(t.TempDir(), "app.yaml")
	if err := os.WriteFile(unknownFile, []byte("groups:\n- name: app\n  rules:\n  - {alert: AppErrors, expr: 'rate(my_app_errors_total[5m]) > 1'}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"coverage", "--rules", rulesFile, "--faults", "hardware.xid,numa.remote-memory", "--suggest=false", "--format", "junit"}
	tests := []struct {
		name   string
		failOn []string
		code   int
		want   string
	}{
		{"none: exit 0 whatever it found", nil, 0, ""},
		{"missed", []string{"--fail-on", "missed"}, 1, "--fail-on: missed: 1 fault (numa.remote-memory)"},
		{"never-fires", []string{"--fail-on", "never-fires"}, 1, "--fail-on: never-fires: 1 rule (GpuEccDbe)"},
		{"opt-in-off", []string{"--fail-on", "opt-in-off"}, 1, "--fail-on: opt-in-off: 1 rule (GpuDbeCount)"},
		{"noisy, and nothing is", []string{"--fail-on", "noisy"}, 0, ""},
		{"noisy", []string{"--rules", noisyFile, "--fail-on", "noisy"}, 1, "--fail-on: noisy: 1 detector (GpuWarm)"},
		{"unknown, and nothing is", []string{"--fail-on", "unknown"}, 0, ""},
		{"unknown", []string{"--rules", unknownFile, "--fail-on", "unknown"}, 1, "--fail-on: unknown: 1 rule (AppErrors)"},
		{"repeated and comma-separated", []string{"--fail-on", "noisy,never-fires", "--fail-on", "missed"}, 1,
			"--fail-on: missed: 1 fault (numa.remote-memory); never-fires: 1 rule (GpuEccDbe)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCLI(t, "", append(base, tt.failOn...)...)
			var suites struct {
				Suite struct {
					Tests    int `xml:"tests,attr"`
					Failures int `xml:"failures,attr"`
				} `xml:"testsuite"`
			}
			if err := xml.Unmarshal([]byte(out), &suites); err != nil || suites.Suite.Tests != 2 || suites.Suite.Failures != 1 {
				t.Errorf("report not written in full: %v, %+v", err, suites.Suite)
			}
			if code != tt.code || !strings.Contains(errs, tt.want) || strings.Count(errs, "\n") > 1 {
				t.Errorf("exit %d, stderr %q; want exit %d and one line containing %q", code, errs, tt.code, tt.want)
			}
		})
	}
}

// TestCoverageProgress: --progress prints plain lines, one per fault, on a
// standard error that is no terminal; without it nothing is printed there.
func TestCoverageProgress(t *testing.T) {
	t.Parallel()
	args := []string{"coverage", "--rules", "pack:seed", "--faults", "hardware.xid,numa.remote-memory", "--suggest=false", "--format", "json", "--parallel", "1"}
	tests := []struct {
		name  string
		flags []string
		want  []string
	}{
		{"off without a terminal", nil, nil},
		{"forced", []string{"--progress"}, []string{"coverage: 1/2 faults, ", "coverage: 2/2 faults, "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, errs := runCLI(t, "", append(args, tt.flags...)...)
			if code != 0 || strings.Contains(errs, "\r") {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
			if len(tt.want) == 0 {
				if errs != "" {
					t.Errorf("stderr %q, want nothing", errs)
				}
				return
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("stderr %q, want %d lines", errs, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], w) || !strings.HasSuffix(lines[i], " s") {
					t.Errorf("line %d %q, want %q…s", i, lines[i], w)
				}
			}
		})
	}
}

// TestProgressLineInPlace: on a terminal the line is rewritten in place
// with \r and erased at the end, so the report starts on a clean line.
func TestProgressLineInPlace(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	p := &progressLine{w: &b, name: "coverage", inPlace: true, start: time.Now()}
	p.report(coverage.StageFaults, 1, 2)
	p.report(coverage.StageSuggestions, 1, 1)
	p.end()
	got := regexp.MustCompile(`\d+\.\d s`).ReplaceAllString(b.String(), "T s")
	want := "\r\033[Kcoverage: 1/2 faults, T s\r\033[Kcoverage: 1/1 suggestions verified, T s\r\033[K"
	if got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
	var off *progressLine
	off.end() // a nil line is off and must not panic
}
