package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/cuda"
)

func TestBurnCommandInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"duration required", []string{"burn"}, 2, "--duration is required"},
		{"zero duration refused", []string{"burn", "--duration", "0s"}, 2, "must be above 0"},
		{"over 24h refused", []string{"burn", "--duration", "24h1s"}, 2, "at most 24h"},
		{"bad gpu list", []string{"burn", "--duration", "1s", "--gpus", "0,a"}, 2, `"a" is not a GPU index`},
		{"gpu listed twice", []string{"burn", "--duration", "1s", "--gpus", "1,1"}, 2, "listed twice"},
		{"bad dtype", []string{"burn", "--duration", "1s", "--dtype", "int8"}, 2, "--dtype"},
		{"negative ceiling", []string{"burn", "--duration", "1s", "--temp-ceiling", "-5"}, 2, "must not be negative"},
		{"bad format", []string{"burn", "--duration", "1s", "--format", "xml"}, 2, "--format"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantBadInput(t, tc.args, tc.wantCode, tc.wantErr)
		})
	}
}

// TestBurnWithoutGPU is the CI case: no driver, exit 1, one line saying so.
func TestBurnWithoutGPU(t *testing.T) {
	t.Parallel()
	if _, err := cuda.Open(); err == nil {
		t.Skip("a CUDA driver is present")
	}
	var out, errb bytes.Buffer
	code := Main([]string{"burn", "--duration", "1s"}, strings.NewReader(""), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "no CUDA driver found") || !strings.Contains(errb.String(), "libcuda.so.1") {
		t.Fatalf("exit %d, stderr %q; want 1 and a line naming libcuda.so.1", code, errb.String())
	}
	if strings.Count(errb.String(), "\n") != 1 || out.Len() != 0 {
		t.Errorf("want one line on stderr and nothing on stdout; got %q / %q", errb.String(), out.String())
	}
}

func TestParseGPUList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"all", nil, false}, {"ALL", nil, false}, {"", nil, false},
		{"0", []int{0}, false}, {"1, 0", []int{1, 0}, false}, {"0,1,7", []int{0, 1, 7}, false},
		{"-1", nil, true}, {"0,,1", nil, true}, {"x", nil, true}, {"0,0", nil, true},
	}
	for _, tc := range tests {
		got, err := parseGPUList(tc.in)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("parseGPUList(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
