package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/cuda"
)

func TestExhaustCommandInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"vram duration required", []string{"exhaust", "vram"}, 2, "--duration is required"},
		{"vram zero duration", []string{"exhaust", "vram", "--duration", "0s"}, 2, "must be above 0"},
		{"vram over 24h", []string{"exhaust", "vram", "--duration", "25h"}, 2, "at most 24h"},
		{"vram fraction 1", []string{"exhaust", "vram", "--duration", "1s", "--fraction", "1"}, 2, "--fraction 1"},
		{"vram fraction 0", []string{"exhaust", "vram", "--duration", "1s", "--fraction", "0"}, 2, "--fraction 0"},
		{"vram negative gpu", []string{"exhaust", "vram", "--duration", "1s", "--gpu", "-1"}, 2, "--gpu -1"},
		{"vram bad format", []string{"exhaust", "vram", "--duration", "1s", "--format", "xml"}, 2, "--format"},
		{"pcie duration required", []string{"exhaust", "pcie"}, 2, "--duration is required"},
		{"pcie bad direction", []string{"exhaust", "pcie", "--duration", "1s", "--direction", "up"}, 2, "--direction"},
		{"pcie copy too small", []string{"exhaust", "pcie", "--duration", "1s", "--size-mib", "0"}, 2, "--size-mib 0"},
		{"pcie copy too large", []string{"exhaust", "pcie", "--duration", "1s", "--size-mib", "99999"}, 2, "--size-mib 99999"},
		{"pcie negative gpu", []string{"exhaust", "pcie", "--duration", "1s", "--gpu", "-2"}, 2, "--gpu -2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantBadInput(t, tc.args, tc.wantCode, tc.wantErr)
		})
	}
}

// TestExhaustWithoutGPU is the CI case: no driver, exit 1, one line.
func TestExhaustWithoutGPU(t *testing.T) {
	t.Parallel()
	if _, err := cuda.Open(); err == nil {
		t.Skip("a CUDA driver is present")
	}
	for _, args := range [][]string{
		{"exhaust", "vram", "--duration", "1s"},
		{"exhaust", "pcie", "--duration", "1s"},
	} {
		t.Run(args[1], func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(args, strings.NewReader(""), &out, &errb)
			if code != 1 || !strings.Contains(errb.String(), "libcuda.so.1") || !strings.Contains(errb.String(), "exhaust "+args[1]) {
				t.Fatalf("exit %d, stderr %q; want 1 and a line naming libcuda.so.1", code, errb.String())
			}
			if strings.Count(errb.String(), "\n") != 1 || out.Len() != 0 {
				t.Errorf("want one line on stderr and nothing on stdout; got %q / %q", errb.String(), out.String())
			}
		})
	}
}
