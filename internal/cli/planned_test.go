package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlannedDryRun: a dry run on local of a fault whose mechanisms there
// are only planned is bad input (exit 2), said in one line.
func TestPlannedDryRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, mechanism, want string
	}{
		{"first choice", "", "spec.faults[0].mechanism: hardware.nvlink-errors: mechanism dcgm-inject on target local is planned, not built; the fault runs on twin: use --target twin"},
		{"named", "dcgm-inject", "spec.faults[0].mechanism: hardware.nvlink-errors: mechanism dcgm-inject on target local is planned, not built; the fault runs on twin: use --target twin"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mech := ""
			if tc.mechanism != "" {
				mech = "\n      mechanism: " + tc.mechanism
			}
			path := filepath.Join(t.TempDir(), "planned.yaml")
			exp := `apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata:
  name: planned-only
spec:
  selector:
    gpus: ["0"]
    mode: one
  faults:
    - id: hardware.nvlink-errors` + mech + `
  duration: 10s
  expectations:
    - detector: kmsg-xid
      within: 5s
`
			if err := os.WriteFile(path, []byte(exp), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, errs := runCLI(t, "", "run", path, "--dry-run", "--target", "local")
			if code != 2 {
				t.Fatalf("exit %d, want 2\nstdout: %s\nstderr: %s", code, out, errs)
			}
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(errs), "\n") {
				if strings.HasPrefix(l, "gpuchaos: ") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.HasSuffix(lines[0], tc.want) {
				t.Errorf("error lines %q, want one ending %q", lines, tc.want)
			}
			// The same fault on the twin plans.
			if code, out, errs := runCLI(t, "", "run", path, "--dry-run"); tc.mechanism == "" && code != 0 {
				t.Errorf("on the twin: exit %d\n%s%s", code, out, errs)
			}
		})
	}
}

// TestFaultsShowPlanned: the catalogue's listing says, per mechanism, where
// it is built and where only planned.
func TestFaultsShowPlanned(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "", "faults", "--format", "json")
	if code != 0 {
		t.Fatalf("faults --format json: exit %d: %s", code, errs)
	}
	var faults []struct {
		ID         string `json:"id"`
		Mechanisms []struct {
			Name    string    `json:"name"`
			Targets *[]string `json:"targets"`
			Planned *[]string `json:"planned"`
		} `json:"mechanisms"`
	}
	if err := json.Unmarshal([]byte(out), &faults); err != nil {
		t.Fatal(err)
	}
	var plannedLocal, builtLocal int
	for _, f := range faults {
		for _, m := range f.Mechanisms {
			if m.Targets == nil || m.Planned == nil {
				t.Fatalf("%s via %s: targets %v, planned %v; want both as arrays", f.ID, m.Name, m.Targets, m.Planned)
			}
			for _, tg := range *m.Targets {
				if tg == "local" {
					builtLocal++
				}
			}
			for _, tg := range *m.Planned {
				if tg == "local" {
					plannedLocal++
				}
			}
		}
	}
	if builtLocal == 0 || plannedLocal == 0 {
		t.Errorf("local: %d mechanisms built, %d planned; want some of each", builtLocal, plannedLocal)
	}

	code, out, _ = runCLI(t, "", "faults")
	if code != 0 || !strings.Contains(out, "LOCAL") || !strings.Contains(out, "kernel-log, 1 planned") {
		t.Errorf("faults: exit %d, want a LOCAL column with built and planned mechanisms:\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "faults", "hardware.xid")
	for _, want := range []string{"kernel-log [disruptive] on local, k8s:", "dcgm-inject [disruptive] planned for local, k8s (not built):", "twin [safe] on twin:"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("faults hardware.xid: exit %d, want %q in\n%s", code, want, out)
		}
	}
}
