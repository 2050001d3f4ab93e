package childproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// pollInterval is how often a stop looks at /proc for a process that it
// cannot wait for (one another process started).
const pollInterval = 20 * time.Millisecond

// Spec says how to run one child.
type Spec struct {
	// Path is the executable and Args its arguments, without argv[0].
	Path string
	Args []string
	// Env is the child's whole environment.
	Env []string
	// Output gets the child's stdout and stderr.
	Output *os.File
	// NoPdeathsig starts the child without Pdeathsig, so a test can leave
	// an orphan behind and recover it through /proc alone.
	NoPdeathsig bool
	// Pdeathsig is the signal the child gets when gpuchaos dies; zero
	// means SIGKILL. A child that must undo something on its way out
	// (continue a process it keeps stopping) asks for SIGTERM and
	// catches it.
	Pdeathsig syscall.Signal
	// Mark, when set, goes into the child's environment as MarkEnv=Mark:
	// the record the child belongs to, by which Find and StopMarked find
	// it when no record names it (its injector died between starting it
	// and recording it, or the child outlived a Pdeathsig it caught).
	Mark string
}

// Child is a process a Group started.
type Child struct {
	// Proc names the child beyond doubt.
	Proc procfind.Proc
	// Ready is the read end of the child's ready pipe; the caller reads
	// it and closes it.
	Ready *os.File

	done chan struct{}
	err  error
}

// Done is closed once the child has been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is the child's exit as exec.Cmd.Wait reports it; it is valid once
// Done is closed.
func (c *Child) Err() error { return c.err }

// Group is the children one injector started and has not reaped yet, by
// pid: a stop of one of them waits for its reaping rather than polling.
// The zero value is ready to use; a Group is safe for concurrent use.
type Group struct {
	mu   sync.Mutex
	ours map[int]*Child
}

// Start runs one child and returns once it exists and its start time is
// known. On error nothing runs.
func (g *Group) Start(s Spec) (*Child, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: ready pipe: %w", s.Path, err)
	}
	type started struct {
		c   *Child
		err error
	}
	ch := make(chan started, 1)
	go func() {
		// Pdeathsig is sent when the thread that forked the child exits,
		// not when the process does. The Go runtime may end or reuse any
		// thread a goroutine is not locked to, so this goroutine locks
		// its thread before forking and keeps it, blocked in Wait, until
		// the child is reaped; it never unlocks, so when it returns the
		// runtime ends the thread, which by then no child depends on.
		// The thread thus dies before the child only when the whole
		// process dies, which is exactly when the child must die too.
		runtime.LockOSThread()
		c, cmd, err := g.spawn(s, r, w)
		ch <- started{c, err}
		if err != nil {
			return
		}
		c.err = cmd.Wait()
		g.mu.Lock()
		delete(g.ours, c.Proc.PID)
		g.mu.Unlock()
		close(c.done)
	}()
	st := <-ch
	if st.err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("start %s: %w", s.Path, st.err)
	}
	return st.c, nil
}

// spawn forks and execs the child on the calling (locked) thread and
// records it; on error nothing runs.
func (g *Group) spawn(s Spec, r, w *os.File) (*Child, *exec.Cmd, error) {
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Stdout, cmd.Stderr = s.Output, s.Output
	cmd.ExtraFiles = []*os.File{w} // descriptor 3
	cmd.Env = s.Env
	if s.Mark != "" {
		cmd.Env = append(slices.Clone(s.Env), MarkEnv+"="+s.Mark)
	}
	// A group of its own: the child's children, if it ever has any, are
	// stopped with it, and a terminal's ^C to gpuchaos does not reach it
	// behind the engine's back (the engine recovers it in order).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !s.NoPdeathsig {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
		if s.Pdeathsig != 0 {
			cmd.SysProcAttr.Pdeathsig = s.Pdeathsig
		}
	}
	err := cmd.Start()
	// The child holds its own copy; ours must go, or the pipe would never
	// reach end of file when the child dies before it is ready.
	_ = w.Close()
	if err != nil {
		return nil, nil, err
	}
	pid := cmd.Process.Pid
	// Read before Wait, so the child cannot have been reaped and its pid
	// reused yet (a child that already exited is a zombie, still listed).
	id, err := procfind.Identify(pid)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, nil, fmt.Errorf("read the start time of pid %d: %w", pid, err)
	}
	c := &Child{Proc: id, Ready: r, done: make(chan struct{})}
	g.mu.Lock()
	if g.ours == nil {
		g.ours = map[int]*Child{}
	}
	g.ours[pid] = c
	g.mu.Unlock()
	return c, cmd, nil
}

// Stop ends the child p names and returns once it is gone, and reaped when
// this Group started it: SIGTERM to its process group, then SIGKILL after
// grace, then a wait bounded by ctx alone. The start time is checked right
// before each signal, so a pid that was reused is never signalled; a child
// already gone is success. sent, when not nil, is called after each signal.
func (g *Group) Stop(ctx context.Context, p procfind.Proc, grace time.Duration, sent func(syscall.Signal)) error {
	if p.PID == os.Getpid() || p.PID == syscall.Getpgrp() {
		// Never ourselves: only a forged state file could name us.
		return fmt.Errorf("pid %d: state names this process or its group", p.PID)
	}
	if !p.Valid() {
		return fmt.Errorf("pid %d start %d: not a child's", p.PID, p.StartTicks)
	}
	g.mu.Lock()
	mine := g.ours[p.PID]
	g.mu.Unlock()
	if mine != nil && mine.Proc != p {
		mine = nil
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		alive, err := p.Alive()
		if err != nil {
			return fmt.Errorf("pid %d: %w", p.PID, err)
		}
		if !alive {
			break
		}
		if err := syscall.Kill(-p.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal process group %d: %w", p.PID, err)
		}
		if sent != nil {
			sent(sig)
		}
		limit := grace
		if sig == syscall.SIGKILL {
			limit = 0 // until gone or ctx ends
		}
		gone, err := waitGone(ctx, p, mine, limit)
		if err != nil {
			return err
		}
		if gone {
			break
		}
	}
	if mine != nil {
		// Gone from /proc's point of view (a zombie counts) is not yet
		// reaped: wait for the goroutine that reaps it.
		select {
		case <-mine.done:
		case <-ctx.Done():
			return fmt.Errorf("pid %d: waiting for it to be reaped: %w", p.PID, ctx.Err())
		}
	}
	return nil
}

// waitGone waits until p no longer runs, for at most limit (0: no limit
// but ctx), and reports whether it is gone.
func waitGone(ctx context.Context, p procfind.Proc, mine *Child, limit time.Duration) (bool, error) {
	var expire <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		expire = t.C
	}
	var done <-chan struct{}
	if mine != nil {
		done = mine.done
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		alive, err := p.Alive()
		if err != nil {
			return false, fmt.Errorf("pid %d: %w", p.PID, err)
		}
		if !alive {
			return true, nil
		}
		select {
		case <-done:
			return true, nil
		case <-expire:
			return false, nil
		case <-ctx.Done():
			return false, fmt.Errorf("pid %d: waiting for it to exit: %w", p.PID, ctx.Err())
		case <-tick.C:
		}
	}
}

// AwaitReady waits up to timeout for the child's "ready" line on its ready
// pipe, and closes the pipe. what names the child in errors ("hog",
// "pacer"); end of file before the line means the child exited first.
func (c *Child) AwaitReady(ctx context.Context, what string, timeout time.Duration) error {
	defer c.Ready.Close()
	if err := c.Ready.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("%s pid %d: ready pipe: %w", what, c.Proc.PID, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Ready.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	got, err := io.ReadAll(io.LimitReader(c.Ready, 64))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil:
		return fmt.Errorf("%s pid %d: waiting for ready: %w", what, c.Proc.PID, ctx.Err())
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s pid %d: not ready after %s", what, c.Proc.PID, timeout)
	case err != nil:
		return fmt.Errorf("%s pid %d: ready pipe: %w", what, c.Proc.PID, err)
	case bytes.HasPrefix(got, []byte("ready\n")):
		return nil
	}
	select {
	case <-c.Done():
		return fmt.Errorf("%s pid %d exited before it was ready: %v", what, c.Proc.PID, c.Err())
	case <-time.After(time.Second):
		return fmt.Errorf("%s pid %d closed its ready pipe without writing ready", what, c.Proc.PID)
	}
}

// LogTail returns what was written to a child's log from offset on, on
// one line (its lines joined by " | "), at most its last 2 KiB: enough to
// say why a child failed in one error.
func LogTail(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || offset > int64(len(b)) {
		return ""
	}
	b = b[offset:]
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return string(bytes.Join(bytes.Fields(bytes.ReplaceAll(b, []byte("\n"), []byte(" | "))), []byte(" ")))
}
