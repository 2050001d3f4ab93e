package workload

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuchaos/gpuchaos/internal/gputools/launch"
	"github.com/gpuchaos/gpuchaos/internal/node/exposition"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// Defaults of Options' zero values.
const (
	// DefaultPython is Debian's interpreter, the one its python3-torch
	// package installs torch for (a python3 earlier on PATH, from a
	// virtual environment or /usr/local, usually has no torch).
	DefaultPython = "/usr/bin/python3"
	// DefaultJob is the job name when Options.Job is empty.
	DefaultJob = "train"
	// DefaultGrace is how long stopped ranks get between SIGTERM and
	// SIGKILL.
	DefaultGrace = 5 * time.Second
)

// Environment variables the supervisor sets on every rank. RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT are
// torchrun's; the GPUCHAOS_ ones are the contract with fault injectors
// (see the package doc).
const (
	EnvJob     = "GPUCHAOS_JOB"
	EnvRun     = "GPUCHAOS_RUN"
	EnvRestart = "GPUCHAOS_RESTART"
	EnvRank    = "RANK"
)

// ErrRestartsExhausted is returned by Run when the group failed once more
// after Options.MaxRestarts restarts.
var ErrRestartsExhausted = errors.New("restarts exhausted")

// Options say what Run starts. The zero value of every field but Ranks
// and Args means a documented default.
type Options struct {
	// Ranks is the number of rank processes (WORLD_SIZE); at least 1.
	Ranks int
	// Python is the interpreter; empty means DefaultPython.
	Python string
	// Script is the training script's path; empty means the embedded one
	// (Script), written to a temporary directory for the run.
	Script string
	// Args are the script's arguments (Train.Args builds them).
	Args []string
	// Job names the job: GPUCHAOS_JOB and the job label of the metrics.
	// Empty means DefaultJob.
	Job string
	// RunID is GPUCHAOS_RUN; empty means a random one.
	RunID string
	// MaxRestarts is how many times a failed group is restarted; 0 means
	// never.
	MaxRestarts int
	// RestartDelay is the pause between stopping a failed group and
	// starting the next; 0 restarts at once.
	RestartDelay time.Duration
	// Grace is the time between SIGTERM and SIGKILL when the supervisor
	// stops a group; 0 means DefaultGrace.
	Grace time.Duration
	// Env is laid over this process's environment for every rank
	// (KEY=VALUE, as launch.Overlay takes it); the rendezvous variables
	// above are laid over that.
	Env []string
	// Output receives every line the ranks print, stdout and stderr, each
	// prefixed with "[rank R] ". It is written from several goroutines,
	// one line per Write, under a lock. Nil discards the output.
	Output io.Writer
	// Events receives the supervisor's events as JSON lines (Event). Nil
	// means none.
	Events io.Writer
	// MetricsAddr is where the supervisor serves /metrics
	// (gpuchaos_job_restarts_total, gpuchaos_job_up); empty means nowhere.
	MetricsAddr string
	// Logger logs what the supervisor does; nil means no logging.
	Logger *slog.Logger
	// Started, when not nil, is called with the attempt number and the
	// ranks' process ids once every rank of an attempt has started.
	Started func(attempt int, pids []int)
}

// Event is one line of the events log. Times are the supervisor's clock,
// so the gap between a rank's "exit" and the next "start" is the time to
// restart.
type Event struct {
	// Time is when it happened.
	Time time.Time `json:"time"`
	// Event is "start" (a rank started), "exit" (a rank ended), "stop"
	// (the supervisor stops the group), "restart" (a new attempt follows)
	// or "end" (Run returns).
	Event string `json:"event"`
	// Job and Run are the job name and run id.
	Job string `json:"job"`
	Run string `json:"run"`
	// Attempt counts groups started, from 0.
	Attempt int `json:"attempt"`
	// Rank and Pid are set for "start" and "exit".
	Rank *int `json:"rank,omitempty"`
	Pid  int  `json:"pid,omitempty"`
	// MasterPort is the attempt's rendezvous port, on "start".
	MasterPort int `json:"master_port,omitempty"`
	// Code is the exit status on "exit": the process's own, or 128+N
	// when signal N killed it.
	Code *int `json:"code,omitempty"`
	// Signal names the signal that killed the rank, on "exit".
	Signal string `json:"signal,omitempty"`
	// Stopped is true on "exit" when the supervisor had signalled the rank.
	Stopped bool `json:"stopped,omitempty"`
	// Restarts is the restart count, on "restart" and "end".
	Restarts int `json:"restarts,omitempty"`
	// Reason says why, on "stop", "restart" and "end".
	Reason string `json:"reason,omitempty"`
}

// Exit is how one rank process ended.
type Exit struct {
	// Rank and Pid name the process.
	Rank, Pid int
	// Code is its exit status, 128+N when signal N killed it.
	Code int
	// Signal is the signal that killed it, or 0.
	Signal syscall.Signal
	// Stopped is true when the supervisor had signalled it first.
	Stopped bool
	// Time is when the supervisor saw it end.
	Time time.Time
}

// Failed reports whether the exit fails the group: a non-zero status or a
// death by signal that the supervisor did not send.
func (e Exit) Failed() bool { return !e.Stopped && (e.Code != 0 || e.Signal != 0) }

// String words the exit: "rank 1 killed by signal 9 (killed)".
func (e Exit) String() string {
	if e.Signal != 0 {
		return fmt.Sprintf("rank %d killed by signal %d (%s)", e.Rank, int(e.Signal), e.Signal)
	}
	return fmt.Sprintf("rank %d exited with status %d", e.Rank, e.Code)
}

// Attempt is one start of the whole group.
type Attempt struct {
	// Number counts attempts from 0.
	Number int
	// MasterPort was its rendezvous port.
	MasterPort int
	// Start is when its first rank started, End when its last ended.
	Start, End time.Time
	// Exits holds the ranks' endings in the order seen.
	Exits []Exit
}

// Result is what Run did.
type Result struct {
	// Job and RunID are the values the ranks saw.
	Job, RunID string
	// Restarts counts restarts (attempts after the first).
	Restarts int
	// Attempts lists every group started.
	Attempts []Attempt
}

// supervisor is one Run's state.
type supervisor struct {
	o      Options
	python string
	script string
	grace  time.Duration
	log    *slog.Logger

	outMu sync.Mutex // serialises Output and Events writes

	mu       sync.Mutex // guards restarts and up, read by /metrics
	restarts int
	up       bool
}

// Run starts o.Ranks copies of the training script as one data-parallel
// group and keeps it running the way an elastic launcher does: when any
// rank exits non-zero or dies of a signal, it stops the others (SIGTERM,
// SIGKILL after the grace) and starts the whole group again with a new
// rendezvous port, up to o.MaxRestarts times. The ranks resume from their
// newest valid checkpoint by themselves.
//
// Run returns when every rank of an attempt has exited 0 (nil error), when
// the group fails with no restarts left (ErrRestartsExhausted), when a rank
// cannot be started, or when ctx ends (ctx's error, after stopping the
// group). In every case no rank is left running: each is in its own
// process group, which Run signals, and each carries SIGKILL as its
// parent-death signal, so even a supervisor killed outright takes its
// ranks along.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Ranks < 1 {
		return Result{}, fmt.Errorf("workload: %d ranks; need at least 1", o.Ranks)
	}
	if o.MaxRestarts < 0 {
		return Result{}, fmt.Errorf("workload: max restarts %d is negative", o.MaxRestarts)
	}
	s := &supervisor{o: o, python: o.Python, script: o.Script, grace: o.Grace, log: o.Logger}
	if s.python == "" {
		s.python = DefaultPython
	}
	if s.grace == 0 {
		s.grace = DefaultGrace
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.o.Job == "" {
		s.o.Job = DefaultJob
	}
	if s.o.RunID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		s.o.RunID = hex.EncodeToString(b[:])
	}
	res := Result{Job: s.o.Job, RunID: s.o.RunID}
	if s.script == "" {
		path, cleanup, err := writeScript()
		if err != nil {
			return res, err
		}
		defer cleanup()
		s.script = path
	}
	if o.MetricsAddr != "" {
		stop, err := s.serveMetrics(o.MetricsAddr)
		if err != nil {
			return res, err
		}
		defer stop()
	}
	err := s.loop(ctx, &res)
	end := Event{Event: "end", Restarts: res.Restarts, Attempt: len(res.Attempts) - 1}
	if err != nil {
		end.Reason = err.Error()
	}
	s.event(end)
	return res, err
}

func (s *supervisor) loop(ctx context.Context, res *Result) error {
	for n := 0; ; n++ {
		if ctx.Err() != nil {
			return fmt.Errorf("workload: stopped: %w", ctx.Err())
		}
		port, err := freePort()
		if err != nil {
			return fmt.Errorf("workload: attempt %d: %w", n, err)
		}
		att, cause, err := s.attempt(ctx, n, port)
		res.Attempts = append(res.Attempts, att)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("workload: stopped: %w", ctx.Err())
		}
		if cause == nil {
			return nil
		}
		if res.Restarts >= s.o.MaxRestarts {
			return fmt.Errorf("workload: %w after %d restarts: %s", ErrRestartsExhausted, res.Restarts, cause)
		}
		res.Restarts++
		s.mu.Lock()
		s.restarts = res.Restarts
		s.mu.Unlock()
		s.event(Event{Event: "restart", Attempt: n + 1, Restarts: res.Restarts, Reason: cause.String()})
		s.log.Info("restarting workload", "restarts", res.Restarts, "reason", cause.String())
		if s.o.RestartDelay > 0 {
			t := time.NewTimer(s.o.RestartDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("workload: stopped: %w", ctx.Err())
			case <-t.C:
			}
		}
	}
}

// rankProc is one started rank.
type rankProc struct {
	rank  int
	pid   int
	alive bool
	out   []*linePrefixer
}

// attempt runs one group until every rank has ended. cause is the first
// failing exit (nil when all exited 0 or the context ended); err is for
// ranks that could not be started.
func (s *supervisor) attempt(ctx context.Context, n, port int) (att Attempt, cause *Exit, err error) {
	att = Attempt{Number: n, MasterPort: port, Start: time.Now()}
	exits := make(chan Exit, s.o.Ranks)
	procs := make([]*rankProc, 0, s.o.Ranks)
	stopping := false
	var kill <-chan time.Time
	stopAll := func(sig syscall.Signal) {
		for _, p := range procs {
			if p.alive {
				_ = syscall.Kill(-p.pid, sig)
			}
		}
	}
	wait := func() {
		// Reap every started rank, whatever happened, so nothing outlives
		// the attempt.
		for alive := countAlive(procs); alive > 0; alive = countAlive(procs) {
			select {
			case e := <-exits:
				s.reaped(procs, &att, e, stopping)
			case <-kill:
				kill = nil
				stopAll(syscall.SIGKILL)
			}
		}
		s.setUp(false)
		att.End = time.Now()
	}

	for r := 0; r < s.o.Ranks; r++ {
		p, err := s.startRank(n, r, port, exits)
		if err != nil {
			stopping = true
			stopAll(syscall.SIGKILL)
			wait()
			return att, nil, fmt.Errorf("workload: attempt %d: start rank %d: %w", n, r, err)
		}
		procs = append(procs, p)
	}
	s.setUp(true)
	if s.o.Started != nil {
		pids := make([]int, len(procs))
		for i, p := range procs {
			pids[i] = p.pid
		}
		s.o.Started(n, pids)
	}

	stop := func(reason string) {
		stopping = true
		s.setUp(false)
		s.event(Event{Event: "stop", Attempt: n, Reason: reason})
		stopAll(syscall.SIGTERM)
		kill = time.After(s.grace)
	}
	done := ctx.Done()
	for countAlive(procs) > 0 && !stopping {
		select {
		case e := <-exits:
			e = s.reaped(procs, &att, e, false)
			if e.Failed() && cause == nil {
				cause = &e
				stop(e.String())
			}
		case <-done:
			done = nil
			stop("context ended: " + ctx.Err().Error())
		}
	}
	wait()
	return att, cause, nil
}

func countAlive(procs []*rankProc) int {
	n := 0
	for _, p := range procs {
		if p.alive {
			n++
		}
	}
	return n
}

// reaped records a rank's exit and kills what is left of its process
// group (children it started), so none outlives it.
func (s *supervisor) reaped(procs []*rankProc, att *Attempt, e Exit, stopping bool) Exit {
	for _, p := range procs {
		if p.rank == e.Rank && p.alive {
			p.alive = false
			// The group's id stays reserved while any member lives, so
			// this cannot reach an unrelated process.
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			// SIGKILL is delivered at once but a process takes a moment
			// to die; wait (briefly) so that nothing of the group runs
			// once its exit is recorded.
			for deadline := time.Now().Add(5 * time.Second); procfind.GroupLive(p.pid) && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			for _, w := range p.out {
				w.flush()
			}
		}
	}
	e.Stopped = e.Stopped || stopping
	att.Exits = append(att.Exits, e)
	code := e.Code
	ev := Event{Event: "exit", Attempt: att.Number, Rank: &e.Rank, Pid: e.Pid, Code: &code, Stopped: e.Stopped}
	if e.Signal != 0 {
		ev.Signal = signalName(e.Signal)
	}
	s.event(ev)
	s.log.Info("rank ended", "rank", e.Rank, "pid", e.Pid, "code", e.Code, "signal", int(e.Signal), "stopped", e.Stopped)
	return e
}

func (s *supervisor) startRank(attempt, rank, port int, exits chan<- Exit) (*rankProc, error) {
	env, err := launch.Overlay(os.Environ(), s.o.Env)
	if err != nil {
		return nil, err
	}
	env, err = launch.Overlay(env, []string{
		EnvRank + "=" + strconv.Itoa(rank),
		"LOCAL_RANK=" + strconv.Itoa(rank),
		"WORLD_SIZE=" + strconv.Itoa(s.o.Ranks),
		"LOCAL_WORLD_SIZE=" + strconv.Itoa(s.o.Ranks),
		"GROUP_RANK=0",
		"MASTER_ADDR=127.0.0.1",
		"MASTER_PORT=" + strconv.Itoa(port),
		EnvJob + "=" + s.o.Job,
		EnvRun + "=" + s.o.RunID,
		EnvRestart + "=" + strconv.Itoa(attempt),
		"PYTHONUNBUFFERED=1",
	})
	if err != nil {
		return nil, err
	}
	args := append([]string{s.script}, s.o.Args...)
	cmd := exec.Command(s.python, args...)
	cmd.Env = env
	p := &rankProc{rank: rank, alive: true}
	if s.o.Output != nil {
		stdout := &linePrefixer{mu: &s.outMu, w: s.o.Output, prefix: fmt.Sprintf("[rank %d] ", rank)}
		stderr := &linePrefixer{mu: &s.outMu, w: s.o.Output, prefix: fmt.Sprintf("[rank %d] ", rank)}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		p.out = []*linePrefixer{stdout, stderr}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Output copying could otherwise wait forever on a pipe a leftover
	// child holds open.
	cmd.WaitDelay = time.Second

	started := make(chan error, 1)
	go func() {
		// Pdeathsig follows the thread that forked, not the process: keep
		// this goroutine on that thread until the rank is reaped, so the
		// runtime cannot retire it while the rank lives.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		exits <- exitOf(rank, cmd.Process.Pid, cmd.ProcessState)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	p.pid = cmd.Process.Pid
	s.event(Event{Event: "start", Attempt: attempt, Rank: &rank, Pid: p.pid, MasterPort: port})
	return p, nil
}

func exitOf(rank, pid int, ps *os.ProcessState) Exit {
	e := Exit{Rank: rank, Pid: pid, Time: time.Now(), Code: -1}
	if ps == nil {
		return e
	}
	e.Code = ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.Signal = ws.Signal()
		e.Code = 128 + int(e.Signal)
	}
	return e
}

func signalName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT",
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS",
		syscall.SIGHUP: "SIGHUP", syscall.SIGXFSZ: "SIGXFSZ",
	}
	if n, ok := names[sig]; ok {
		return n
	}
	return "signal " + strconv.Itoa(int(sig))
}

func (s *supervisor) setUp(up bool) {
	s.mu.Lock()
	s.up = up
	s.mu.Unlock()
}

func (s *supervisor) event(e Event) {
	if s.o.Events == nil {
		return
	}
	e.Time = time.Now()
	e.Job, e.Run = s.o.Job, s.o.RunID
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	_, _ = s.o.Events.Write(append(b, '\n'))
}

// freePort asks the kernel for a free TCP port on the loopback. Another
// process could take it before rank 0 binds it; a rendezvous that fails
// that way fails the attempt, and the restart picks another port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free rendezvous port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *supervisor) serveMetrics(addr string) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("workload: serve metrics: %w", err)
	}
	h := exposition.Handler(exposition.Options{Gather: func() []*dto.MetricFamily {
		s.mu.Lock()
		restarts, up := s.restarts, s.up
		s.mu.Unlock()
		up01 := 0.0
		if up {
			up01 = 1
		}
		var b exposition.Builder
		b.Family("gpuchaos_job_restarts_total", "Restarts of the job's rank group by the supervisor.", exposition.Counter)
		b.AddKV(float64(restarts), "job", s.o.Job)
		b.Family("gpuchaos_job_up", "1 while every rank of the job runs, 0 while it restarts or has ended.", exposition.Gauge)
		b.AddKV(up01, "job", s.o.Job)
		return b.Families()
	}})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}

// linePrefixer writes whole lines to w, each with prefix, under mu, so the
// lines of several ranks interleave but never mix.
type linePrefixer struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (l *linePrefixer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := make([]byte, 0, len(l.prefix)+i+1)
		line = append(append(line, l.prefix...), l.buf[:i+1]...)
		// A failing sink loses lines; it must not fail the rank's pipe.
		_, _ = l.w.Write(line)
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

// flush writes a last line that had no newline.
func (l *linePrefixer) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		_, _ = l.w.Write(append(append([]byte(l.prefix), l.buf...), '\n'))
		l.buf = nil
	}
}
