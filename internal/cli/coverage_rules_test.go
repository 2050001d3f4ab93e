package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCoverageLoadsKubePrometheus: a rule file Prometheus loads is judged,
// not refused; a lint finding is a warning on standard error (observation
// 10 of scripts/coverage-observations).
func TestCoverageLoadsKubePrometheus(t *testing.T) {
	t.Parallel()
	file := "../../internal/detect/rules/testdata/public/kube-prometheus-kubernetesControlPlane-prometheusRule.yaml"
	code, out, errs := runCLI(t, "", "coverage", "--rules", file, "--faults", "hardware.xid", "--suggest=false", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if got := strings.Count(errs, "gpuchaos coverage: warning: "); got != 3 {
		t.Errorf("stderr has %d warnings, want 3:\n%s", got, errs)
	}
	if !strings.Contains(out, `"code_verb:apiserver_request_total:increase1h"`) {
		t.Error("the report does not name the repeated recording rule")
	}
}

// TestCoverageRulesDirectory: a whole rules folder, GPU rules beside
// kube-prometheus' standard stack (the public corpus), loads in one run and
// gives the verdicts the corpus' golden file pins, status by status
// (observation 10 of scripts/coverage-observations).
func TestCoverageRulesDirectory(t *testing.T) {
	t.Parallel()
	const dir = "../../internal/detect/rules/testdata/public"
	golden, err := os.ReadFile("../../internal/run/coverage/testdata/corpus.golden")
	if err != nil {
		t.Fatal(err)
	}
	_, last, _ := strings.Cut(strings.TrimSpace(string(golden)), "# counts by status:")
	want := strings.Fields(last)
	if len(want) < 3 {
		t.Fatalf("the golden's last line gives %q, want counts by status", want)
	}
	code, out, errs := runCLI(t, "", "coverage", "--rules", dir, "--faults", "hardware.xid", "--suggest=false", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var res struct {
		Rules []struct {
			Source string `json:"source"`
			Status string `json:"status"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	files := map[string]bool{}
	for _, r := range res.Rules {
		counts[r.Status]++
		file, _, _ := strings.Cut(r.Source, ":")
		files[filepath.Base(file)] = true
	}
	var got []string
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		got = append(got, fmt.Sprintf("%s=%d", s, counts[s]))
	}
	if !slices.Equal(got, want) {
		t.Errorf("counts by status %q, want the golden's %q", got, want)
	}
	yamls, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(yamls) {
		t.Errorf("rules from %d files, want every one of the %d in %s", len(files), len(yamls), dir)
	}
}
