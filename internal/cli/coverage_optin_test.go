package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// TestOptInAcceptsWhatAnalysisNames walks every counter the rules analysis
// can call opt-in and tell a user to enable ("pass it as opt-in"): --opt-in
// accepts it and the twin then exports it (observation 1 of
// scripts/coverage-observations). Before, the analysis named
// DCGM_FI_DEV_FB_TOTAL and DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL and
// --opt-in refused both.
func TestOptInAcceptsWhatAnalysisNames(t *testing.T) {
	t.Parallel()
	var named []string
	for _, m := range rules.Known() {
		if m.Availability != rules.AvailOptIn {
			continue
		}
		set, err := rules.Load(fmt.Appendf(nil, "groups:\n- name: g\n  rules:\n  - {alert: A, expr: '%s > 0'}\n", m.Name), "optin.yaml")
		if err != nil {
			t.Fatal(err)
		}
		an := rules.Analyze(set, rules.AnalyzeOptions{})[0]
		if len(an.Metrics) != 1 || an.Metrics[0].Availability != rules.AvailOptIn {
			continue // the analysis does not call this one opt-in
		}
		named = append(named, m.Name)
		if err := checkOptIn([]string{m.Name}); err != nil {
			t.Errorf("the analysis calls %s opt-in (%q), and --opt-in refuses it: %v", m.Name, an.Reason, err)
			continue
		}
		spec := twin.Default()
		spec.Exporter.OptIn = []string{m.Name}
		tw, err := twin.New(twin.Options{Spec: spec})
		if err != nil {
			t.Errorf("--opt-in %s: new twin: %v", m.Name, err)
			continue
		}
		if n := len(tw.Select(m.Name)); n != 16 {
			t.Errorf("--opt-in %s: the twin exports %d series, want one per GPU", m.Name, n)
		}
	}
	for _, want := range []string{"DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"} {
		if !strings.Contains(strings.Join(named, ","), want) {
			t.Errorf("the analysis never tells users to pass %s as opt-in (named: %v)", want, named)
		}
	}
}

// TestCoverageOptInRun reproduces observation 1 end to end: a rule on
// FB_USED / FB_TOTAL and one on NVLink replays, with both opted in, run to
// the end (exit 0) and are evaluated, not called opt-in-off.
func TestCoverageOptInRun(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "fb.yaml")
	if err := os.WriteFile(file, []byte(`groups:
- name: gpu
  rules:
  - alert: GpuMemoryFull
    expr: (DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_TOTAL) * 100 > 85
  - alert: NvlinkReplays
    expr: increase(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL[5m]) > 0
  - alert: PowerBrake
    expr: DCGM_FI_DEV_CLOCK_THROTTLE_REASONS % 256 >= 128
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "", "coverage", "--rules", file, "--suggest=false", "--format", "json",
		"--faults", "hardware.xid,hardware.nvlink-errors,hardware.power-brake",
		"--opt-in", "DCGM_FI_DEV_FB_TOTAL,DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, s := range []string{`"opt_in_off"`, `"never_fires"`} {
		if strings.Contains(out, s) {
			t.Errorf("a rule is %s though its counters are opted in:\n%s", s, out)
		}
	}
	for _, pair := range [][2]string{{"NvlinkReplays", "hardware.nvlink-errors"}, {"PowerBrake", "hardware.power-brake"}} {
		if !detects(out, pair[0], pair[1]) {
			t.Errorf("%s does not detect %s:\n%s", pair[0], pair[1], out)
		}
	}
}

// detects reports whether the JSON coverage report says the rule named
// name caught fault.
func detects(report, name, fault string) bool {
	var res struct {
		Rules []struct {
			Name    string   `json:"name"`
			Detects []string `json:"detects"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(report), &res); err != nil {
		return false
	}
	for _, r := range res.Rules {
		if r.Name == name {
			return slices.Contains(r.Detects, fault)
		}
	}
	return false
}
