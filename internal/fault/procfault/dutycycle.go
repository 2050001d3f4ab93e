package procfault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/childproc"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// readyTimeout bounds how long Inject waits for the pacer's first stop:
// the start of a Go binary and one signal.
const readyTimeout = 30 * time.Second

// pace starts the duty-cycle pacer on the rank and returns once it has
// stopped the rank for the first time. The pacer is a child process, not
// a goroutine, so that it keeps its rhythm whatever the engine is doing
// and ends with the engine: its Pdeathsig is SIGTERM, which it catches to
// continue the rank before it exits. The cpus and window parameters are
// cgroup-cpu's and are not read: stopping the whole rank slows it by the
// slowdown whatever it spends its time on, CPU or waiting on a GPU.
func (in *Injector) pace(ctx context.Context, key string, st state, v catalog.Values) error {
	st.Slowdown = v.Float("slowdown")
	if !(st.Slowdown >= 1) || math.IsInf(st.Slowdown, 0) {
		return fmt.Errorf("slowdown %v is not at least 1", st.Slowdown)
	}
	st.Mechanism = mechDutyCycle
	// Recorded before the pacer exists, so it cannot name the pacer yet:
	// should this process die between the start and the second write
	// below, the pacer gets its Pdeathsig and continues the rank, and
	// Recover, finding no pacer, continues the rank again.
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record before acting: %w", err)
	}
	logPath := filepath.Join(in.dir.Path(), in.dir.Name(key)+".log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return errors.Join(fmt.Errorf("open the pacer's log: %w", err), in.dir.Remove(key))
	}
	defer logFile.Close()
	logStart, _ := logFile.Seek(0, io.SeekEnd)
	args := append(slices.Clone(in.opts.ExecArgs),
		"--key="+key,
		"--pid="+strconv.Itoa(st.Proc.PID),
		"--start-ticks="+strconv.FormatUint(st.Proc.StartTicks, 10),
		"--share="+strconv.FormatFloat(1/st.Slowdown, 'g', -1, 64),
		"--period="+DutyPeriod.String(),
		// Bounded like every child an injector starts, so that a pacer
		// nobody recovers ends (and continues the rank) by itself.
		"--for="+fault.HoldFor(ctx, time.Now()).Round(time.Second).String(),
		"--ready-fd=3")
	c, err := in.pacers.Start(childproc.Spec{Path: in.opts.Exec, Args: args, Env: append(os.Environ(), in.opts.env...),
		Output: logFile, Pdeathsig: syscall.SIGTERM, Mark: in.dir.Mark(key)})
	if err != nil {
		return errors.Join(fmt.Errorf("start the pacer: %w", err), in.dir.Remove(key))
	}
	st.Pacer = &c.Proc
	fail := func(cause error) error {
		if tail := childproc.LogTail(logPath, logStart); tail != "" {
			cause = fmt.Errorf("%w; log %s ends: %s", cause, logPath, tail)
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.opts.TermGrace+stopWait+30*time.Second)
		defer cancel()
		if _, err := in.unpace(sctx, key, st); err != nil {
			// Keep the record naming the pacer so Recover can retry.
			_ = in.dir.Write(key, st)
			return errors.Join(cause, fmt.Errorf("undo (Recover retries): %w", err))
		}
		return errors.Join(cause, in.dir.Remove(key))
	}
	if err := in.dir.Write(key, st); err != nil {
		return fail(fmt.Errorf("record the pacer: %w", err))
	}
	if err := c.AwaitReady(ctx, "pacer", readyTimeout); err != nil {
		return fail(err)
	}
	in.log.Info("pacing rank", "key", key, "pid", st.Proc.PID, "job", st.Job, "rank", st.Rank,
		"slowdown", st.Slowdown, "period", DutyPeriod, "pacer", c.Proc.PID)
	return nil
}

// unpace stops the pacer, then continues the rank itself: the pacer
// continues it on SIGTERM, but one that was SIGKILLed (by anyone, or by
// us after its grace) between a stop and a continue left it stopped. The
// pacer is the one the record names and any other process carrying the
// key's mark: an injector killed between starting the pacer and recording
// it left a pacer only the mark finds, which its Pdeathsig normally ends
// but may not have yet. It returns the proof when the rank has ended.
func (in *Injector) unpace(ctx context.Context, key string, st state) (proof string, err error) {
	if st.Pacer != nil {
		if err := in.pacers.Stop(ctx, *st.Pacer, in.opts.TermGrace, nil); err != nil {
			return "", fmt.Errorf("stop the pacer: %w", err)
		}
	}
	found, err := in.pacers.StopMarked(ctx, in.dir.Mark(key), in.opts.Exec, in.opts.TermGrace, nil)
	if err != nil {
		return "", fmt.Errorf("stop the pacers of %s: %w", key, err)
	}
	if n := len(found.Procs); n > 0 {
		in.log.Info("stopped unrecorded pacers", "key", key, "count", n)
	}
	proof, err = cont(ctx, st.Proc)
	if err != nil {
		return "", err
	}
	if proof != "" {
		return proof + "; pacers: " + found.String(), nil
	}
	in.log.Info("unpaced rank", "key", key, "pid", st.Proc.PID, "job", st.Job, "rank", st.Rank)
	return "", nil
}
