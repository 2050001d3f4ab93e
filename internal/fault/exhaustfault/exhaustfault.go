package exhaustfault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/childproc"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
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
	// dir holds the state files and serialises the calls for one key.
	dir *statedir.Dir

	// children are the children this instance started and has not
	// reaped yet.
	children childproc.Group
	logMu    sync.Mutex
}

// proc is a child this instance started.
type proc struct {
	rec childRecord
	c   *childproc.Child
}

// New returns the injector for mechanism m of fault f: burn for
// exhaustion.sm-burn, exhaustion.thermal-soak and exhaustion.noisy-neighbour,
// cuda-malloc for exhaustion.vram, cuda-memcpy for exhaustion.pcie.
func New(f *catalog.Fault, m *catalog.Mechanism, o Options) (fault.Injector, error) {
	if f == nil || m == nil {
		return nil, errors.New("exhaustfault: a fault and a mechanism are required")
	}
	entries := fault.Registry(Entries())
	if !slices.Contains(entries.FaultIDs(), f.ID) {
		return nil, fmt.Errorf("exhaustfault: fault %s is not run as a child process", f.ID)
	}
	if err := fault.CheckMechanism("exhaustfault", f, m, entries); err != nil {
		return nil, err
	}
	if o.StateDir == "" {
		return nil, fmt.Errorf("exhaustfault: %s needs a state directory", f.ID)
	}
	dir, err := openState(o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("exhaustfault: %w", err)
	}
	if o.Exec == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("exhaustfault: find the gpuchaos binary: %w", err)
		}
		o.Exec = exe
	}
	if st, err := os.Stat(o.Exec); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("exhaustfault: %s is not an executable gpuchaos binary", o.Exec)
	}
	if o.readyTimeout == 0 {
		o.readyTimeout = ReadyTimeout
	}
	if o.termGrace == 0 {
		o.termGrace = TermGrace
	}
	return &Injector{fault: f.ID, opts: o, dir: dir}, nil
}

// Inject starts the fault's children on the GPU ref names and returns
// once each has reported ready. Injecting a key that has a state file is a
// no-op, also when its children have since ended on their own. Each child
// runs until Recover, until the time fault.HoldUntil(ctx) gives plus
// HoldMargin (DefaultHold without one), or until this process dies,
// whichever comes first. On error nothing is left running and no state
// file remains, unless stopping a child failed too; the error then says
// so and Recover retries.
func (in *Injector) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	argvs, err := commands(in.fault, ref.GPU, v, childDuration(ctx, time.Now()))
	if err == nil {
		err = in.dir.Inject(ctx, key, func() error { return in.inject(ctx, key, ref.GPU, argvs) })
	}
	if err != nil {
		return fmt.Errorf("inject %s on gpu %d: %w", in.fault, ref.GPU, err)
	}
	return nil
}

// inject records key and starts its children; the caller holds key's
// lock.
func (in *Injector) inject(ctx context.Context, key string, gpu int, argvs [][]string) error {
	logPath := in.logPath(key)
	st := state{Version: stateVersion, Key: key, Fault: in.fault, GPU: gpu, Created: time.Now().UTC()}
	// Recorded before anything starts: a crash from here on leaves a
	// state file, which the engine's recovery finds.
	if err := in.dir.Write(key, st); err != nil {
		return err
	}
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return in.abandon(ctx, key, nil, fmt.Errorf("open the log: %w", err))
	}
	defer log.Close()
	logStart, _ := log.Seek(0, io.SeekEnd)
	fail := func(procs []*proc, err error) error {
		if tail := logTail(logPath, logStart); tail != "" {
			err = fmt.Errorf("%w; log %s ends: %s", err, logPath, tail)
		}
		return in.abandon(ctx, key, procs, err)
	}
	var procs []*proc
	for _, argv := range argvs {
		p, err := in.start(argv, log, in.dir.Mark(key))
		if err != nil {
			return fail(procs, err)
		}
		procs = append(procs, p)
		st.Children = append(st.Children, p.rec)
		if err := in.dir.Write(key, st); err != nil {
			return fail(procs, err)
		}
		in.logf("exhaustfault: %s: started pid %d: %s", key, p.rec.PID, strings.Join(p.rec.Argv, " "))
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
func (in *Injector) abandon(ctx context.Context, key string, procs []*proc, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.opts.termGrace+abandonKillWait)
	defer cancel()
	var errs []error
	for _, p := range procs {
		if err := in.stop(ctx, p.rec); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := in.dir.Remove(key); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(cause, fmt.Errorf("clean up (Recover retries): %w", errors.Join(errs...)))
	}
	return cause
}

// Recover stops every child of the key that still runs (SIGTERM to its
// process group, SIGKILL after TermGrace), waits until each is gone, and
// removes the state file; the log stays. The children are those the state
// file records and every other process carrying the key's mark
// (childproc.Spec.Mark): a child started by an injector that was killed
// before it recorded the child is found by the mark alone, and stopped
// rather than left to a Pdeathsig that a child stuck in the driver may
// not heed for long. It works from the state file and /proc alone, so a
// fresh injector in a fresh process recovers what a crashed one started.
// No state file, or children that already ended, is success. A process
// that reused a recorded pid is never signalled. When the search cannot
// look into every process that may be a child, the state file stays and
// the error wraps fault.ErrUnproven.
func (in *Injector) Recover(ctx context.Context, key string) error {
	err := statedir.Recover(in.dir, key, parseState, func(st state) error {
		for _, c := range st.Children {
			if err := in.stop(ctx, c); err != nil {
				return fmt.Errorf("gpu %d: %w", st.GPU, err)
			}
		}
		found, err := in.children.StopMarked(ctx, in.dir.Mark(key), in.opts.Exec, in.opts.termGrace, func(p procfind.Proc, sig syscall.Signal) {
			in.logf("exhaustfault: sent %s to unrecorded process group %d", unix.SignalName(sig), p.PID)
		})
		if err != nil {
			return fmt.Errorf("gpu %d: stop the children of %s: %w", st.GPU, key, err)
		}
		if len(found.Procs) > 0 {
			in.logf("exhaustfault: %s: %s", key, found)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recover %s: %w", in.fault, err)
	}
	return nil
}

// logPath is where the key's children write: beside its state file.
func (in *Injector) logPath(key string) string {
	return filepath.Join(in.dir.Path(), in.dir.Name(key)+".log")
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
func (in *Injector) start(argv []string, log *os.File, mark string) (*proc, error) {
	c, err := in.children.Start(childproc.Spec{Path: in.opts.Exec, Args: argv, Output: log,
		Env: childEnv(os.Environ(), in.opts.env), NoPdeathsig: in.opts.noPdeathsig, Mark: mark})
	if err != nil {
		return nil, err
	}
	rec := childRecord{PID: c.Proc.PID, StartTicks: c.Proc.StartTicks, Argv: append([]string{in.opts.Exec}, argv...)}
	return &proc{rec: rec, c: c}, nil
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
	defer p.c.Ready.Close()
	// ctx's own deadline is left to the AfterFunc below, which runs only
	// once ctx.Err is set, so the error says which bound ended the wait.
	if err := p.c.Ready.SetReadDeadline(time.Now().Add(in.opts.readyTimeout)); err != nil {
		return fmt.Errorf("pid %d: ready pipe: %w", p.rec.PID, err)
	}
	// A cancelled ctx moves the deadline to now, which ends the read.
	stop := context.AfterFunc(ctx, func() { _ = p.c.Ready.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var got []byte
	buf := make([]byte, 64)
	for !bytes.Contains(got, []byte("\n")) && len(got) < 64 {
		n, err := p.c.Ready.Read(buf)
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
	case <-p.c.Done():
		return fmt.Errorf("pid %d exited before it was ready: %v", p.rec.PID, p.c.Err())
	case <-time.After(time.Second):
		return fmt.Errorf("pid %d closed its ready pipe without writing", p.rec.PID)
	}
}

// stop ends one recorded child (SIGTERM to its process group, SIGKILL
// after TermGrace) and returns once it is gone.
func (in *Injector) stop(ctx context.Context, c childRecord) error {
	return in.children.Stop(ctx, c.id(), in.opts.termGrace, func(sig syscall.Signal) {
		in.logf("exhaustfault: sent %s to process group %d", unix.SignalName(sig), c.PID)
	})
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
