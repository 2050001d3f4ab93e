package ckptfault

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"syscall"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// writerSignals are the signals the catalogue lets kill-writer send.
var writerSignals = map[string]syscall.Signal{"SIGKILL": syscall.SIGKILL, "SIGTERM": syscall.SIGTERM}

// defaultWatch bounds the watch when neither the timeout parameter nor
// the engine's hold time says otherwise.
const defaultWatch = 10 * time.Minute

// rescanEvery is how often the watch looks for the job's ranks again, so
// that a rank restarted by its supervisor is watched too.
const rescanEvery = 250 * time.Millisecond

// killWriter watches the job's ranks until one writes under the
// directory, then signals it.
func (in *Injector) killWriter(ctx context.Context, key string, st state, ref inventory.Ref, v catalog.Values) error {
	st.Signal = v.String("signal")
	if st.Signal == "" {
		st.Signal = "SIGKILL"
	}
	sig, ok := writerSignals[st.Signal]
	if !ok {
		return fmt.Errorf("signal %q is not one kill-writer sends", st.Signal)
	}
	watch := v.Duration("timeout")
	if watch <= 0 {
		watch = defaultWatch
	}
	deadline := time.Now().Add(watch)
	if hold, ok := fault.HoldUntil(ctx); ok && hold.Before(deadline) {
		deadline = hold
	}
	find, err := writerFinder(ref, v)
	if st.Pod != nil {
		find, err = podWriterFinder(st.Pod.Pod, v)
	}
	if err != nil {
		return err
	}
	// The watch is recorded before it starts, so the engine sees the key
	// as injected while it runs; a crash mid-watch leaves nothing to undo.
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record before acting: %w", err)
	}
	forget := func(cause error) error {
		if rerr := in.dir.Remove(key); rerr != nil {
			return errors.Join(cause, rerr)
		}
		return cause
	}
	tick := time.NewTicker(in.poll)
	defer tick.Stop()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var (
		ranks    []procfind.Proc
		lastScan time.Time
	)
	for {
		if time.Since(lastScan) >= rescanEvery {
			if ranks, err = find(); err != nil {
				return forget(err)
			}
			lastScan = time.Now()
		}
		for _, p := range ranks {
			files, err := procfind.WritersUnder(p.PID, st.Dir)
			if err != nil {
				continue // exited, or not ours to read
			}
			for _, f := range files {
				if f.Pos == 0 {
					continue // opened but nothing written yet: not torn
				}
				err := p.Signal(sig)
				if errors.Is(err, os.ErrNotExist) {
					continue // the pid is no longer the rank we listed
				}
				if err != nil {
					return forget(err)
				}
				// SIGKILL cannot be caught: return once the death shows, so
				// the fault is in effect when Inject returns. SIGTERM may be
				// handled at the writer's pace, which is its point.
				if sig == syscall.SIGKILL {
					if err := p.WaitGone(context.WithoutCancel(ctx), 5*time.Second); err != nil {
						return fmt.Errorf("SIGKILL sent to pid %d writing %s: %w", p.PID, f.Path, err)
					}
				}
				st.Killed, st.File, st.Pos = &p, f.Path, f.Pos
				in.log.Info("killed checkpoint writer", "key", key, "pid", p.PID, "file", f.Path, "written", f.Pos, "signal", st.Signal)
				if err := in.dir.Write(key, st); err != nil {
					return fmt.Errorf("sent %s to pid %d writing %s, but recording it failed: %w", st.Signal, p.PID, f.Path, err)
				}
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return forget(fmt.Errorf("watching %s: %w", st.Dir, ctx.Err()))
		case <-timer.C:
			return forget(fmt.Errorf("no process of the job opened a file under %s for writing within %s", st.Dir, watch.Round(time.Millisecond)))
		case <-tick.C:
		}
	}
}

// writerFinder returns what lists the processes to watch: the one the pid
// parameter names, or every process of the job's ranks.
func writerFinder(ref inventory.Ref, v catalog.Values) (func() ([]procfind.Proc, error), error) {
	if pid := v.Int("pid"); pid != 0 {
		if pid <= 1 || pid > math.MaxInt32 || int(pid) == os.Getpid() {
			return nil, fmt.Errorf("pid %d cannot be a checkpoint writer", pid)
		}
		p, err := procfind.Identify(int(pid))
		if err != nil {
			return nil, fmt.Errorf("pid %d: %w", pid, err)
		}
		return func() ([]procfind.Proc, error) { return []procfind.Proc{p}, nil }, nil
	}
	if ref.Job == "" {
		return nil, errors.New("the target names no job and the pid parameter is 0")
	}
	return func() ([]procfind.Proc, error) {
		ranks, err := procfind.Ranks(ref.Job)
		if err != nil {
			return nil, err
		}
		out := make([]procfind.Proc, len(ranks))
		for i, r := range ranks {
			out[i] = r.Proc
		}
		return out, nil
	}, nil
}
