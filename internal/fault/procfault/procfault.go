package procfault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/childproc"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// The faults and mechanisms of this package.
const (
	idKill      = "workload.kill-rank"
	idHang      = "workload.hang-rank"
	idStraggler = "workload.straggler"
)

// The mechanisms of this package.
const (
	mechSignal    = "signal"
	mechCgroupCPU = "cgroup-cpu"
	mechDutyCycle = "duty-cycle"
)

// Entries lists the mechanisms this package runs and the faults each
// causes, for the registry (internal/fault/nodeall). On k8s the agent
// finds the rank's process in its pod's cgroup and passes it as pid
// (nodeagent's podParams); cgroup-cpu then sets the quota of the rank's
// container group (fault.Env.PodCgroups).
func Entries() []fault.Entry {
	node := fault.NodeTargets()
	return []fault.Entry{
		{Mechanism: mechSignal, Targets: node, New: newFromEnv, Faults: []string{idKill, idHang}},
		{Mechanism: mechCgroupCPU, Targets: node, New: newFromEnv, Faults: []string{idStraggler}},
		{Mechanism: mechDutyCycle, Targets: node, New: newFromEnv, Faults: []string{idStraggler}},
	}
}

func newFromEnv(f *catalog.Fault, m *catalog.Mechanism, env fault.Env) (fault.Injector, error) {
	dir, err := env.StateSubdir(f, m, "rank")
	if err != nil {
		return nil, err
	}
	in, err := New(f, m, Options{StateDir: dir, Exec: env.Exec, Logger: env.Component("procfault"), PodCgroups: env.PodCgroups})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// signals are the signals the catalogue lets kill-rank send.
var signals = map[string]syscall.Signal{"SIGKILL": syscall.SIGKILL, "SIGTERM": syscall.SIGTERM, "SIGSEGV": syscall.SIGSEGV}

// cfsPeriod is the CFS period our group uses, the kernel's default:
// short enough that a throttled rank runs in slices of a few ms rather
// than stalling for long, long enough for a quota above the 1 ms minimum.
const cfsPeriod = 100 * time.Millisecond

// minQuota is the smallest CFS quota the kernel accepts.
const minQuota = time.Millisecond

// Options configure New. The zero value of each field is its documented
// default, except StateDir, which is required.
type Options struct {
	// StateDir holds one record per injected key. It must outlive the
	// injecting process and be shared by every injector of this package
	// on the node. Created, mode 0700, when missing.
	StateDir string
	// Logger gets one record per signal sent and per rank confined or
	// released; nil means none.
	Logger *slog.Logger
	// Exec is the gpuchaos binary the duty-cycle pacer runs; "" means
	// this process's own executable. ExecArgs come before the pacer's
	// flags; nil means []string{PaceCommand}, the hidden command that
	// calls RunPace.
	Exec     string
	ExecArgs []string
	// TermGrace is how long a pacer has after SIGTERM before SIGKILL;
	// zero means DefaultTermGrace.
	TermGrace time.Duration

	// PodCgroups is set by the node agent: a rank that runs in a
	// Kubernetes pod's container group (kubelet's layout, podproc) is
	// throttled by cgroup-cpu through that group's own quota, restored on
	// recovery, rather than moved into a group of ours, which would take
	// it out of the pod's. Ranks outside pods are confined as always.
	PodCgroups bool

	// env is added to the pacer's environment, for this package's tests.
	env []string
}

// DefaultTermGrace is the default of Options.TermGrace: a pacer needs
// only to send one SIGCONT before it exits.
const DefaultTermGrace = 5 * time.Second

// Injector injects one of this package's faults. It is safe for
// concurrent use; calls with the same key are serialised.
type Injector struct {
	fault string
	mech  string
	dir   *statedir.Dir
	log   *slog.Logger
	opts  Options
	// pacers are the duty-cycle pacers this instance started and has not
	// reaped.
	pacers childproc.Group
}

// New returns the injector of mechanism m of fault f: signal for
// workload.kill-rank and workload.hang-rank, cgroup-cpu or duty-cycle for
// workload.straggler.
func New(f *catalog.Fault, m *catalog.Mechanism, o Options) (*Injector, error) {
	if f == nil || m == nil {
		return nil, errors.New("procfault: a fault and a mechanism are required")
	}
	if err := fault.CheckMechanism("procfault", f, m, Entries()); err != nil {
		return nil, err
	}
	d, err := statedir.OpenFor("procfault", f.ID, o.StateDir)
	if err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.TermGrace <= 0 {
		o.TermGrace = DefaultTermGrace
	}
	if m.Name == mechDutyCycle {
		if o.Exec == "" {
			exe, err := os.Executable()
			if err != nil {
				return nil, fmt.Errorf("procfault: find the gpuchaos binary for the pacer: %w", err)
			}
			o.Exec = exe
		}
		if o.ExecArgs == nil {
			o.ExecArgs = []string{PaceCommand}
		}
	}
	return &Injector{fault: f.ID, mech: m.Name, dir: d, log: log, opts: o}, nil
}

// Inject finds the rank and applies the fault, recording it first. A key
// already recorded is a no-op. On error nothing stays applied and no
// record remains, unless undoing failed too; the error then says so and
// Recover retries.
func (in *Injector) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	err := in.dir.Inject(ctx, key, func() error {
		r, err := resolve(ref, v)
		if err != nil {
			return err
		}
		st := state{Version: stateVersion, Key: key, Fault: in.fault, Proc: r.Proc, Job: r.Job, Rank: r.Rank, Created: time.Now().UTC()}
		switch in.fault {
		case idKill:
			return in.kill(ctx, key, st, v)
		case idHang:
			return in.hang(ctx, key, st)
		case idStraggler:
			if in.mech == mechDutyCycle {
				return in.pace(ctx, key, st, v)
			}
			return in.straggle(ctx, key, st, v)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("inject %s on %s: %w", in.fault, describe(ref, v), err)
	}
	return nil
}

// Recover undoes what key's record says: SIGCONT for a hang, the threads
// moved back for a cgroup-cpu straggler, the pacer stopped and SIGCONT for
// a duty-cycle straggler, nothing for a kill. It then removes the
// record. No record is success. A rank that has ended (procfind.Proc.Gone:
// its pid absent, another process's, or a zombie with no thread running)
// is left alone and reported as fault.ErrTargetGone with that proof; a
// pacer is stopped whether or not the rank lives. Where it cannot tell
// (a cgroup hierarchy no longer mounted where the record says, a process
// that may be an unrecorded pacer it cannot look into) the record stays
// and the error wraps fault.ErrUnproven.
func (in *Injector) Recover(ctx context.Context, key string) error {
	var st state
	var proof string
	err := statedir.Recover(in.dir, key, in.parser(key), func(rec state) (err error) {
		st = rec
		switch st.Fault {
		case idHang:
			proof, err = cont(ctx, st.Proc)
			if err == nil && proof == "" {
				in.log.Info("continued rank", "key", key, "pid", st.Proc.PID, "job", st.Job, "rank", st.Rank)
			}
		case idStraggler:
			if st.Mechanism == mechDutyCycle {
				proof, err = in.unpace(ctx, key, st)
				break
			}
			if st.PodQuota != nil {
				proof, err = in.releasePod(key, st)
				break
			}
			proof, err = in.release(key, st)
		}
		if err != nil {
			return fmt.Errorf("pid %d: %w", st.Proc.PID, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recover %s: %w", in.fault, err)
	}
	if proof != "" {
		return fmt.Errorf("recover %s: %s: %w", in.fault, proof, fault.ErrTargetGone)
	}
	return nil
}

// release undoes a cgroup-cpu straggler: the rank's threads moved back
// and our group removed. Release works from the record alone and also
// when the rank has ended: our group is then empty and only needs
// removing, and the rank's end is reported with its proof. A group
// already missing proves nothing unless the hierarchy is still mounted
// where the record says.
func (in *Injector) release(key string, st state) (proof string, err error) {
	c := st.Confinement
	if err := c.Mounted(); err != nil {
		return "", fmt.Errorf("cannot tell whether group %s is gone: %w: %w", c.Dir, fault.ErrUnproven, err)
	}
	if err := c.Release(); err != nil {
		return "", err
	}
	in.log.Info("released rank", "key", key, "pid", st.Proc.PID, "group", c.Dir)
	proof, gone, err := st.Proc.Gone()
	if err != nil || !gone {
		return "", nil // released: whether the rank lives on changes nothing
	}
	return fmt.Sprintf("%s; group %s removed from the %s hierarchy at %s", proof, c.Dir, c.Controller, c.Mount), nil
}

// cont continues the rank and waits until it shows running, or returns
// the proof that it has ended (procfind.Proc.Gone): SIGSTOP stops the
// rank's threads and nothing else, so once none of them runs nothing is
// left stopped. The signal goes through a pidfd opened before the
// identity is checked, so a pid reused by another process is never
// continued; unlike procfind.Proc.Signal it reaches a rank whose leader
// thread exited while its other threads live on, stopped.
func cont(ctx context.Context, p procfind.Proc) (proof string, err error) {
	fd, err := unix.PidfdOpen(p.PID, 0)
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return "", fmt.Errorf("pidfd of pid %d: %w", p.PID, err)
	}
	opened := err == nil
	if opened {
		defer unix.Close(fd)
	}
	proof, gone, err := p.Gone()
	if err != nil {
		return "", err
	}
	if gone {
		return proof, nil
	}
	if !opened {
		return "", fmt.Errorf("pid %d: no pidfd (no such process), yet /proc shows it running", p.PID)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGCONT, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			if proof, gone, gerr := p.Gone(); gerr == nil && gone {
				return proof, nil
			}
		}
		return "", fmt.Errorf("send SIGCONT to pid %d: %w", p.PID, err)
	}
	return "", waitState(ctx, p, false)
}

// parser decodes key's record and checks that it is this injector's.
func (in *Injector) parser(key string) func([]byte) (state, error) {
	return func(b []byte) (state, error) {
		st, err := parseState(b)
		if err == nil && (st.Key != key || st.Fault != in.fault) {
			err = fmt.Errorf("holds %s key %q", st.Fault, st.Key)
		}
		return st, err
	}
}

// describe names the target in errors.
func describe(ref inventory.Ref, v catalog.Values) string {
	if pid := v.Int("pid"); pid != 0 {
		return fmt.Sprintf("pid %d", pid)
	}
	return fmt.Sprintf("job %s rank %d", ref.Job, ref.Rank)
}

// resolve finds the rank's process: the pid parameter when set, else the
// process carrying the ref's job and rank in its environment.
func resolve(ref inventory.Ref, v catalog.Values) (procfind.Rank, error) {
	if pid := v.Int("pid"); pid != 0 {
		if pid <= 1 || pid > math.MaxInt32 {
			return procfind.Rank{}, fmt.Errorf("pid %d cannot be a rank", pid)
		}
		if int(pid) == os.Getpid() {
			return procfind.Rank{}, errors.New("pid names gpuchaos itself")
		}
		p, err := procfind.Identify(int(pid))
		if err != nil {
			return procfind.Rank{}, fmt.Errorf("pid %d: %w", pid, err)
		}
		return procfind.Rank{Proc: p, Rank: ref.Rank, LocalRank: -1, WorldSize: -1}, nil
	}
	if ref.Job == "" {
		return procfind.Rank{}, errors.New("the target names no job and the pid parameter is 0")
	}
	return procfind.RankProcess(ref.Job, ref.Rank)
}

func (in *Injector) kill(ctx context.Context, key string, st state, v catalog.Values) error {
	st.Signal = v.String("signal")
	if st.Signal == "" {
		st.Signal = "SIGKILL"
	}
	sig, ok := signals[st.Signal]
	if !ok {
		return fmt.Errorf("signal %q is not one kill-rank sends", st.Signal)
	}
	st.Group = v.Bool("group")
	pst, err := st.Proc.Stat()
	if err != nil {
		return fmt.Errorf("pid %d: %w", st.Proc.PID, err)
	}
	// A rank started by torchrun or a shell shares its launcher's group;
	// signalling that group would kill the launcher and every rank.
	if st.Group && pst.PGRP != st.Proc.PID {
		return fmt.Errorf("pid %d does not lead its process group (%d): signalling the group would reach its launcher", st.Proc.PID, pst.PGRP)
	}
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record before acting: %w", err)
	}
	if st.Group {
		// The identity was checked above; a group id, unlike a pid, stays
		// while any member lives, so the leader's death cannot redirect it.
		err = syscall.Kill(-st.Proc.PID, sig)
		if errors.Is(err, syscall.ESRCH) {
			err = os.ErrNotExist
		}
	} else {
		err = st.Proc.Signal(sig)
	}
	if err != nil {
		// Nothing was sent: forget the record so a retry can act.
		if rerr := in.dir.Remove(key); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("send %s to pid %d: %w", st.Signal, st.Proc.PID, err)
	}
	// SIGKILL cannot be caught, so Inject waits for the death to show
	// (a zombie counts): the fault is in effect when it returns. Other
	// signals may be handled, slowly or not at all, which is the point of
	// sending them; for those Inject returns once they are sent.
	if sig == syscall.SIGKILL {
		if err := st.Proc.WaitGone(context.WithoutCancel(ctx), stopWait); err != nil {
			return fmt.Errorf("SIGKILL sent: %w", err)
		}
	}
	in.log.Info("killed rank", "key", key, "pid", st.Proc.PID, "job", st.Job, "rank", st.Rank, "signal", st.Signal, "group", st.Group)
	return nil
}

func (in *Injector) hang(ctx context.Context, key string, st state) error {
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record before acting: %w", err)
	}
	// SIGSTOP to the thread group's id stops every thread of it.
	if err := st.Proc.Signal(syscall.SIGSTOP); err != nil {
		if rerr := in.dir.Remove(key); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("send SIGSTOP to pid %d: %w", st.Proc.PID, err)
	}
	// The signal is delivered asynchronously; Inject returns once the
	// kernel shows the rank stopped, so the fault is in effect when the
	// engine starts observing.
	if err := waitState(ctx, st.Proc, true); err != nil {
		return fmt.Errorf("SIGSTOP sent to pid %d (left for recovery): %w", st.Proc.PID, err)
	}
	in.log.Info("stopped rank", "key", key, "pid", st.Proc.PID, "job", st.Job, "rank", st.Rank)
	return nil
}

// stopWait bounds how long a stop, a continue or a death may take to show in
// /proc: delivery takes microseconds, unless the process is in an
// uninterruptible sleep (a driver call, a hung filesystem).
const stopWait = 5 * time.Second

// waitState waits until p shows as stopped (state T) or, with stopped
// false, as not stopped. A process that exits meanwhile ends the wait.
func waitState(ctx context.Context, p procfind.Proc, stopped bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopWait)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		st, err := p.Stat()
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if (st.State == 'T') == stopped {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pid %d still in state %c after %s", p.PID, st.State, stopWait)
		case <-tick.C:
		}
	}
}

func (in *Injector) straggle(ctx context.Context, key string, st state, v catalog.Values) error {
	st.Slowdown = v.Float("slowdown")
	if st.Slowdown < 1 || math.IsNaN(st.Slowdown) || math.IsInf(st.Slowdown, 0) {
		return fmt.Errorf("slowdown %v is not at least 1", st.Slowdown)
	}
	st.CPUs = v.Float("cpus")
	window := v.Duration("window")
	if window <= 0 {
		window = time.Second
	}
	if h, dir, err := in.podContainer(st.Proc); err != nil {
		return err
	} else if dir != "" {
		return in.straggleInPod(ctx, key, st, h, dir, window)
	}
	if st.CPUs == 0 {
		cpus, err := measureCPUs(ctx, st.Proc, window)
		if err != nil {
			return err
		}
		st.CPUs = cpus
	}
	if st.CPUs <= 0 || math.IsNaN(st.CPUs) || math.IsInf(st.CPUs, 0) {
		return fmt.Errorf("cpus %v is not positive", st.CPUs)
	}
	quota := max(time.Duration(float64(cfsPeriod)*st.CPUs/st.Slowdown), minQuota)
	h, err := cgroup.Find("cpu")
	if err != nil {
		return err
	}
	var files []cgroup.File
	switch h.Version {
	case cgroup.V1:
		files = []cgroup.File{
			{Name: "cpu.cfs_period_us", Value: fmt.Sprint(cfsPeriod.Microseconds())},
			{Name: "cpu.cfs_quota_us", Value: fmt.Sprint(quota.Microseconds())},
		}
	case cgroup.V2:
		files = []cgroup.File{{Name: "cpu.max", Value: fmt.Sprintf("%d %d", quota.Microseconds(), cfsPeriod.Microseconds())}}
	}
	c, err := cgroup.Plan(h, st.Proc, cgroup.NamePrefix+in.dir.Name(key), files)
	if err != nil {
		return err
	}
	st.Confinement = c
	if err := in.dir.Write(key, st); err != nil {
		return fmt.Errorf("record before acting: %w", err)
	}
	if err := c.Apply(); err != nil {
		if rerr := c.Release(); rerr != nil {
			return fmt.Errorf("%w (left for recovery: %w)", err, rerr)
		}
		if rerr := in.dir.Remove(key); rerr != nil {
			return fmt.Errorf("%w (record not removed: %w)", err, rerr)
		}
		return err
	}
	in.log.Info("confined rank", "key", key, "pid", st.Proc.PID, "group", c.Dir, "cpus", st.CPUs, "slowdown", st.Slowdown, "quota", quota)
	return nil
}

// measureCPUs returns how many CPUs the process used on average over the
// window, from the user and system times of all its threads.
func measureCPUs(ctx context.Context, p procfind.Proc, window time.Duration) (float64, error) {
	before, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("measure the CPU of pid %d: %w", p.PID, err)
	}
	t0 := time.Now()
	timer := time.NewTimer(window)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return 0, fmt.Errorf("measure the CPU of pid %d: %w", p.PID, ctx.Err())
	case <-timer.C:
	}
	after, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("measure the CPU of pid %d: %w", p.PID, err)
	}
	ticks := float64(after.UTime + after.STime - before.UTime - before.STime)
	cpus := ticks / procfind.ClockTicks / time.Since(t0).Seconds()
	// An idle rank (blocked in a collective, say) would get a quota that
	// starves it once it wakes; a floor of a tenth of a CPU keeps the
	// throttle about the rank's speed rather than a hang.
	return max(cpus, 0.1), nil
}
