package cli

import (
	"bytes"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// TestPaceCommand runs the hidden pace command through Main on a sleeping
// process: it must stop the process during its --for, return 0 by itself
// and leave the process running; bad flags are exit 2.
func TestPaceCommand(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep command: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	p, err := procfind.Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	state := func() byte {
		st, err := p.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return st.State
	}
	ident := []string{"--pid=" + strconv.Itoa(p.PID), "--start-ticks=" + strconv.FormatUint(p.StartTicks, 10)}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		// wantStop says the process must be seen stopped meanwhile.
		wantStop bool
	}{
		{name: "paces and ends", args: slices.Concat(ident, []string{"--share=0.2", "--period=50ms", "--for=600ms"}), wantStop: true},
		{name: "no share", args: slices.Concat(ident, []string{"--for=600ms"}), wantCode: 2},
		{name: "unknown flag", args: slices.Concat(ident, []string{"--share=0.5", "--for=1s", "--nope"}), wantCode: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := make(chan int, 1)
			go func() { code <- Main(append([]string{"pace"}, tc.args...), strings.NewReader(""), &stdout, &stderr) }()
			var stopped bool
			var got int
		wait:
			for {
				select {
				case got = <-code:
					break wait
				case <-time.After(time.Millisecond):
					stopped = stopped || state() == 'T'
				}
			}
			if got != tc.wantCode {
				t.Fatalf("pace exited %d, want %d; stderr %q", got, tc.wantCode, stderr.String())
			}
			if stopped != tc.wantStop {
				t.Errorf("process seen stopped: %v, want %v", stopped, tc.wantStop)
			}
			time.Sleep(20 * time.Millisecond)
			if s := state(); s == 'T' {
				t.Fatal("pace left the process stopped")
			}
		})
	}
	// The process was only ever stopped by pace, never ended by it.
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the paced process is gone: %v", err)
	}
}
