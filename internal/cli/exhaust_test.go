package cli

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/gputools/exhaust"
	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
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
		{"pcie bad rate", []string{"exhaust", "pcie", "--duration", "1s", "--rate", "fast"}, 2, `--rate "fast": not a byte rate`},
		{"pcie negative rate", []string{"exhaust", "pcie", "--duration", "1s", "--rate", "-5G"}, 2, `--rate "-5G"`},
		{"pcie rate over the cap", []string{"exhaust", "pcie", "--duration", "1s", "--rate", "2T"}, 2, "must be at most"},
		{"pcie ready fd on stderr", []string{"exhaust", "pcie", "--duration", "1s", "--ready-fd", "2"}, 2, "--ready-fd 2"},
		{"vram ready fd not open", []string{"exhaust", "vram", "--duration", "1s", "--ready-fd", "987654"}, 2, "not an open file descriptor"},
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

func TestParseRate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{in: "0", want: 0},
		{in: "25G", want: 25e9},
		{in: "512M", want: 512e6},
		{in: "512Mi", want: 512 << 20},
		{in: "1000000", want: 1e6},
		{in: "1T", want: 1e12},
		{in: "1Ti", want: exhaust.MaxRate},
		{in: "1100G", wantErr: true},
		{in: "", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "1.5G", wantErr: true},
		{in: "fast", wantErr: true},
	}
	for _, tc := range tests {
		got, err := parseRate(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseRate(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"0", "25G", "512Mi", "1Ti", "-3", "9999999999999999999T", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseRate(s)
		if err != nil {
			if n != 0 {
				t.Fatalf("parseRate(%q) = %d with error %v", s, n, err)
			}
			return
		}
		if n > exhaust.MaxRate {
			t.Fatalf("parseRate(%q) = %d, over the cap", s, n)
		}
		if again, err := parseRate(strconv.FormatUint(n, 10)); err != nil || again != n {
			t.Fatalf("parseRate(%d) = %d, %v; want it back", n, again, err)
		}
	})
}

// TestFaultChildArgvs runs the argvs internal/fault/exhaustfault starts for the
// exhaustion faults (its TestCommands has the same table) through the real
// commands: without a GPU each must get past every flag check and fail
// only at the driver, with exit 1 rather than a usage error.
func TestFaultChildArgvs(t *testing.T) {
	t.Parallel()
	if _, err := cuda.Open(); err == nil {
		t.Skip("a CUDA driver is present")
	}
	for _, argv := range [][]string{
		{"burn", "--gpus", "3", "--duration", "3660s", "--duty", "0.25", "--temp-ceiling", "80", "--format", "json"},
		{"burn", "--gpus", "1", "--duration", "3660s", "--temp-ceiling", "87", "--format", "json"},
		{"exhaust", "vram", "--gpu", "7", "--fraction", "0.9", "--duration", "3660s", "--format", "json"},
		{"exhaust", "pcie", "--gpu", "2", "--duration", "3660s", "--rate", "25000000000", "--format", "json"},
	} {
		t.Run(strings.Join(argv[:2], " "), func(t *testing.T) {
			_, fd := readyFD(t)
			var out, errb bytes.Buffer
			code := Main(append(argv, "--ready-fd", strconv.Itoa(fd)), strings.NewReader(""), &out, &errb)
			if code != 1 || !strings.Contains(errb.String(), "libcuda.so.1") {
				t.Fatalf("exit %d, stderr %q; want 1 and the missing driver", code, errb.String())
			}
		})
	}
}
