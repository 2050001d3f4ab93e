package cli

import (
	"bytes"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/gputools/burn"
	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
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
		{"zero duty", []string{"burn", "--duration", "1s", "--duty", "0"}, 2, "--duty 0: must be above 0"},
		{"duty over one", []string{"burn", "--duration", "1s", "--duty", "1.5"}, 2, "--duty 1.5"},
		{"NaN duty", []string{"burn", "--duration", "1s", "--duty", "NaN"}, 2, "--duty NaN"},
		{"ready fd on stdout", []string{"burn", "--duration", "1s", "--ready-fd", "1"}, 2, "--ready-fd 1: must be 3 or more"},
		{"ready fd not open", []string{"burn", "--duration", "1s", "--ready-fd", "987654"}, 2, "--ready-fd 987654: not an open file descriptor"},
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

// TestReadyFDWithoutGPU: a command that fails before taking its resource
// closes the ready pipe without writing, so the parent reads end of file.
func TestReadyFDWithoutGPU(t *testing.T) {
	t.Parallel()
	if _, err := cuda.Open(); err == nil {
		t.Skip("a CUDA driver is present")
	}
	for _, args := range [][]string{
		{"burn", "--duration", "1s"},
		{"exhaust", "vram", "--duration", "1s"},
		{"exhaust", "pcie", "--duration", "1s", "--rate", "1G"},
	} {
		t.Run(strings.Join(args[:len(args)-2], " "), func(t *testing.T) {
			t.Parallel()
			r, fd := readyFD(t)
			var out, errb bytes.Buffer
			code := Main(append(args, "--ready-fd", strconv.Itoa(fd)), strings.NewReader(""), &out, &errb)
			if code != 1 {
				t.Fatalf("exit %d, stderr %q; want 1", code, errb.String())
			}
			if err := r.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			if err != nil {
				t.Fatalf("read the ready pipe: %v (the command left it open)", err)
			}
			if len(got) != 0 {
				t.Fatalf("the ready pipe got %q from a command that failed", got)
			}
		})
	}
}

func TestReadyPipe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		act  func(p *readyPipe)
		want string
	}{
		{name: "signal writes one line and closes", act: func(p *readyPipe) { p.signal(io.Discard); p.signal(io.Discard); p.close() }, want: "ready\n"},
		{name: "close writes nothing", act: func(p *readyPipe) { p.close(); p.signal(io.Discard) }, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, fd := readyFD(t)
			p, err := openReadyPipe(fd)
			if err != nil {
				t.Fatal(err)
			}
			tc.act(p)
			if err := r.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			if err != nil || string(got) != tc.want {
				t.Fatalf("pipe read %q, %v; want %q and end of file", got, err, tc.want)
			}
		})
	}
	t.Run("no flag is a no-op", func(t *testing.T) {
		p, err := openReadyPipe(-1)
		if p != nil || err != nil {
			t.Fatalf("openReadyPipe(-1) = %v, %v; want nil, nil", p, err)
		}
		p.signal(io.Discard) // must not panic
		p.close()
	})
}

func TestReadyAfterFirstBatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		gpus      int
		batches   []int // the GPU of each progress report, in order
		wantAfter int   // reports until ready fires; 0: never
	}{
		{name: "one gpu fires on its first batch", gpus: 1, batches: []int{0, 0, 0}, wantAfter: 1},
		{name: "waits for every gpu", gpus: 2, batches: []int{1, 1, 1, 0, 0}, wantAfter: 4},
		{name: "a gpu that never reports keeps it back", gpus: 3, batches: []int{0, 1, 0, 1}, wantAfter: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fired, at := 0, 0
			progress := readyAfterFirstBatches(tc.gpus, func() { fired++ })
			for i, g := range tc.batches {
				progress(burn.Progress{GPU: g})
				if fired == 1 && at == 0 {
					at = i + 1
				}
			}
			if fired > 1 {
				t.Fatalf("ready fired %d times", fired)
			}
			if at != tc.wantAfter {
				t.Fatalf("ready fired after %d reports, want %d", at, tc.wantAfter)
			}
		})
	}
	t.Run("concurrent reports fire once", func(t *testing.T) {
		var fired atomic.Int32
		progress := readyAfterFirstBatches(8, func() { fired.Add(1) })
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for range 100 {
					progress(burn.Progress{GPU: g})
				}
			})
		}
		wg.Wait()
		if n := fired.Load(); n != 1 {
			t.Fatalf("ready fired %d times, want 1", n)
		}
	})
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

// readyFD returns the read end of a new pipe and a duplicate of its write
// end for a command's --ready-fd: the command owns and closes the
// descriptor it is given, so it gets a copy, and the original write end is
// closed here so that the reader sees EOF once the command closes its copy.
func readyFD(t *testing.T) (*os.File, int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	defer w.Close()
	fd, err := unix.Dup(int(w.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return r, fd
}
