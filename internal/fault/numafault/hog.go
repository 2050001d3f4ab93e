package numafault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/childproc"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/node/numa"
)

// hogDuration is how long a hog runs: the context's hold time plus
// HoldMargin, DefaultHold without one, at least HoldMargin, in whole
// seconds.
func hogDuration(ctx context.Context, now time.Time) time.Duration {
	return fault.HoldFor(ctx, now).Round(time.Second)
}

// hogArgs returns the hog's flags for the fault on node n.
func (in *Injector) hogArgs(ctx context.Context, st state, n numa.Node, v catalog.Values) ([]string, error) {
	args := []string{"--key=" + st.Key, "--node=" + strconv.Itoa(n.ID),
		"--duration=" + hogDuration(ctx, time.Now()).String(), "--ready-fd=3"}
	if in.opts.HogCgroups != nil {
		dirs, err := in.opts.HogCgroups()
		if err != nil {
			return nil, fmt.Errorf("cgroups for the hog: %w", err)
		}
		for _, d := range dirs {
			args = append(args, "--cgroup="+d)
		}
	}
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
func (in *Injector) injectHog(ctx context.Context, st state, topo numa.Topology, v catalog.Values) error {
	n, _ := topo.Node(st.GPUNode)
	args, err := in.hogArgs(ctx, st, n, v)
	if err != nil {
		return err
	}
	// Recorded before the child starts: a crash from here on leaves a
	// state file for recovery, and the child dies with us (Pdeathsig).
	if err := in.dir.Write(st.Key, st); err != nil {
		return err
	}
	logPath := filepath.Join(in.dir.Path(), in.dir.Name(st.Key)+".log")
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return errors.Join(fmt.Errorf("open the hog's log: %w", err), in.dir.Remove(st.Key))
	}
	defer log.Close()
	logStart, _ := log.Seek(0, io.SeekEnd)
	c, err := in.start(append(append([]string{}, in.opts.ExecArgs...), args...), log, in.dir.Mark(st.Key))
	if err != nil {
		return errors.Join(err, in.dir.Remove(st.Key))
	}
	st.Child = &c.Proc
	fail := func(cause error) error {
		if tail := childproc.LogTail(logPath, logStart); tail != "" {
			cause = fmt.Errorf("%w; log %s ends: %s", cause, logPath, tail)
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.opts.termGrace+30*time.Second)
		defer cancel()
		if err := in.stopHog(sctx, c.Proc); err != nil {
			// Keep the state file so Recover can retry.
			_ = in.dir.Write(st.Key, st)
			return errors.Join(cause, fmt.Errorf("stop the hog (Recover retries): %w", err))
		}
		return errors.Join(cause, in.dir.Remove(st.Key))
	}
	if err := in.dir.Write(st.Key, st); err != nil {
		return fail(err)
	}
	if err := c.AwaitReady(ctx, "hog", ReadyTimeout); err != nil {
		return fail(err)
	}
	in.logf("numafault: %s: hog pid %d holds node %d", st.Key, c.Proc.PID, n.ID)
	return nil
}

// start runs the hog and returns once its start time is known.
func (in *Injector) start(args []string, log *os.File, mark string) (*childproc.Child, error) {
	c, err := in.children.Start(childproc.Spec{Path: in.opts.Exec, Args: args, Output: log,
		Env: append(os.Environ(), in.opts.env...), NoPdeathsig: in.opts.noPdeathsig || in.opts.HogCgroups != nil, Mark: mark})
	if err != nil {
		return nil, fmt.Errorf("start the hog: %w", err)
	}
	return c, nil
}

// stopHog ends a recorded hog (SIGTERM to its group, SIGKILL after the
// grace) and returns once it is gone, and reaped when it is ours.
func (in *Injector) stopHog(ctx context.Context, id procID) error {
	if err := in.children.Stop(ctx, id, in.opts.termGrace, nil); err != nil {
		return fmt.Errorf("stop hog: %w", err)
	}
	in.logf("numafault: stopped hog pid %d", id.PID)
	return nil
}

// stopHogs ends the key's hogs: the recorded one (nil when the injector
// died before recording it) and every process carrying the key's mark,
// which finds a hog whatever the record says. A hog gone already is
// success: its memory and CPUs went with it.
func (in *Injector) stopHogs(ctx context.Context, key string, recorded *procID) error {
	if recorded != nil {
		if err := in.stopHog(ctx, *recorded); err != nil {
			return err
		}
	}
	// The hogs are the configured binary: a process whose environment
	// cannot be read is one only if its command line starts with it.
	found, err := in.children.StopMarked(ctx, in.dir.Mark(key), in.opts.Exec, in.opts.termGrace, nil)
	if err != nil {
		return fmt.Errorf("stop the hogs of %s: %w", key, err)
	}
	if len(found.Procs) > 0 {
		in.logf("numafault: %s: %s", key, found)
	}
	return nil
}
