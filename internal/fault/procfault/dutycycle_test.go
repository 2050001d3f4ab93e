package procfault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// paceValues are the straggler's parameters for slowdown s.
func paceValues(t testing.TB, s float64) map[string]string {
	t.Helper()
	return map[string]string{"slowdown": strconv.FormatFloat(s, 'g', -1, 64)}
}

// record reads and checks key's record.
func record(t testing.TB, in *Injector, key string) state {
	t.Helper()
	b, err := in.dir.Read(key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseState(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// seenStopped samples the rank's state every millisecond for d and
// reports whether it was ever stopped.
func (r *rank) seenStopped(t *testing.T, d time.Duration) bool {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		st, err := procfind.ReadStat(r.proc.PID)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == 'T' {
			return true
		}
	}
	return false
}

// everStopped is seenStopped for use off the test's goroutine: a process
// that cannot be read counts as never stopped.
func everStopped(pid int, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if st, err := procfind.ReadStat(pid); err == nil && st.State == 'T' {
			return true
		}
	}
	return false
}

// stoppedFraction samples pid's state every half millisecond for d and
// returns the fraction of samples that found it stopped.
func stoppedFraction(pid int, d time.Duration) float64 {
	var n, stopped int
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Microsecond) {
		st, err := procfind.ReadStat(pid)
		if err != nil {
			continue
		}
		n++
		if st.State == 'T' {
			stopped++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(stopped) / float64(n)
}

// assertRunning checks that the rank is never seen stopped over a few
// periods and makes progress.
func (r *rank) assertRunning(t *testing.T) {
	t.Helper()
	// A SIGCONT shows in /proc within microseconds; waiting a little first
	// lets a continue that is on its way arrive, and the sampling that
	// follows spans three duty periods, so a pacer still at work is seen.
	time.Sleep(20 * time.Millisecond)
	if r.seenStopped(t, 3*DutyPeriod) {
		t.Fatalf("rank pid %d stopped", r.proc.PID)
	}
	if rate := r.rate(t, 200*time.Millisecond); rate <= 0 {
		t.Fatalf("rank pid %d made no progress", r.proc.PID)
	}
}

// pacerArgs returns the flags of the pacer the key's record names, as
// /proc shows its command line.
func pacerArgs(t testing.TB, in *Injector, key string) map[string]string {
	t.Helper()
	st := record(t, in, key)
	if st.Pacer == nil {
		t.Fatalf("record of %s names no pacer", key)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", st.Pacer.PID))
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{}
	for _, a := range strings.Split(strings.TrimRight(string(b), "\x00"), "\x00") {
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "--") {
			args[k] = v
		}
	}
	return args
}

// TestDutyCycleSlowsTheRank checks the schedule the pacer was given and
// a generous bound on what it did. Given: --share 1/slowdown of each
// --period DutyPeriod (run's deadlines turn them into stops and
// continues). Done: sampled from /proc over 20 periods, the rank is
// stopped for more than a fifth of what the slowdown asks (it runs less
// than 1/1.2 of the time for a slowdown of 2, 1/1.6 for 4) and runs for
// more than a quarter of its share; recovered, it runs and steps. Two
// ranks: one CPU-bound, and one whose steps wait 1 ms as a rank waits on
// its GPU (the case cgroup-cpu cannot slow). How far the step rate falls
// moves with the machine's other load, which takes CPU from the unpaced
// rank too; BenchmarkDutyCycleSlowdown reports it.
func TestDutyCycleSlowsTheRank(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		name string
		env  []string
	}{
		{name: "cpu-bound"},
		{name: "waiting", env: []string{waitEnv + "=1"}},
	}
	for _, kind := range kinds {
		for _, slowdown := range []float64{2, 4} {
			t.Run(fmt.Sprintf("%s/%v", kind.name, slowdown), func(t *testing.T) {
				t.Parallel()
				job := jobName(t)
				r := startRank(t, job, 0, false, kind.env...)
				in := newInjectorOf(t, idStraggler, mechDutyCycle, "")
				if err := in.Inject(context.Background(), "k", ref(job, 0), faulttest.Values(t, idStraggler, paceValues(t, slowdown))); err != nil {
					t.Fatal(err)
				}
				share := 1 / slowdown
				args := pacerArgs(t, in, "k")
				if got, err := strconv.ParseFloat(args["--share"], 64); err != nil || math.Abs(got-share) > 1e-9 {
					t.Errorf("pacer --share=%q, want %v", args["--share"], share)
				}
				if got := args["--period"]; got != DutyPeriod.String() {
					t.Errorf("pacer --period=%q, want %s", got, DutyPeriod)
				}
				running := 1 - stoppedFraction(r.proc.PID, 20*DutyPeriod)
				if err := in.Recover(context.Background(), "k"); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s rank, slowdown %v: running %.3f of the time paced (share %.3f)", kind.name, slowdown, running, share)
				if ceiling := 1 / (1 + (slowdown-1)/5); !(running < ceiling) {
					t.Errorf("paced, the rank ran %.3f of the time, want under %.3f (share %.3f)", running, ceiling, share)
				}
				if floor := share / 4; !(running > floor) {
					t.Errorf("paced, the rank ran %.3f of the time, want over %.3f (share %.3f)", running, floor, share)
				}
				r.assertRunning(t)
			})
		}
	}
}

// BenchmarkDutyCycleSlowdown reports how many times slower the paced rank
// steps than unpaced (slowdown), that over the slowdown asked (of-asked:
// 1 is exact), the share of time /proc shows it running (running), and
// the CPUs the rank had unpaced (cpus-unpaced: under 1, other load took
// some, and a CPU-bound rank then slows less than asked).
// Unpaced is the median of five 600 ms windows (six duty periods each, so
// every window holds the same running time whatever its phase); each
// iteration is one such window paced.
func BenchmarkDutyCycleSlowdown(b *testing.B) {
	kinds := []struct {
		name string
		env  []string
	}{
		{name: "cpu-bound"},
		{name: "waiting", env: []string{waitEnv + "=1"}},
	}
	for _, kind := range kinds {
		for _, slowdown := range []float64{2, 4} {
			b.Run(fmt.Sprintf("%s/%v", kind.name, slowdown), func(b *testing.B) {
				job := jobName(b)
				r := startRank(b, job, 0, false, kind.env...)
				before := r.measure(b, 5, 600*time.Millisecond)
				in := newInjectorOf(b, idStraggler, mechDutyCycle, "")
				if err := in.Inject(context.Background(), "k", ref(job, 0), faulttest.Values(b, idStraggler, paceValues(b, slowdown))); err != nil {
					b.Fatal(err)
				}
				var rates, running []float64
				for b.Loop() {
					stopped := make(chan float64, 1)
					go func() { stopped <- stoppedFraction(r.proc.PID, 600*time.Millisecond) }()
					rates = append(rates, r.rate(b, 600*time.Millisecond))
					running = append(running, 1-<-stopped)
				}
				b.StopTimer()
				if err := in.Recover(context.Background(), "k"); err != nil {
					b.Fatal(err)
				}
				slices.Sort(rates)
				slices.Sort(running)
				ratio := before.rate / rates[len(rates)/2]
				b.ReportMetric(ratio, "slowdown")
				b.ReportMetric(ratio/slowdown, "of-asked")
				b.ReportMetric(running[len(running)/2], "running")
				b.ReportMetric(before.cpus, "cpus-unpaced")
			})
		}
	}
}

// TestDutyCycleNeverLeavesTheRankStopped ends the pacing in every way it
// can end and checks that the rank runs afterwards.
func TestDutyCycleNeverLeavesTheRankStopped(t *testing.T) {
	t.Parallel()
	// killMidStop SIGKILLs the pacer once the rank shows stopped, so that
	// nothing but a recovery can continue it.
	killMidStop := func(t *testing.T, r *rank, pacer procfind.Proc) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, "the rank to show stopped", func() bool { return r.state(t) == 'T' })
		if err := pacer.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := pacer.WaitGone(context.Background(), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		// Not asserted: the pacer may have sent its SIGCONT between the
		// look and the kill, which the slowdown of 10 makes rare.
		t.Logf("rank state after the pacer was killed: %c", r.state(t))
	}
	tests := []struct {
		name string
		// helper injects from a process of its own, which end may
		// SIGKILL; else this process injects.
		helper bool
		// end ends the pacing; in is the injector that recovers after it.
		end func(t *testing.T, r *rank, pacer procfind.Proc, helper func())
		// recover says whether a recovery follows end.
		recover bool
	}{
		{name: "recover", recover: true},
		{name: "pacer SIGTERMed", end: func(t *testing.T, r *rank, pacer procfind.Proc, _ func()) {
			if err := pacer.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := pacer.WaitGone(context.Background(), 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "pacer SIGINTed", end: func(t *testing.T, r *rank, pacer procfind.Proc, _ func()) {
			if err := pacer.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			if err := pacer.WaitGone(context.Background(), 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "pacer SIGKILLed mid-stop", recover: true, end: func(t *testing.T, r *rank, pacer procfind.Proc, _ func()) {
			killMidStop(t, r, pacer)
		}},
		{name: "injector SIGKILLed", helper: true, recover: true, end: func(t *testing.T, r *rank, pacer procfind.Proc, kill func()) {
			kill()
			// The pacer's Pdeathsig is SIGTERM: it continues the rank and
			// exits by itself, before anyone recovers.
			if err := pacer.WaitGone(context.Background(), 5*time.Second); err != nil {
				t.Fatalf("the pacer outlived its injector: %v", err)
			}
			r.assertRunning(t)
		}},
		{name: "pacer SIGKILLed mid-stop, then the injector", helper: true, recover: true, end: func(t *testing.T, r *rank, pacer procfind.Proc, kill func()) {
			killMidStop(t, r, pacer)
			kill()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := jobName(t)
			r := startRank(t, job, 0, false)
			dir := t.TempDir()
			var kill func()
			if tc.helper {
				h := runHelperOf(t, idStraggler, mechDutyCycle, dir, "k", r.proc.PID)
				kill = func() {
					_ = h.Process.Signal(syscall.SIGKILL)
					_ = h.Wait()
				}
				t.Cleanup(kill)
			} else {
				in := newInjectorOf(t, idStraggler, mechDutyCycle, dir)
				if err := in.Inject(context.Background(), "k", ref(job, 0), faulttest.Values(t, idStraggler, paceValues(t, 10))); err != nil {
					t.Fatal(err)
				}
			}
			in := newInjectorOf(t, idStraggler, mechDutyCycle, dir)
			st := record(t, in, "k")
			if st.Pacer == nil {
				t.Fatal("record names no pacer after Inject")
			}
			t.Cleanup(func() { _ = st.Pacer.Signal(syscall.SIGKILL) })
			if !r.seenStopped(t, 3*DutyPeriod) {
				t.Fatal("the rank was never stopped while paced")
			}
			if tc.end != nil {
				tc.end(t, r, *st.Pacer, kill)
			}
			if tc.recover {
				if err := in.Recover(context.Background(), "k"); err != nil {
					t.Fatal(err)
				}
				if ok, _ := in.dir.Exists("k"); ok {
					t.Error("record kept after recovery")
				}
			}
			if ok, _ := st.Pacer.Alive(); ok && tc.recover {
				t.Error("the pacer outlived the recovery")
			}
			r.assertRunning(t)
		})
	}
}

// TestPacerEndsByItself runs the pacer as the hidden command does, for a
// short --for, and checks that it returns by itself with the rank running.
func TestPacerEndsByItself(t *testing.T) {
	t.Parallel()
	r := startRank(t, jobName(t), 0, false)
	var stderr bytes.Buffer
	done := make(chan int, 1)
	start := time.Now()
	go func() {
		done <- RunPace(context.Background(), []string{"--pid=" + strconv.Itoa(r.proc.PID),
			"--start-ticks=" + strconv.FormatUint(r.proc.StartTicks, 10), "--share=0.25", "--period=50ms", "--for=700ms"}, &stderr)
	}()
	if !r.seenStopped(t, 500*time.Millisecond) {
		t.Error("the rank was never stopped while paced")
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("RunPace = %d, stderr %q", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pacer did not end by itself")
	}
	if took := time.Since(start); took < 700*time.Millisecond {
		t.Errorf("the pacer ended after %s, before its --for", took)
	}
	r.assertRunning(t)
}

// TestPaceFlags checks that the pacer refuses flags that could make it
// signal something other than one identified rank.
func TestPaceFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no pid", []string{"--start-ticks=5", "--share=0.5", "--for=1s"}, "not a process"},
		{"pid 1", []string{"--pid=1", "--start-ticks=5", "--share=0.5", "--for=1s"}, "not a process"},
		{"a group", []string{"--pid=-100", "--start-ticks=5", "--share=0.5", "--for=1s"}, "not a process"},
		{"no start time", []string{"--pid=100", "--share=0.5", "--for=1s"}, "not a process"},
		{"share 0", []string{"--pid=100", "--start-ticks=5", "--share=0", "--for=1s"}, "--share"},
		{"share over 1", []string{"--pid=100", "--start-ticks=5", "--share=1.5", "--for=1s"}, "--share"},
		{"share NaN", []string{"--pid=100", "--start-ticks=5", "--share=NaN", "--for=1s"}, "--share"},
		{"short period", []string{"--pid=100", "--start-ticks=5", "--share=0.5", "--period=1ms", "--for=1s"}, "--period"},
		{"no duration", []string{"--pid=100", "--start-ticks=5", "--share=0.5"}, "--for"},
		{"stdout as ready fd", []string{"--pid=100", "--start-ticks=5", "--share=0.5", "--for=1s", "--ready-fd=1"}, "--ready-fd"},
		{"stray argument", []string{"--pid=100", "--start-ticks=5", "--share=0.5", "--for=1s", "x"}, "unexpected"},
		{"unknown flag", []string{"--pid=100", "--start-ticks=5", "--share=0.5", "--for=1s", "--group"}, "not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			if code := RunPace(context.Background(), tc.args, &stderr); code != paceBadArgs || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Fatalf("RunPace = %d, stderr %q; want %d and %q", code, stderr.String(), paceBadArgs, tc.wantErr)
			}
		})
	}
}

// TestDutyCycleNeverTouchesARecycledPid gives the pacer and the recovery
// a rank identity whose start time differs from the process's, which is
// what a pid the kernel reused looks like: neither may stop or continue
// the process.
func TestDutyCycleNeverTouchesARecycledPid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// stopped: the bystander was stopped by someone else, so a SIGCONT
		// would show; else it runs, so a SIGSTOP would.
		stopped bool
		run     func(t *testing.T, stale procfind.Proc)
	}{
		{name: "pacer on a running bystander", run: func(t *testing.T, stale procfind.Proc) {
			var stderr bytes.Buffer
			// Without a ready descriptor nobody waits for a first stop, so a
			// rank gone from the start ends the pacer like one gone later.
			if code := RunPace(context.Background(), []string{"--pid=" + strconv.Itoa(stale.PID),
				"--start-ticks=" + strconv.FormatUint(stale.StartTicks, 10), "--share=0.1", "--for=500ms"}, &stderr); code != 0 {
				t.Errorf("RunPace = %d, stderr %q", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), "exited") {
				t.Errorf("stderr %q does not say the rank is gone", stderr.String())
			}
		}},
		{name: "pacer on a stopped bystander", stopped: true, run: func(t *testing.T, stale procfind.Proc) {
			var stderr bytes.Buffer
			if code := RunPace(context.Background(), []string{"--pid=" + strconv.Itoa(stale.PID),
				"--start-ticks=" + strconv.FormatUint(stale.StartTicks, 10), "--share=0.5", "--for=300ms"}, &stderr); code != 0 {
				t.Errorf("RunPace = %d, stderr %q", code, stderr.String())
			}
		}},
		{name: "recovery of a stopped bystander", stopped: true, run: func(t *testing.T, stale procfind.Proc) {
			in := newInjectorOf(t, idStraggler, mechDutyCycle, "")
			if err := in.dir.Write("k", state{Version: stateVersion, Key: "k", Fault: idStraggler, Mechanism: mechDutyCycle, Proc: stale, Slowdown: 2}); err != nil {
				t.Fatal(err)
			}
			if err := in.Recover(context.Background(), "k"); !errors.Is(err, fault.ErrTargetGone) {
				t.Fatalf("Recover = %v, want ErrTargetGone", err)
			}
			if ok, _ := in.dir.Exists("k"); ok {
				t.Error("record kept after recovery")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startRank(t, jobName(t), 0, false)
			if tc.stopped {
				if err := syscall.Kill(r.proc.PID, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				testutil.Eventually(t, 10*time.Second, "the rank to show stopped", func() bool { return r.state(t) == 'T' })
			}
			stale := r.proc
			stale.StartTicks--
			seen := make(chan bool, 1)
			go func() { seen <- everStopped(r.proc.PID, 300*time.Millisecond) }()
			tc.run(t, stale)
			if <-seen && !tc.stopped {
				t.Error("the recycled pid was stopped")
			}
			time.Sleep(50 * time.Millisecond)
			if s := r.state(t); (s == 'T') != tc.stopped {
				t.Errorf("bystander in state %c, want stopped %v", s, tc.stopped)
			}
		})
	}
}

// TestDutyCycleInjectRefusals checks the inputs Inject refuses, and that
// a refused inject leaves no record and no pacer.
func TestDutyCycleInjectRefusals(t *testing.T) {
	t.Parallel()
	job := jobName(t)
	r := startRank(t, job, 0, false)
	tests := []struct {
		name    string
		raw     map[string]string
		wantErr string
	}{
		{"no such rank", map[string]string{"slowdown": "2"}, procfind.ErrNoRank.Error()},
		{"pid of a process gone", map[string]string{"slowdown": "2", "pid": "4194304"}, "pid 4194304"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := newInjectorOf(t, idStraggler, mechDutyCycle, "")
			err := in.Inject(context.Background(), "k", ref(job, 7), faulttest.Values(t, idStraggler, tc.raw))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Inject = %v, want an error with %q", err, tc.wantErr)
			}
			if ok, _ := in.dir.Exists("k"); ok {
				t.Error("a refused inject left a record")
			}
		})
	}
	if r.seenStopped(t, 2*DutyPeriod) {
		t.Error("a refused inject stopped the rank")
	}
}
