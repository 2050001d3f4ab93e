package numafault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/numa"
)

// child is a hog this instance started.
type child struct {
	id    procID
	ready *os.File      // read end of the ready pipe
	done  chan struct{} // closed once reaped
	err   error         // its exit, valid once done is closed
}

// hogDuration is how long a hog runs: the context's hold time plus
// HoldMargin, DefaultHold without one, at least HoldMargin, in whole
// seconds.
func hogDuration(ctx context.Context, now time.Time) time.Duration {
	d := DefaultHold
	if until, ok := fault.HoldUntil(ctx); ok {
		d = until.Sub(now) + HoldMargin
	}
	return max(d, HoldMargin).Round(time.Second)
}

// hogArgs returns the hog's flags for the fault on node n.
func (in *Injector) hogArgs(ctx context.Context, st state, n numa.Node, v catalog.Values) ([]string, error) {
	args := []string{"--key=" + st.Key, "--node=" + strconv.Itoa(n.ID),
		"--duration=" + hogDuration(ctx, time.Now()).String(), "--ready-fd=3"}
	if in.fault == "numa.memory-pressure" {
		if !numa.HasMemory(n) {
			return nil, fmt.Errorf("node %d has no memory", n.ID)
		}
		frac := v.Float("fraction")
		if frac <= 0 || frac > 1 {
			return nil, fmt.Errorf("fraction %v: must be in (0, 1]", frac)
		}
		b := uint64(frac * float64(n.MemFree))
		if in.opts.maxHogBytes > 0 {
			b = min(b, in.opts.maxHogBytes)
		}
		if b < uint64(os.Getpagesize()) {
			return nil, fmt.Errorf("node %d has %d bytes free, too little to press on", n.ID, n.MemFree)
		}
		return append(args, "--mode=memory", "--bytes="+strconv.FormatUint(b, 10)), nil
	}
	if !numa.HasCPUs(n) {
		return nil, fmt.Errorf("node %d has no cpus", n.ID)
	}
	threads := int(v.Int("threads"))
	if threads <= 0 {
		threads = len(n.CPUs)
	}
	return append(args, "--mode=cpu", "--cpus="+numa.FormatCPUList(n.CPUs), "--threads="+strconv.Itoa(threads)), nil
}

// injectHog starts the hog on the GPU's node and returns once it holds
// its memory or CPUs.
func (in *Injector) injectHog(ctx context.Context, path string, st state, topo numa.Topology, v catalog.Values) error {
	n, _ := topo.Node(st.GPUNode)
	args, err := in.hogArgs(ctx, st, n, v)
	if err != nil {
		return err
	}
	// Recorded before the child starts: a crash from here on leaves a
	// state file for recovery, and the child dies with us (Pdeathsig).
	if err := writeState(path, st); err != nil {
		return err
	}
	logPath := filepath.Join(in.opts.StateDir, fileStem(st.Key)+".log")
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return errors.Join(fmt.Errorf("open the hog's log: %w", err), removeState(path))
	}
	defer log.Close()
	logStart, _ := log.Seek(0, io.SeekEnd)
	c, err := in.start(append(append([]string{}, in.opts.ExecArgs...), args...), log)
	if err != nil {
		return errors.Join(err, removeState(path))
	}
	st.Child = &c.id
	fail := func(cause error) error {
		if tail := logTail(logPath, logStart); tail != "" {
			cause = fmt.Errorf("%w; log %s ends: %s", cause, logPath, tail)
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.opts.termGrace+30*time.Second)
		defer cancel()
		if err := in.stopHog(sctx, c.id); err != nil {
			// Keep the state file so Recover can retry.
			_ = writeState(path, st)
			return errors.Join(cause, fmt.Errorf("stop the hog (Recover retries): %w", err))
		}
		return errors.Join(cause, removeState(path))
	}
	if err := writeState(path, st); err != nil {
		return fail(err)
	}
	if err := in.awaitReady(ctx, c); err != nil {
		return fail(err)
	}
	in.logf("numafault: %s: hog pid %d holds node %d", st.Key, c.id.PID, n.ID)
	return nil
}

// start runs the hog and returns once its start time is known.
func (in *Injector) start(args []string, log *os.File) (*child, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start the hog: ready pipe: %w", err)
	}
	type started struct {
		c   *child
		err error
	}
	ch := make(chan started, 1)
	go func() {
		// Pdeathsig fires when the thread that forked the child exits,
		// not the process. This goroutine keeps its thread locked, blocked
		// in Wait, for the child's whole life and never unlocks, so the
		// thread ends before the child only when the process dies.
		runtime.LockOSThread()
		cmd := exec.Command(in.opts.Exec, args...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.ExtraFiles = []*os.File{w} // descriptor 3, as --ready-fd=3 says
		cmd.Env = append(os.Environ(), in.opts.env...)
		// A group of its own: a terminal's ^C to gpuchaos does not reach
		// the hog behind the engine's back.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if !in.opts.noPdeathsig {
			cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
		}
		err := cmd.Start()
		_ = w.Close() // the child holds its own copy
		if err != nil {
			ch <- started{err: err}
			return
		}
		// Read before Wait, so the pid cannot have been reused yet.
		pst, err := readStat(cmd.Process.Pid, 0)
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			ch <- started{err: fmt.Errorf("read the start time of pid %d: %w", cmd.Process.Pid, err)}
			return
		}
		c := &child{id: procID{PID: cmd.Process.Pid, StartTicks: pst.StartTicks}, ready: r, done: make(chan struct{})}
		in.mu.Lock()
		in.ours[c.id.PID] = c
		in.mu.Unlock()
		ch <- started{c: c}
		c.err = cmd.Wait()
		in.mu.Lock()
		delete(in.ours, c.id.PID)
		in.mu.Unlock()
		close(c.done)
	}()
	s := <-ch
	if s.err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("start the hog %s: %w", in.opts.Exec, s.err)
	}
	return s.c, nil
}

// awaitReady reads the hog's "ready" line; end of file first means it
// exited before it held anything.
func (in *Injector) awaitReady(ctx context.Context, c *child) error {
	defer c.ready.Close()
	if err := c.ready.SetReadDeadline(time.Now().Add(ReadyTimeout)); err != nil {
		return fmt.Errorf("hog pid %d: ready pipe: %w", c.id.PID, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.ready.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	got, err := io.ReadAll(io.LimitReader(c.ready, 64))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil:
		return fmt.Errorf("hog pid %d: waiting for ready: %w", c.id.PID, ctx.Err())
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("hog pid %d: not ready after %s", c.id.PID, ReadyTimeout)
	case err != nil:
		return fmt.Errorf("hog pid %d: ready pipe: %w", c.id.PID, err)
	case bytes.HasPrefix(got, []byte("ready\n")):
		return nil
	}
	select {
	case <-c.done:
		return fmt.Errorf("hog pid %d exited before it was ready: %v", c.id.PID, c.err)
	case <-time.After(time.Second):
		return fmt.Errorf("hog pid %d closed its ready pipe without writing ready", c.id.PID)
	}
}

// stopHog ends a recorded hog (SIGTERM to its group, SIGKILL after the
// grace) and returns once it is gone, and reaped when it is ours.
func (in *Injector) stopHog(ctx context.Context, id procID) error {
	if id.PID == os.Getpid() || id.PID == syscall.Getpgrp() {
		return fmt.Errorf("pid %d: state names this process or its group", id.PID)
	}
	in.mu.Lock()
	mine := in.ours[id.PID]
	in.mu.Unlock()
	if mine != nil && mine.id != id {
		mine = nil
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if err := signalChecked(id, sig); err != nil {
			return fmt.Errorf("stop hog pid %d: %w", id.PID, err)
		}
		limit := in.opts.termGrace
		if sig == syscall.SIGKILL {
			limit = 0
		}
		gone, err := waitGone(ctx, id, limit)
		if err != nil {
			return fmt.Errorf("stop hog pid %d: %w", id.PID, err)
		}
		if gone {
			break
		}
	}
	if mine != nil {
		select {
		case <-mine.done:
		case <-ctx.Done():
			return fmt.Errorf("stop hog pid %d: waiting for it to be reaped: %w", id.PID, ctx.Err())
		}
	}
	in.logf("numafault: stopped hog pid %d", id.PID)
	return nil
}

// waitGone polls until the process no longer runs, for at most limit (0:
// until ctx ends), and reports whether it is gone.
func waitGone(ctx context.Context, id procID, limit time.Duration) (bool, error) {
	var expire <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		expire = t.C
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		ok, err := alive(id)
		if err != nil {
			return false, err
		}
		if !ok {
			return true, nil
		}
		select {
		case <-expire:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick.C:
		}
	}
}

// logTail returns the last lines written to the log from offset on.
func logTail(path string, offset int64) string {
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
