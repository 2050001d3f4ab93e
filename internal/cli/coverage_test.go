package cli

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCoverageBadRules(t *testing.T) {
	t.Parallel()
	dir := "../../internal/rules/testdata/"
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
