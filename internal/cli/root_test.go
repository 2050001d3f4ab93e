package cli

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/cli/command"
)

// TestStoppedBySignal: a command whose context a signal cancelled stops
// and exits 128+signal naming it, so a script tells an interrupted run
// from a failed one; a server that ends cleanly on it exits 0.
func TestStoppedBySignal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		sig      syscall.Signal
		args     []string
		wantCode int
		wantErr  string
	}{
		{"demo on SIGINT", syscall.SIGINT, []string{"demo", "--html", ""}, 130, "gpuchaos: demo: stopped by SIGINT\n"},
		{"coverage on SIGTERM", syscall.SIGTERM, []string{"coverage", "--rules", "pack:typical"}, 143, "stopped by SIGTERM\n"},
		{"run on the twin on SIGTERM", syscall.SIGTERM, []string{"run", "../../examples/thermal-throttle.yaml"}, 143, "stopped by SIGTERM\n"},
		{"twin serve ends cleanly", syscall.SIGINT, []string{"twin", "serve", "--listen", "127.0.0.1:0", "--warmup", "0s"}, 0, ""},
		{"the agent while its twin warms up", syscall.SIGTERM, []string{"agent", "--twin", "--listen", "127.0.0.1:0"}, 143, "stopped by SIGTERM\n"},
		{"the largest fleet simulation", syscall.SIGINT, []string{"twin", "simulate", "--gpus", "1048576", "--days", "900"}, 130, "stopped by SIGINT\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(&command.SignalError{Signal: tt.sig})
			var out, errb bytes.Buffer
			code := execute(ctx, tt.args, strings.NewReader(""), &out, &errb)
			if code != tt.wantCode || !strings.HasSuffix(errb.String(), tt.wantErr) || strings.Count(errb.String(), "\n") > 1 {
				t.Errorf("exit %d, stderr %q; want %d and one line ending %q", code, errb.String(), tt.wantCode, tt.wantErr)
			}
		})
	}
}
