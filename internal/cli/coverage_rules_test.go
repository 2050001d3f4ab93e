package cli

import (
	"strings"
	"testing"
)

// TestCoverageLoadsKubePrometheus: a rule file Prometheus loads is judged,
// not refused; a lint finding is a warning on standard error (issue 14,
// observation 10).
func TestCoverageLoadsKubePrometheus(t *testing.T) {
	t.Parallel()
	file := "../../internal/rules/testdata/public/kube-prometheus-kubernetesControlPlane-prometheusRule.yaml"
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
