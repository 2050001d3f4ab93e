package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestControllerCommand(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(t, "", "controller", "--help")
	for _, flag := range []string{"--kubeconfig", "--leader-elect", "--leader-election-namespace", "--prometheus", "--metrics-bind-address", "--health-probe-bind-address", "gpuchaos.dev/abort=true"} {
		if code != 0 || !strings.Contains(out, flag) {
			t.Errorf("controller --help: exit %d, want %q in\n%s", code, flag, out)
		}
	}
	code, _, errs := runCLI(t, "", "controller", "--kubeconfig", filepath.Join(t.TempDir(), "missing"))
	if code != 2 || !strings.Contains(errs, "--kubeconfig: ") {
		t.Errorf("missing kubeconfig: exit %d, stderr %q; want 2 naming --kubeconfig", code, errs)
	}
}
