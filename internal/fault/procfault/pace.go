package procfault

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// PaceCommand is the hidden gpuchaos subcommand that runs RunPace; the
// duty-cycle injector starts `gpuchaos pace FLAGS`.
const PaceCommand = "pace"

// DutyPeriod is the period of the duty cycle: long enough that the two
// signals per period cost the rank nothing measurable and that the
// pacer's timer slack (tens of microseconds) is a small part of it, short
// enough that a training step of a few hundred milliseconds sees several
// periods and so slows by the average rather than by luck of alignment.
const DutyPeriod = 100 * time.Millisecond

// Bounds of the pacer's flags.
const (
	minPeriod = 10 * time.Millisecond
	maxPeriod = 10 * time.Second
	// minStop is the shortest stop worth two signals: below it (a
	// slowdown a hair above 1) the pacer lets the rank run.
	minStop = 100 * time.Microsecond
)

// Exit codes of RunPace besides 0 (the duration ended, a signal asked it
// to stop, or the rank exited).
const (
	paceFailed  = 1
	paceBadArgs = 2
)

// pacer keeps one process running share of each period.
type pacer struct {
	rank   procfind.Proc
	share  float64
	period time.Duration
	stderr io.Writer
	// ready, when not nil, gets "ready\n" once the first stop is sent,
	// and is closed then.
	ready *os.File
}

// RunPace is the pacer the duty-cycle injector starts: gpuchaos's hidden
// pace command calls it with the flags after the command name. It returns
// the exit code: 0 when --for has passed, when ctx ends, on SIGTERM,
// SIGINT or SIGHUP, or when the rank has exited; 1 on a failure; 2 on bad
// flags.
//
// It alternates SIGSTOP and SIGCONT on the process --pid whose start time
// is --start-ticks, so that it is stopped for 1-share of each --period and
// runs for share, and writes "ready\n" on the descriptor --ready-fd (-1:
// none) once the first stop is sent. Whatever ends it short of SIGKILL, it
// sends SIGCONT to the rank on its way out, so the rank is never left
// stopped by a pacer that could help it.
func RunPace(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(PaceCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		pid        = fs.Int("pid", 0, "the rank's pid")
		startTicks = fs.Uint64("start-ticks", 0, "the rank's start time in /proc/PID/stat")
		share      = fs.Float64("share", 0, "fraction of each period the rank runs, in (0, 1]")
		period     = fs.Duration("period", DutyPeriod, "length of one stop-and-run cycle")
		duration   = fs.Duration("for", 0, "how long to pace before leaving the rank running")
		readyFD    = fs.Int("ready-fd", -1, "descriptor to write ready to")
	)
	// The key is only there for ps to show whose pacer this is.
	fs.String("key", "", "the injection key")
	if err := fs.Parse(args); err != nil {
		return paceBadArgs
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", PaceCommand, err)
		return code
	}
	p := pacer{rank: procfind.Proc{PID: *pid, StartTicks: *startTicks}, share: *share, period: *period, stderr: stderr}
	switch {
	case fs.NArg() > 0:
		return fail(paceBadArgs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	case !p.rank.Valid() || *pid == os.Getpid() || *pid == os.Getppid():
		return fail(paceBadArgs, fmt.Errorf("--pid %d --start-ticks %d: not a process the pacer may stop", *pid, *startTicks))
	case !(p.share > 0 && p.share <= 1):
		return fail(paceBadArgs, fmt.Errorf("--share %v: want (0, 1]", p.share))
	case p.period < minPeriod || p.period > maxPeriod:
		return fail(paceBadArgs, fmt.Errorf("--period %s: want %s to %s", p.period, minPeriod, maxPeriod))
	case *duration <= 0:
		return fail(paceBadArgs, fmt.Errorf("--for %s: must be positive", *duration))
	}
	if *readyFD >= 0 {
		if *readyFD < 3 {
			return fail(paceBadArgs, fmt.Errorf("--ready-fd %d: must be 3 or more", *readyFD))
		}
		p.ready = os.NewFile(uintptr(*readyFD), "ready-fd")
		// Closed unwritten when the pacer fails before its first stop, so
		// the injector reads end of file rather than waiting out its timeout.
		defer func() {
			if p.ready != nil {
				_ = p.ready.Close()
			}
		}()
	}
	// Caught here rather than left to the caller: an uncaught SIGTERM (the
	// Pdeathsig of a crashed gpuchaos, the injector's stop) would end the
	// pacer without the SIGCONT below. The handlers stay until after it,
	// so a second SIGTERM cannot cut it short either.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	err := p.run(ctx)
	if cerr := p.release(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	switch {
	case errors.Is(err, errRankGone) && !p.readyPending():
		// The rank ended mid-fault: the pacer's work is done.
		fmt.Fprintf(stderr, "%s: pid %d: %v\n", PaceCommand, p.rank.PID, err)
		return 0
	case err != nil:
		return fail(paceFailed, err)
	}
	return 0
}

// errRankGone ends the pacing: there is nothing left to stop.
var errRankGone = errors.New("the rank has exited")

// run paces the rank until ctx ends or the rank exits. Each period starts
// at a deadline counted from the first, not from the end of the previous
// one, so the time the signals and wake-ups take does not accumulate: the
// rank runs share of the wall time however late the pacer wakes.
func (p *pacer) run(ctx context.Context) error {
	stopFor := time.Duration(math.Round(float64(p.period) * (1 - p.share)))
	if stopFor < minStop {
		// Nothing worth stopping for: hold, so the injector and the state
		// file still see a pacer until the end.
		p.sayReady()
		<-ctx.Done()
		return nil
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	// until sleeps to the deadline and reports whether ctx ended first.
	until := func(deadline time.Time) bool {
		timer.Reset(time.Until(deadline))
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		}
	}
	start := time.Now()
	var missed int
	for k := int64(0); ; k++ {
		// A pacer descheduled past a whole stop (a loaded node) starts
		// again at the current period rather than catching up with a
		// burst of short cycles; the count goes to its log at the end.
		if now := int64(time.Since(start) / p.period); now > k {
			missed += int(now - k)
			k = now
		}
		cycle := start.Add(time.Duration(k) * p.period)
		if err := p.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		p.sayReady()
		ok := until(cycle.Add(stopFor))
		if err := p.signal(syscall.SIGCONT); err != nil {
			return err
		}
		if !ok || !until(cycle.Add(p.period)) {
			break
		}
	}
	if missed > 0 {
		fmt.Fprintf(p.stderr, "%s: pid %d: %d periods skipped because the pacer ran late\n", PaceCommand, p.rank.PID, missed)
	}
	return nil
}

// signal sends sig to the rank only if it is still the process the pacer
// was given (procfind.Proc.Signal checks the start time through a pidfd).
// SIGSTOP goes to the thread group, which stops every thread of the rank:
// its CUDA launch and NCCL proxy threads included. Stopping the rank's
// process suffices and stopping its process group would be wrong: worker
// processes (data loaders) only feed the rank and block once it stops
// consuming, so the rank alone sets the job's pace, while its group may
// hold its launcher (torchrun) and the other ranks.
func (p *pacer) signal(sig syscall.Signal) error {
	err := p.rank.Signal(sig)
	if errors.Is(err, os.ErrNotExist) {
		return errRankGone
	}
	if err != nil {
		return fmt.Errorf("send %s to pid %d: %w", sig, p.rank.PID, err)
	}
	return nil
}

// readyPending reports whether the ready line is still to be written: a
// rank gone before the first stop is a failed start, not a finished one.
func (p *pacer) readyPending() bool { return p.ready != nil }

// sayReady writes the ready line once.
func (p *pacer) sayReady() {
	if p.ready == nil {
		return
	}
	// A failed write means the injector stopped listening (it gave up or
	// died); pacing on is still right until it stops us.
	_, _ = p.ready.WriteString("ready\n")
	_ = p.ready.Close()
	p.ready = nil
}

// release leaves the rank running: the last word of every pacer that
// gets one. A rank that has exited needs nothing.
func (p *pacer) release() error {
	err := p.rank.Signal(syscall.SIGCONT)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("leave pid %d running: %w", p.rank.PID, err)
	}
	return nil
}
