package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// DefaultGrace is how long Run waits, after a cancelled context has sent
// SIGTERM to the child's group, before it sends SIGKILL.
const DefaultGrace = 10 * time.Second

// ErrNoCommand is returned by Run when Options.Args is empty.
var ErrNoCommand = errors.New("no command to launch")

// Options say what Run starts and how. The zero value of every field but
// Args means a documented default.
type Options struct {
	// Args is the command and its arguments. Args[0] is looked up in PATH
	// when it holds no slash; nothing goes through a shell.
	Args []string
	// Env is the overlay: KEY=VALUE pairs that replace the variables of
	// the same name in Base (see Overlay).
	Env []string
	// Base is the environment the overlay applies to; nil means this
	// process's environment.
	Base []string
	// Stdin, Stdout and Stderr are the child's; nil means /dev/null. An
	// *os.File is handed over as it is, anything else is copied.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Signals are forwarded to the child's process group while it runs;
	// nil means SIGINT, SIGTERM and SIGHUP. While Run runs, these signals
	// no longer have their default effect on this process.
	Signals []os.Signal
	// Grace is how long a cancelled context waits after SIGTERM before
	// SIGKILL; zero means DefaultGrace.
	Grace time.Duration
	// Started, when not nil, is called with the child's process id once
	// it runs, before Run waits for it.
	Started func(pid int)
}

// Status is how the child ended.
type Status struct {
	// Pid was the child's process id, and its process group id.
	Pid int
	// Code is the exit status as a shell reports it: the child's own
	// exit code, or 128+N when signal N killed it.
	Code int
	// Signal is the signal that killed the child, or 0 when it exited.
	Signal syscall.Signal
	// Cancelled is true when the context ended before the child did, so
	// Run stopped it.
	Cancelled bool
}

// String words the ending: "exited with status 3", "killed by signal 15
// (terminated)".
func (s Status) String() string {
	if s.Signal != 0 {
		return fmt.Sprintf("killed by signal %d (%s)", int(s.Signal), s.Signal)
	}
	return fmt.Sprintf("exited with status %d", s.Code)
}

// Run starts the command with the overlay, forwards signals to its process
// group until it ends, and returns how it ended. A non-zero exit or a death
// by signal is a Status, not an error; the error is for a command that did
// not start (wrapping exec.ErrNotFound when it is not on PATH), a bad
// overlay, or a failure copying its output.
//
// When ctx ends first, Run sends SIGTERM to the group, SIGKILL after
// Options.Grace, and once the child has exited SIGKILL to whatever is left
// of its group, so nothing it started in that group keeps running. Run
// itself never returns before the child has exited.
func Run(ctx context.Context, o Options) (Status, error) {
	if len(o.Args) == 0 {
		return Status{}, ErrNoCommand
	}
	base := o.Base
	if base == nil {
		base = os.Environ()
	}
	env, err := Overlay(base, o.Env)
	if err != nil {
		return Status{}, fmt.Errorf("launch %s: %w", o.Args[0], err)
	}
	if err := ctx.Err(); err != nil {
		return Status{}, fmt.Errorf("launch %s: %w", o.Args[0], err)
	}
	grace := o.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	sigs := o.Signals
	if sigs == nil {
		sigs = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
	}

	cmd := exec.Command(o.Args[0], o.Args[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own group, so one kill(-pid) reaches everything it starts
		// in that group, and a signal aimed at our group does not reach
		// it twice (once directly, once forwarded).
		Setpgid: true,
		// The kernel kills the child when the thread that forked it
		// dies; the goroutine below keeps that thread alive until the
		// child is reaped. Go's fork path checks for a parent that died
		// before the setting took effect.
		Pdeathsig: syscall.SIGKILL,
	}

	// Register before starting, so a signal that arrives while the child
	// starts is queued and forwarded rather than lost or fatal.
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, sigs...)
	defer signal.Stop(ch)

	started := make(chan error, 1)
	waited := make(chan error, 1)
	go func() {
		// Pdeathsig follows the forking thread, not the process: lock it
		// so the runtime neither runs the fork on a thread it may retire
		// nor retires this one while the child lives.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		waited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return Status{}, fmt.Errorf("launch %s: %w", o.Args[0], err)
	}
	pid := cmd.Process.Pid
	if o.Started != nil {
		o.Started(pid)
	}

	var (
		cancelled bool
		done      = ctx.Done()
		kill      <-chan time.Time
	)
	for {
		select {
		case s := <-ch:
			if sig, ok := s.(syscall.Signal); ok {
				signalGroup(pid, sig)
			}
		case <-done:
			cancelled, done = true, nil
			signalGroup(pid, syscall.SIGTERM)
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			signalGroup(pid, syscall.SIGKILL)
		case err := <-waited:
			if cancelled {
				signalGroup(pid, syscall.SIGKILL)
			}
			st := status(pid, cmd.ProcessState)
			st.Cancelled = cancelled
			var exitErr *exec.ExitError
			if err != nil && !errors.As(err, &exitErr) {
				return st, fmt.Errorf("launch %s: %w", o.Args[0], err)
			}
			return st, nil
		}
	}
}

// signalGroup sends sig to the process group pgid. A group that is already
// gone is not an error: the child may end at any moment.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
}

func status(pid int, ps *os.ProcessState) Status {
	st := Status{Pid: pid}
	if ps == nil {
		return st
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		st.Signal = ws.Signal()
		st.Code = 128 + int(st.Signal)
		return st
	}
	st.Code = ps.ExitCode()
	return st
}
