package gpuproc

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
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/target"
)

// Defaults of Options' unexported seams.
const (
	// ReadyTimeout bounds how long Inject waits for a child's ready line;
	// it matches the commands' own setup bound (module load, allocation,
	// the first products).
	ReadyTimeout = 2 * time.Minute
	// TermGrace is how long a child has after SIGTERM to free the GPU
	// and exit before it gets SIGKILL.
	TermGrace = 10 * time.Second
	// pollInterval is how often a stop looks at /proc for a process that
	// is not this process's child and so cannot be waited for.
	pollInterval = 20 * time.Millisecond
	// abandonKillWait is how long a failed Inject waits, after the grace
	// of SIGTERM, for SIGKILL to end its children.
	abandonKillWait = 30 * time.Second
	// logTailLines is how many lines of a child's log an error carries.
	logTailLines = 8
)

// Options configure New. The zero value of each field is its documented
// default, except StateDir, which is required.
type Options struct {
	// Exec is the gpuchaos binary the children run; "" means this
	// process's own executable (os.Executable).
	Exec string
	// StateDir holds, per injected key, the state file KEY.json and the
	// children's output KEY.log. It must outlive the injecting process
	// (a fresh process recovers from it) and is created, mode 0700, when
	// missing. Required.
	StateDir string
	// Log, when set, gets one line per child started or stopped; nil
	// means none. Writes are serialised.
	Log io.Writer

	// The seams below are for this package's tests.

	// readyTimeout replaces ReadyTimeout when set.
	readyTimeout time.Duration
	// termGrace replaces TermGrace when set.
	termGrace time.Duration
	// noPdeathsig starts children without Pdeathsig, so a test can leave
	// an orphan behind and recover it through /proc alone.
	noPdeathsig bool
	// env is added to the children's environment.
	env []string
}

// Injector runs one exhaustion fault's children. It is safe for concurrent
// use; calls with the same key are serialised.
type Injector struct {
	fault string
	opts  Options

	mu    sync.Mutex
	locks map[string]*sync.Mutex
	// ours are the children this instance started and has not reaped
	// yet, by pid: a stop waits for their reaping rather than polling.
	ours  map[int]*proc
	logMu sync.Mutex
}

// proc is a child this instance started.
type proc struct {
	rec   childRecord
	ready *os.File      // read end of the ready pipe
	done  chan struct{} // closed once the child is reaped
	err   error         // the child's exit, valid once done is closed
}

// New returns the injector for mechanism m of fault f: burn for
// exhaustion.sm-burn, exhaustion.thermal-soak and exhaustion.noisy-neighbour,
// cuda-malloc for exhaustion.vram, cuda-memcpy for exhaustion.pcie.
func New(f *catalog.Fault, m *catalog.Mechanism, o Options) (fault.Injector, error) {
	if f == nil || m == nil {
		return nil, errors.New("gpuproc: a fault and a mechanism are required")
	}
	want, ok := mechanismOf(f.ID)
	if !ok {
		return nil, fmt.Errorf("gpuproc: fault %s is not run as a child process", f.ID)
	}
	if m.Name != want {
		return nil, fmt.Errorf("gpuproc: mechanism %s of %s is not run as a child process (%s is)", m.Name, f.ID, want)
	}
	if o.StateDir == "" {
		return nil, fmt.Errorf("gpuproc: %s needs a state directory", f.ID)
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("gpuproc: state directory: %w", err)
	}
	if o.Exec == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("gpuproc: find the gpuchaos binary: %w", err)
		}
		o.Exec = exe
	}
	if st, err := os.Stat(o.Exec); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("gpuproc: %s is not an executable gpuchaos binary", o.Exec)
	}
	if o.readyTimeout == 0 {
		o.readyTimeout = ReadyTimeout
	}
	if o.termGrace == 0 {
		o.termGrace = TermGrace
	}
	return &Injector{fault: f.ID, opts: o, locks: map[string]*sync.Mutex{}, ours: map[int]*proc{}}, nil
}

// Inject starts the fault's children on the GPU ref names and returns
// once each has reported ready. Injecting a key that has a state file is a
// no-op, also when its children have since ended on their own. Each child
// runs until Recover, until the time fault.HoldUntil(ctx) gives plus
// HoldMargin (DefaultHold without one), or until this process dies,
// whichever comes first. On error nothing is left running and no state
// file remains, unless stopping a child failed too; the error then says
// so and Recover retries.
func (in *Injector) Inject(ctx context.Context, key string, ref target.Ref, v catalog.Values) error {
	if key == "" {
		return fmt.Errorf("inject %s: empty key", in.fault)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inject %s on gpu %d: %w", in.fault, ref.GPU, err)
	}
	argvs, err := commands(in.fault, ref.GPU, v, childDuration(ctx, time.Now()))
	if err != nil {
		return fmt.Errorf("inject %s on gpu %d: %w", in.fault, ref.GPU, err)
	}
	unlock := in.lock(key)
	defer unlock()
	statePath, logPath := in.paths(key)
	switch _, err := os.Stat(statePath); {
	case err == nil:
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("inject %s on gpu %d: %w", in.fault, ref.GPU, err)
	}
	st := state{Version: stateVersion, Key: key, Fault: in.fault, GPU: ref.GPU, Created: time.Now().UTC()}
	// Recorded before anything starts: a crash from here on leaves a
	// state file, which the engine's recovery finds.
	if err := writeState(statePath, st); err != nil {
		return fmt.Errorf("inject %s on gpu %d: %w", in.fault, ref.GPU, err)
	}
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return in.abandon(ctx, statePath, nil, fmt.Errorf("inject %s on gpu %d: open the log: %w", in.fault, ref.GPU, err))
	}
	defer log.Close()
	logStart, _ := log.Seek(0, io.SeekEnd)
	fail := func(procs []*proc, err error) error {
		err = fmt.Errorf("inject %s on gpu %d: %w", in.fault, ref.GPU, err)
		if tail := logTail(logPath, logStart); tail != "" {
			err = fmt.Errorf("%w; log %s ends: %s", err, logPath, tail)
		}
		return in.abandon(ctx, statePath, procs, err)
	}
	var procs []*proc
	for _, argv := range argvs {
		p, err := in.start(argv, log)
		if err != nil {
			return fail(procs, err)
		}
		procs = append(procs, p)
		st.Children = append(st.Children, p.rec)
		if err := writeState(statePath, st); err != nil {
			return fail(procs, err)
		}
		in.logf("gpuproc: %s: started pid %d: %s", key, p.rec.PID, strings.Join(p.rec.Argv, " "))
	}
	for _, p := range procs {
		if err := in.awaitReady(ctx, p); err != nil {
			return fail(procs, err)
		}
	}
	return nil
}

// abandon stops what a failed Inject started and removes its state, so
// the failure leaves nothing behind. The stops do not heed ctx, which may
// be what failed, but are bounded: a child stuck in the driver past
// SIGKILL is left to Recover. It returns cause, joined with any failure to
// clean up.
func (in *Injector) abandon(ctx context.Context, statePath string, procs []*proc, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.opts.termGrace+abandonKillWait)
	defer cancel()
	var errs []error
	for _, p := range procs {
		if err := in.stop(ctx, p.rec); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := removeState(statePath); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(cause, fmt.Errorf("clean up (Recover retries): %w", errors.Join(errs...)))
	}
	return cause
}

// Recover stops every child the key's state file records that still runs
// (SIGTERM to its process group, SIGKILL after TermGrace), waits until each
// is gone, and removes the state file; the log stays. It works from the
// state file alone, so a fresh injector in a fresh process recovers what a
// crashed one started. No state file, or children that already ended, is
// success. A process that reused a recorded pid is never signalled.
func (in *Injector) Recover(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("recover %s: empty key", in.fault)
	}
	unlock := in.lock(key)
	defer unlock()
	statePath, _ := in.paths(key)
	st, err := readState(statePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recover %s: %w", in.fault, err)
	}
	for _, c := range st.Children {
		if err := in.stop(ctx, c); err != nil {
			return fmt.Errorf("recover %s on gpu %d: %w", in.fault, st.GPU, err)
		}
	}
	if err := removeState(statePath); err != nil {
		return fmt.Errorf("recover %s on gpu %d: %w", in.fault, st.GPU, err)
	}
	return nil
}

// lock serialises calls for one key and returns the unlock.
func (in *Injector) lock(key string) func() {
	in.mu.Lock()
	l, ok := in.locks[key]
	if !ok {
		l = &sync.Mutex{}
		in.locks[key] = l
	}
	in.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (in *Injector) paths(key string) (statePath, logPath string) {
	stem := filepath.Join(in.opts.StateDir, fileStem(key))
	return stem + ".json", stem + ".log"
}

func (in *Injector) logf(format string, args ...any) {
	if in.opts.Log == nil {
		return
	}
	in.logMu.Lock()
	defer in.logMu.Unlock()
	fmt.Fprintf(in.opts.Log, format+"\n", args...)
}

// start runs one child and returns once it exists and its start time is
// known.
func (in *Injector) start(argv []string, log *os.File) (*proc, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: ready pipe: %w", argv[0], err)
	}
	type started struct {
		p   *proc
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
		p, cmd, err := in.spawn(argv, log, r, w)
		ch <- started{p, err}
		if err != nil {
			return
		}
		p.err = cmd.Wait()
		in.mu.Lock()
		delete(in.ours, p.rec.PID)
		in.mu.Unlock()
		close(p.done)
	}()
	s := <-ch
	if s.err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], s.err)
	}
	return s.p, nil
}

// spawn forks and execs the child on the calling (locked) thread and
// records it; on error nothing runs.
func (in *Injector) spawn(argv []string, log, r, w *os.File) (*proc, *exec.Cmd, error) {
	cmd := exec.Command(in.opts.Exec, argv...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = []*os.File{w} // descriptor 3, as --ready-fd says
	cmd.Env = childEnv(os.Environ(), in.opts.env)
	// A group of its own: the child's children, if it ever has any, are
	// stopped with it, and a terminal's ^C to gpuchaos does not reach it
	// behind the engine's back (the engine recovers it in order).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !in.opts.noPdeathsig {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
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
	st, err := readStat(pid)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, nil, fmt.Errorf("read the start time of pid %d: %w", pid, err)
	}
	p := &proc{rec: childRecord{PID: pid, StartTicks: st.StartTicks, Argv: append([]string{in.opts.Exec}, argv...)},
		ready: r, done: make(chan struct{})}
	in.mu.Lock()
	in.ours[pid] = p
	in.mu.Unlock()
	return p, cmd, nil
}

// childEnv is the parent's environment without CUDA_VISIBLE_DEVICES, so
// the child sees every GPU and numbers them in PCI bus order as NVML does
// (the engine's GPU index is NVML's), plus extra.
func childEnv(parent, extra []string) []string {
	out := make([]string, 0, len(parent)+len(extra))
	for _, kv := range parent {
		if !strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// awaitReady reads the child's ready line; end of file first means the
// child exited (or closed the pipe) before taking its resource.
func (in *Injector) awaitReady(ctx context.Context, p *proc) error {
	defer p.ready.Close()
	// ctx's own deadline is left to the AfterFunc below, which runs only
	// once ctx.Err is set, so the error says which bound ended the wait.
	if err := p.ready.SetReadDeadline(time.Now().Add(in.opts.readyTimeout)); err != nil {
		return fmt.Errorf("pid %d: ready pipe: %w", p.rec.PID, err)
	}
	// A cancelled ctx moves the deadline to now, which ends the read.
	stop := context.AfterFunc(ctx, func() { _ = p.ready.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var got []byte
	buf := make([]byte, 64)
	for !bytes.Contains(got, []byte("\n")) && len(got) < 64 {
		n, err := p.ready.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if ctx.Err() != nil {
					return fmt.Errorf("pid %d: waiting for ready: %w", p.rec.PID, ctx.Err())
				}
				return fmt.Errorf("pid %d: not ready after %s", p.rec.PID, in.opts.readyTimeout)
			}
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("pid %d: ready pipe: %w", p.rec.PID, err)
		}
	}
	if string(got) == "ready\n" {
		return nil
	}
	if len(got) > 0 {
		return fmt.Errorf("pid %d: wrote %q on the ready pipe, want \"ready\\n\"", p.rec.PID, got)
	}
	// The pipe closed when the child exited; its exit status follows at
	// once, from the goroutine that waits for it.
	select {
	case <-p.done:
		return fmt.Errorf("pid %d exited before it was ready: %v", p.rec.PID, p.err)
	case <-time.After(time.Second):
		return fmt.Errorf("pid %d closed its ready pipe without writing", p.rec.PID)
	}
}

// stop ends one recorded child and returns once it is gone.
func (in *Injector) stop(ctx context.Context, c childRecord) error {
	if c.PID == os.Getpid() || c.PID == unix.Getpgrp() {
		// Never ourselves: only a forged state file could name us.
		return fmt.Errorf("pid %d: state names this process or its group", c.PID)
	}
	in.mu.Lock()
	mine := in.ours[c.PID]
	in.mu.Unlock()
	if mine != nil && mine.rec.StartTicks != c.StartTicks {
		mine = nil
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		// The start time is checked right before each signal, so a pid
		// that was reused is never signalled.
		alive, err := running(c)
		if err != nil {
			return fmt.Errorf("pid %d: %w", c.PID, err)
		}
		if !alive {
			break
		}
		if err := syscall.Kill(-c.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal process group %d: %w", c.PID, err)
		}
		in.logf("gpuproc: sent %s to process group %d", unix.SignalName(sig), c.PID)
		wait := in.opts.termGrace
		if sig == syscall.SIGKILL {
			wait = 0 // until gone or ctx ends
		}
		gone, err := waitGone(ctx, c, mine, wait)
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
			return fmt.Errorf("pid %d: waiting for it to be reaped: %w", c.PID, ctx.Err())
		}
	}
	return nil
}

// waitGone waits until the child no longer runs, for at most limit (0:
// no limit but ctx), and reports whether it is gone.
func waitGone(ctx context.Context, c childRecord, mine *proc, limit time.Duration) (bool, error) {
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
		alive, err := running(c)
		if err != nil {
			return false, fmt.Errorf("pid %d: %w", c.PID, err)
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
			return false, fmt.Errorf("pid %d: waiting for it to exit: %w", c.PID, ctx.Err())
		case <-tick.C:
		}
	}
}

// logTail returns the last lines written to the log from offset on,
// joined on one line.
func logTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const maxTail = 4 << 10
	if end, err := f.Seek(0, io.SeekEnd); err == nil && end-offset > maxTail {
		offset = end - maxTail
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTail))
	if err != nil {
		return ""
	}
	var lines []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, " | ")
}
