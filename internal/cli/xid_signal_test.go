package cli

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
)

// childEnv marks a copy of this test binary that TestParseStopsOnSignal
// started to be gpuchaos itself.
const childEnv = "GPUCHAOS_CLI_CHILD"

// TestCLIChild is not a test on its own: in a copy of the test binary
// started with childEnv set, it is gpuchaos, Main on the process's own
// standard streams and signals, with the arguments after "--".
func TestCLIChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("the gpuchaos child of TestParseStopsOnSignal")
	}
	i := slices.Index(os.Args, "--")
	os.Exit(Main(os.Args[i+1:], os.Stdin, os.Stdout, os.Stderr))
}

// TestParseStopsOnSignal runs the parse commands as a process of their own
// on a standard input pipe that stays open, sends SIGINT or SIGTERM, and
// checks that the process ends on it, with the exit code and the line that
// say so and what it parsed before. The child reads a blocking descriptor,
// as gpuchaos does under a shell or a terminal: os/exec hands it the pipe in
// blocking mode, so no read deadline could wake its read(2).
//
// The promise is 1 s; the check allows 5 s so as to hold on a loaded
// machine. The promise comes from the code path, not from this bound: the
// command returns on ctx.Done without waiting for its read.
func TestParseStopsOnSignal(t *testing.T) {
	t.Parallel()
	xidLine, marker := fakeXID(t)
	tests := []struct {
		name   string
		args   []string
		stdin  string
		kmsg   bool   // writes xidLine to /dev/kmsg first (root)
		ready  string // on stdout once the command has read its input; "" waits for the pipe to drain
		sig    syscall.Signal
		code   int
		stderr string
	}{
		{name: "xid parse - on SIGINT", args: []string{"xid", "parse", "-"}, stdin: xidLine + "\n", ready: marker, sig: syscall.SIGINT,
			code: 130, stderr: "gpuchaos: parse standard input: stopped after 1 line: stopped by SIGINT\n"},
		{name: "xid parse - on SIGTERM", args: []string{"xid", "parse", "-"}, stdin: xidLine + "\n", ready: marker, sig: syscall.SIGTERM,
			code: 143, stderr: "gpuchaos: parse standard input: stopped after 1 line: stopped by SIGTERM\n"},
		{name: "topo parse - on SIGINT", args: []string{"topo", "parse", "-"}, stdin: topoH200[:40], sig: syscall.SIGINT,
			code: 130, stderr: "gpuchaos: parse standard input: stopped before the input ended: stopped by SIGINT\n"},
		{name: "topo parse - on SIGTERM", args: []string{"topo", "parse", "-"}, stdin: topoH200[:40], sig: syscall.SIGTERM,
			code: 143, stderr: "gpuchaos: parse standard input: stopped before the input ended: stopped by SIGTERM\n"},
		{name: "xid parse --follow /dev/kmsg on SIGINT", args: []string{"xid", "parse", "--follow", kmsg.DefaultPath}, kmsg: true, ready: marker, sig: syscall.SIGINT},
		{name: "xid parse --follow /dev/kmsg on SIGTERM", args: []string{"xid", "parse", "--follow", kmsg.DefaultPath}, kmsg: true, ready: marker, sig: syscall.SIGTERM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.kmsg {
				requireKernelLog(t)
				if err := kmsg.Write(kmsg.LevelErr, xidLine); err != nil {
					t.Fatal(err)
				}
			}
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer pw.Close()
			var stdout, stderr testutil.LockedBuffer
			cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestCLIChild$", "--"}, tt.args...)...)
			// A race-enabled child sleeps 1 s before exiting 0 unless told
			// otherwise (GORACE atexit_sleep_ms), which is no part of
			// gpuchaos stopping.
			cmd.Env = append(os.Environ(), childEnv+"=1", "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
			cmd.Stdin, cmd.Stdout, cmd.Stderr = pr, &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pr.Close()
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			defer func() {
				select {
				case <-exited:
				default:
					cmd.Process.Kill()
					<-exited
				}
			}()
			if _, err := pw.WriteString(tt.stdin); err != nil {
				t.Fatal(err)
			}
			// The signal must come once Main's signal context is in
			// place, or it kills the child outright: the command reading
			// its input shows that.
			deadline := time.Now().Add(30 * time.Second)
			for !(tt.ready != "" && strings.Contains(stdout.String(), tt.ready) || tt.ready == "" && drained(t, pw)) {
				select {
				case <-exited:
					t.Fatalf("the child ended before the signal: %v; stderr:\n%s", cmd.ProcessState, stderr.String())
				case <-time.After(10 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatalf("the child did not read its input within 30 s; stdout %q, stderr %q", stdout.String(), stderr.String())
				}
			}
			if err := cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				t.Fatalf("still running 5 s after %v; stderr:\n%s", tt.sig, stderr.String())
			}
			t.Logf("ended %v after %v", cmd.ProcessState, time.Since(sent))
			if got := cmd.ProcessState.ExitCode(); got != tt.code || stderr.String() != tt.stderr {
				t.Errorf("%v; stderr %q; want exit %d and %q", cmd.ProcessState, stderr.String(), tt.code, tt.stderr)
			}
			if tt.ready != "" && !strings.Contains(stdout.String(), tt.ready) {
				t.Errorf("what was parsed before the signal is gone from stdout: %q", stdout.String())
			}
		})
	}
}

// drained reports whether the pipe w writes to is empty: the child has read
// everything written to it.
func drained(t *testing.T, w *os.File) bool {
	t.Helper()
	rc, err := w.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	if err := rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("TIOCINQ (FIONREAD): %v", err)
	}
	return n == 0
}
