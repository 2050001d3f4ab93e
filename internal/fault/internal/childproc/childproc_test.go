package childproc

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// start runs the test binary in role and waits for its ready line when
// the role writes one.
func start(t *testing.T, g *Group, role string) *Child {
	t.Helper()
	c, err := g.Start(Spec{Path: os.Args[0], Env: append(os.Environ(), roleEnv+"="+role), Output: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-c.Proc.PID, syscall.SIGKILL) })
	if role != "exit" {
		got, err := io.ReadAll(c.Ready)
		if err != nil || string(got) != "ready\n" {
			t.Fatalf("ready pipe = %q, %v", got, err)
		}
	}
	_ = c.Ready.Close()
	return c
}

func TestStartAndStop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		role  string
		grace time.Duration
		want  []syscall.Signal
	}{
		{name: "ends on SIGTERM", role: "ready", grace: 10 * time.Second, want: []syscall.Signal{syscall.SIGTERM}},
		{name: "ignores SIGTERM", role: "stubborn", grace: 200 * time.Millisecond, want: []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}},
		{name: "already exited", role: "exit", grace: time.Second, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var g Group
			c := start(t, &g, tc.role)
			if !c.Proc.Valid() {
				t.Fatalf("child identity %+v", c.Proc)
			}
			if tc.role == "exit" {
				<-c.Done()
				var ee *exec.ExitError
				if !errors.As(c.Err(), &ee) || ee.ExitCode() != 3 {
					t.Fatalf("Err = %v, want exit status 3", c.Err())
				}
			}
			var mu sync.Mutex
			var sent []syscall.Signal
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := g.Stop(ctx, c.Proc, tc.grace, func(s syscall.Signal) { mu.Lock(); sent = append(sent, s); mu.Unlock() }); err != nil {
				t.Fatal(err)
			}
			select {
			case <-c.Done():
			default:
				t.Fatal("Stop returned before the child was reaped")
			}
			if !slices.Equal(sent, tc.want) {
				t.Errorf("signals sent = %v, want %v", sent, tc.want)
			}
			if alive, err := c.Proc.Alive(); err != nil || alive {
				t.Errorf("after Stop: alive %v, %v", alive, err)
			}
		})
	}
}

// TestStopByAnotherGroup is a recovery by a fresh injector: it did not
// start the child, so it cannot wait for it and polls /proc instead.
func TestStopByAnotherGroup(t *testing.T) {
	t.Parallel()
	var starter, stopper Group
	c := start(t, &starter, "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stopper.Stop(ctx, c.Proc, 10*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if alive, err := c.Proc.Alive(); err != nil || alive {
		t.Errorf("after Stop: alive %v, %v", alive, err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the starting group never reaped the child")
	}
}

func TestStopRefuses(t *testing.T) {
	t.Parallel()
	var g Group
	c := start(t, &g, "ready")
	self, err := procfind.Identify(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		p       procfind.Proc
		wantErr bool
	}{
		{name: "this process", p: self, wantErr: true},
		{name: "init", p: procfind.Proc{PID: 1, StartTicks: 1}, wantErr: true},
		{name: "no start time", p: procfind.Proc{PID: c.Proc.PID}, wantErr: true},
		// The pid of a live child with another start time is a reused pid:
		// nothing to stop, and the live process must not be signalled.
		{name: "reused pid", p: procfind.Proc{PID: c.Proc.PID, StartTicks: c.Proc.StartTicks + 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sent []syscall.Signal
			err := g.Stop(context.Background(), tc.p, time.Second, func(s syscall.Signal) { sent = append(sent, s) })
			if (err != nil) != tc.wantErr {
				t.Fatalf("Stop(%+v) = %v, want error %v", tc.p, err, tc.wantErr)
			}
			if len(sent) != 0 {
				t.Fatalf("Stop(%+v) sent %v", tc.p, sent)
			}
		})
	}
	if alive, err := c.Proc.Alive(); err != nil || !alive {
		t.Fatalf("the child did not survive the refused stops: %v, %v", alive, err)
	}
}

func TestStopHeedsContext(t *testing.T) {
	t.Parallel()
	var g Group
	c := start(t, &g, "stubborn")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// A grace longer than ctx: the wait after SIGTERM ends with ctx.
	err := g.Stop(ctx, c.Proc, time.Minute, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the context's deadline", err)
	}
}

func TestStartFails(t *testing.T) {
	t.Parallel()
	var g Group
	if c, err := g.Start(Spec{Path: "/nonexistent/gpuchaos", Output: os.Stderr}); err == nil {
		t.Fatalf("Start of a missing binary = %+v, want an error", c)
	}
}
