package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// Promtool returns the path of Prometheus' promtool: on PATH, or where
// scripts/setup-prometheus (Debian's package) puts it. Without it the test
// fails, as the end-to-end test does without the server: `make test`
// installs it, and a skipped check would leave CI green unchecked.
func Promtool(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	const debian = "/usr/bin/promtool"
	if _, err := os.Stat(debian); err != nil {
		t.Fatalf("promtool not found on PATH or at %s: run scripts/setup-prometheus (as root) to install it from Debian's packages", debian)
	}
	return debian
}
