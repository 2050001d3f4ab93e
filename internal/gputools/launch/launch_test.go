package launch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/gputools/launch"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// helperEnv switches the test binary into one of the helper programs below
// when it is re-executed as a child ("exit", "trap", ...) or as a
// gpuchaos-like launcher ("parent").
const helperEnv = "LAUNCH_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode, os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// helper runs one helper program and returns its exit code.
func helper(mode string, args []string) int {
	switch mode {
	case "printenv": // args: names; prints NAME=value or NAME unset, one a line
		for _, name := range args {
			if v, ok := os.LookupEnv(name); ok {
				fmt.Printf("%s=%s\n", name, v)
			} else {
				fmt.Printf("%s unset\n", name)
			}
		}
		return 0
	case "exit": // args: code
		code, _ := strconv.Atoi(args[0])
		return code
	case "selfkill": // args: signal number
		n, _ := strconv.Atoi(args[0])
		_ = syscall.Kill(os.Getpid(), syscall.Signal(n))
		time.Sleep(time.Minute)
		return 99
	case "trap": // args: pidfile; exits 0 on SIGINT, SIGTERM or SIGHUP
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		writePid(args[0])
		select {
		case s := <-ch:
			fmt.Printf("trapped %v\n", s)
			return 0
		case <-time.After(time.Minute):
			return 98
		}
	case "stubborn": // args: pidfile; ignores SIGTERM
		signal.Ignore(syscall.SIGTERM)
		writePid(args[0])
		time.Sleep(time.Minute)
		return 97
	case "sleep": // args: pidfile
		writePid(args[0])
		time.Sleep(time.Minute)
		return 96
	case "parent": // args: child mode, child args; a launcher as gpuchaos exec is
		st, err := launch.Run(context.Background(), launch.Options{
			Args:   append([]string{os.Args[0]}, args[1:]...),
			Env:    []string{helperEnv + "=" + args[0]},
			Stdout: os.Stdout, Stderr: os.Stderr,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 125
		}
		return st.Code
	}
	fmt.Fprintf(os.Stderr, "unknown helper %q\n", mode)
	return 120
}

// writePid writes this process's id to path atomically, so a reader never
// sees a partial number; it is also the helper's "ready" signal.
func writePid(path string) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o600); err == nil {
		_ = os.Rename(tmp, path)
	}
}

// waitPid waits for a helper's pid file.
func waitPid(t *testing.T, path string) int {
	t.Helper()
	var b []byte
	testutil.Eventually(t, 10*time.Second, "the helper's pid file "+path, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil
	})
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatalf("pid file %s: %v", path, err)
	}
	return pid
}

// helperArgs is the test binary re-executed as the helper mode.
func helperArgs(args ...string) []string { return append([]string{os.Args[0]}, args...) }

func helperOverlay(mode string, more ...string) []string {
	return append([]string{helperEnv + "=" + mode}, more...)
}

func TestRunEnvironment(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		base    []string
		overlay []string
		ask     []string
		want    []string
	}{
		{
			name:    "overlay arrives",
			base:    []string{"PATH=/usr/bin"},
			overlay: []string{"NCCL_P2P_DISABLE=1"},
			ask:     []string{"NCCL_P2P_DISABLE"},
			want:    []string{"NCCL_P2P_DISABLE=1"},
		},
		{
			name:    "inherited variables survive",
			base:    []string{"HOME=/home/x", "CUDA_VISIBLE_DEVICES=0,1"},
			overlay: []string{"NCCL_SHM_DISABLE=1"},
			ask:     []string{"HOME", "CUDA_VISIBLE_DEVICES", "NCCL_SHM_DISABLE"},
			want:    []string{"HOME=/home/x", "CUDA_VISIBLE_DEVICES=0,1", "NCCL_SHM_DISABLE=1"},
		},
		{
			name:    "overlay wins over inherited",
			base:    []string{"NCCL_PROTO=Simple", "NCCL_PROTO=Simple2"},
			overlay: []string{"NCCL_PROTO=LL"},
			ask:     []string{"NCCL_PROTO"},
			want:    []string{"NCCL_PROTO=LL"},
		},
		{
			name:    "later overlay entry wins",
			overlay: []string{"NCCL_ALGO=Ring", "NCCL_ALGO=Tree"},
			ask:     []string{"NCCL_ALGO"},
			want:    []string{"NCCL_ALGO=Tree"},
		},
		{
			name:    "empty value is set, not unset",
			base:    []string{"NCCL_DEBUG=INFO"},
			overlay: []string{"NCCL_DEBUG="},
			ask:     []string{"NCCL_DEBUG"},
			want:    []string{"NCCL_DEBUG="},
		},
		{
			name: "nothing added means nothing set",
			base: []string{"A=1"},
			ask:  []string{"NCCL_P2P_DISABLE", "A"},
			want: []string{"NCCL_P2P_DISABLE unset", "A=1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			// A non-nil base keeps the test's own environment out; the
			// helper switch rides in the overlay.
			base := append([]string{}, tc.base...)
			st, err := launch.Run(t.Context(), launch.Options{
				Args: helperArgs(tc.ask...), Base: base,
				Env:    append(helperOverlay("printenv"), tc.overlay...),
				Stdout: &out, Stderr: &errb,
			})
			if err != nil || st.Code != 0 {
				t.Fatalf("Run: %v, %v; stderr %q", st, err, errb.String())
			}
			got := strings.Split(strings.TrimSpace(out.String()), "\n")
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("child saw %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRunInheritsByDefault checks that a nil Base means this process's
// environment (t.Setenv: not parallel).
func TestRunInheritsByDefault(t *testing.T) {
	t.Setenv("LAUNCH_TEST_INHERITED", "from-parent")
	var out bytes.Buffer
	st, err := launch.Run(t.Context(), launch.Options{
		Args: helperArgs("LAUNCH_TEST_INHERITED"), Env: helperOverlay("printenv"), Stdout: &out,
	})
	if err != nil || st.Code != 0 {
		t.Fatalf("Run: %v, %v", st, err)
	}
	if got := strings.TrimSpace(out.String()); got != "LAUNCH_TEST_INHERITED=from-parent" {
		t.Errorf("child saw %q, want the inherited value", got)
	}
}

func TestRunExitStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string // helper mode and its arguments, or a command when env is nil
		wantCode int
		wantSig  syscall.Signal
		wantText string
	}{
		{"success", []string{"exit", "0"}, 0, 0, "exited with status 0"},
		{"exit 3", []string{"exit", "3"}, 3, 0, "exited with status 3"},
		{"exit 255", []string{"exit", "255"}, 255, 0, "exited with status 255"},
		{"killed by SIGTERM", []string{"selfkill", "15"}, 143, syscall.SIGTERM, "killed by signal 15 (terminated)"},
		{"killed by SIGKILL", []string{"selfkill", "9"}, 137, syscall.SIGKILL, "killed by signal 9 (killed)"},
		// A shell kills itself here: its signals keep their default
		// actions, where the Go runtime handles several (SIGABRT, SIGUSR1)
		// itself.
		{"killed by SIGUSR1", []string{"/bin/sh", "-c", "kill -USR1 $$; sleep 60"}, 138, syscall.SIGUSR1, "killed by signal 10 (user defined signal 1)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := launch.Options{Args: helperArgs(tc.args[1:]...), Env: helperOverlay(tc.args[0])}
			if strings.HasPrefix(tc.args[0], "/") {
				opts = launch.Options{Args: tc.args}
			}
			st, err := launch.Run(t.Context(), opts)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if st.Code != tc.wantCode || st.Signal != tc.wantSig || st.String() != tc.wantText || st.Cancelled {
				t.Errorf("status %+v (%s), want code %d signal %v (%s)", st, st, tc.wantCode, tc.wantSig, tc.wantText)
			}
			if st.Pid <= 0 {
				t.Errorf("status has no pid: %+v", st)
			}
		})
	}
}

func TestRunStartErrors(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name   string
		ctx    context.Context
		opts   launch.Options
		wantIs error
		want   string
	}{
		{"no command", t.Context(), launch.Options{}, launch.ErrNoCommand, "no command"},
		{"not on PATH", t.Context(), launch.Options{Args: []string{"gpuchaos-no-such-command-xyz"}}, exec.ErrNotFound, "gpuchaos-no-such-command-xyz"},
		{"not executable", t.Context(), launch.Options{Args: []string{"/dev/null"}}, os.ErrPermission, "/dev/null"},
		{"overlay entry without =", t.Context(), launch.Options{Args: []string{"/bin/true"}, Env: []string{"NCCL_P2P_DISABLE"}}, nil, "not KEY=VALUE"},
		{"overlay with empty key", t.Context(), launch.Options{Args: []string{"/bin/true"}, Env: []string{"=1"}}, nil, "not KEY=VALUE"},
		{"context already done", cancelled, launch.Options{Args: []string{"/bin/true"}}, context.Canceled, "/bin/true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := launch.Run(tc.ctx, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want an error containing %q", err, tc.want)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Run: %v, want errors.Is %v", err, tc.wantIs)
			}
		})
	}
}

// TestForwardSignals sends a signal to a launcher (the test binary running
// Run, as gpuchaos exec does) and checks the child, which traps it and
// exits 0, got it and the launcher passed its exit code through.
func TestForwardSignals(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "child.pid")
			parent := exec.Command(os.Args[0], "trap", pidFile)
			parent.Env = append(os.Environ(), helperEnv+"=parent")
			var out, errb bytes.Buffer
			parent.Stdout, parent.Stderr = &out, &errb
			if err := parent.Start(); err != nil {
				t.Fatal(err)
			}
			waitPid(t, pidFile)
			if err := parent.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := parent.Wait()
			if err != nil {
				t.Fatalf("launcher: %v (stderr %q); want exit 0 after the child trapped %v", err, errb.String(), sig)
			}
			if want := "trapped " + sig.String(); !strings.Contains(out.String(), want) {
				t.Errorf("child output %q, want %q", out.String(), want)
			}
		})
	}
}

// TestRunCancel stops the child when the context ends: SIGTERM first, and
// SIGKILL after the grace period for a child that ignores SIGTERM.
func TestRunCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		mode     string
		grace    time.Duration
		wantCode int
	}{
		// A race-enabled helper lingers about a second at exit (the race
		// runtime's exit delay), so the grace there must be longer.
		{"child exits on SIGTERM", "trap", 20 * time.Second, 0},
		{"child ignoring SIGTERM is killed after the grace", "stubborn", 300 * time.Millisecond, 137},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "child.pid")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go func() {
				waitPid(t, pidFile)
				cancel()
			}()
			start := time.Now()
			st, err := launch.Run(ctx, launch.Options{
				Args: helperArgs(pidFile), Env: helperOverlay(tc.mode), Grace: tc.grace,
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if st.Code != tc.wantCode || !st.Cancelled {
				t.Errorf("status %+v, want code %d and cancelled", st, tc.wantCode)
			}
			if d := time.Since(start); d > tc.grace+10*time.Second {
				t.Errorf("Run took %s to stop the child", d)
			}
		})
	}
}

// TestParentKilled is the Pdeathsig guarantee: SIGKILL a launcher (which
// can forward nothing) and the child it started must die with it.
func TestParentKilled(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	parent := exec.Command(os.Args[0], "sleep", pidFile)
	parent.Env = append(os.Environ(), helperEnv+"=parent")
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	child := waitPid(t, pidFile)
	if !alive(child) {
		t.Fatalf("child %d is not running before its launcher is killed", child)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	t.Cleanup(func() {
		if alive(child) {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
	})
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("child %d to end with its SIGKILLed launcher", child), func() bool { return !alive(child) })
}

// alive reports whether pid runs: it exists and is not a zombie (an orphan
// may wait as a zombie for a reaper that a container's init never is).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}
