package procfault

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// jobName is unique per test, so parallel tests never find each other's
// ranks.
func jobName(t testing.TB) string {
	return fmt.Sprintf("procfault-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
}

func ref(job string, n int) inventory.Ref {
	return inventory.Ref{Kind: catalog.ScopeRank, Job: job, Rank: n}
}

func TestNewRefusesWhatItDoesNotImplement(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, fault, mech, dir string
	}{
		{"other package's fault", "checkpoint.fill-volume", "fallocate", t.TempDir()},
		{"other mechanism", idHang, "cgroup-freeze", t.TempDir()},
		{"mechanism the straggler does not declare", idStraggler, "cgroup-freeze", t.TempDir()},
		{"duty cycle of another fault", idHang, "duty-cycle", t.TempDir()},
		{"no state directory", idKill, "signal", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := catalog.Lookup(tc.fault)
			if _, err := New(f, f.Mechanism(tc.mech), Options{StateDir: tc.dir}); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

func TestKillRank(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		params   map[string]string
		ownGroup bool
		byPID    bool
		// wantSignal is the signal the rank must die of; 0 only checks
		// that it died (Go turns a SIGSEGV into a crash with exit 2).
		wantSignal syscall.Signal
		wantErr    string
	}{
		{name: "SIGKILL by job and rank", wantSignal: syscall.SIGKILL},
		{name: "SIGTERM", params: map[string]string{"signal": "SIGTERM"}, wantSignal: syscall.SIGTERM},
		{name: "SIGSEGV", params: map[string]string{"signal": "SIGSEGV"}},
		{name: "by pid", byPID: true, wantSignal: syscall.SIGKILL},
		{name: "group the rank leads", params: map[string]string{"group": "true"}, ownGroup: true, wantSignal: syscall.SIGKILL},
		{name: "group shared with the launcher", params: map[string]string{"group": "true"}, wantErr: "does not lead its process group"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := jobName(t)
			r := startRank(t, job, 1, tc.ownGroup)
			raw := map[string]string{}
			for k, v := range tc.params {
				raw[k] = v
			}
			rf := ref(job, 1)
			if tc.byPID {
				raw["pid"] = strconv.Itoa(r.proc.PID)
				rf = ref("", 0)
			}
			in := newInjector(t, idKill, "")
			err := in.Inject(context.Background(), "k", rf, faulttest.Values(t, idKill, raw))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Inject = %v, want an error with %q", err, tc.wantErr)
				}
				if ok, _ := in.dir.Exists("k"); ok {
					t.Error("a refused inject left a record")
				}
				if ok, _ := r.proc.Alive(); !ok {
					t.Error("a refused inject killed the rank")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var werr error
			select {
			case werr = <-r.done:
				r.done <- werr // for the cleanup
			case <-time.After(10 * time.Second):
				t.Fatal("the rank did not die")
			}
			ws := r.cmd.ProcessState.Sys().(syscall.WaitStatus)
			if tc.wantSignal != 0 && (!ws.Signaled() || ws.Signal() != tc.wantSignal) {
				t.Fatalf("rank ended with %v, want killed by %v", werr, tc.wantSignal)
			}
			b, err := in.dir.Read("k")
			if err != nil {
				t.Fatalf("no record of the kill: %v", err)
			}
			st, err := parseState(b)
			if err != nil || st.Proc != r.proc {
				t.Fatalf("record = %+v, %v; want process %+v", st, err, r.proc)
			}
			if err := in.Recover(context.Background(), "k"); err != nil {
				t.Fatalf("Recover = %v", err)
			}
		})
	}
}

func TestHangRankStopsAndContinues(t *testing.T) {
	t.Parallel()
	job := jobName(t)
	r := startRank(t, job, 0, false)
	in := newInjector(t, idHang, "")
	if err := in.Inject(context.Background(), "k", ref(job, 0), faulttest.Values(t, idHang, nil)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the rank to show stopped", func() bool { return r.state(t) == 'T' })
	if rate := r.rate(t, 300*time.Millisecond); rate != 0 {
		t.Errorf("hung rank ran %.0f steps/s", rate)
	}
	if err := in.Recover(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the rank to show running", func() bool { return r.state(t) != 'T' })
	if rate := r.rate(t, 300*time.Millisecond); rate <= 0 {
		t.Errorf("continued rank ran %.0f steps/s", rate)
	}
}

func TestHangRecoverNeverTouchesARecycledPid(t *testing.T) {
	t.Parallel()
	job := jobName(t)
	r := startRank(t, job, 0, false)
	// The bystander is stopped by someone else; a record naming its pid
	// with another start time is what a recycled pid looks like.
	if err := syscall.Kill(r.proc.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the rank to show stopped", func() bool { return r.state(t) == 'T' })
	in := newInjector(t, idHang, "")
	stale := r.proc
	stale.StartTicks--
	if err := in.dir.Write("k", state{Version: stateVersion, Key: "k", Fault: idHang, Proc: stale}); err != nil {
		t.Fatal(err)
	}
	if err := in.Recover(context.Background(), "k"); !errors.Is(err, fault.ErrTargetGone) {
		t.Fatalf("Recover = %v, want ErrTargetGone", err)
	}
	time.Sleep(100 * time.Millisecond)
	if s := r.state(t); s != 'T' {
		t.Fatalf("the recycled pid was continued: state %c", s)
	}
	if ok, _ := in.dir.Exists("k"); ok {
		t.Error("record kept after recovery")
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ id, mech string }{
		{idKill, mechSignal}, {idHang, mechSignal}, {idStraggler, mechCgroupCPU}, {idStraggler, mechDutyCycle},
	} {
		id := c.id
		t.Run(id+"/"+c.mech, func(t *testing.T) {
			t.Parallel()
			faulttest.Run(t, func(t *testing.T) faulttest.Env {
				job := jobName(t)
				r := startRank(t, job, 0, false)
				in := newInjectorOf(t, id, c.mech, "")
				var raw map[string]string
				if id == idStraggler {
					raw = map[string]string{"window": "100ms", "slowdown": "2"}
				}
				env := faulttest.Env{
					Injector: in,
					Ref:      ref(job, 0),
					Values:   faulttest.Values(t, id, raw),
					Vanish: func() {
						_ = r.cmd.Process.Kill()
						err := <-r.done
						r.done <- err
					},
				}
				switch id {
				case idKill:
					env.Count = func() int {
						if ok, _ := r.proc.Alive(); ok {
							return 0
						}
						return 1
					}
				case idHang:
					env.Applied = func(string) bool {
						st, err := r.proc.Stat()
						return err == nil && st.State == 'T'
					}
				case idStraggler:
					env.Applied = func(string) bool { return confined(t, r.proc) }
					if c.mech == mechDutyCycle {
						// In effect means stopped at some point of a few periods.
						env.Applied = func(string) bool { return r.seenStopped(t, 3*DutyPeriod) }
					}
				}
				return env
			})
		})
	}
}

// confined reports whether the process's main thread sits in a cpu group
// of ours.
func confined(t testing.TB, p procfind.Proc) bool {
	t.Helper()
	h, err := cgroup.Find("cpu")
	if err != nil {
		t.Skipf("no cpu cgroup controller: %v", err)
	}
	g, err := cgroup.GroupOf(h, p.PID, p.PID)
	return err == nil && strings.HasPrefix(g[strings.LastIndexByte(g, '/')+1:], cgroup.NamePrefix)
}

// sample is the rank's step rate and the CPUs it used over one window.
type sample struct{ rate, cpus float64 }

// measure returns the medians of n windows of d: CPUs shared with other
// work make single windows jump.
func (r *rank) measure(t testing.TB, n int, d time.Duration) sample {
	t.Helper()
	rates, cpus := make([]float64, n), make([]float64, n)
	for i := range n {
		st0, err := r.proc.Stat()
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		rates[i] = r.rate(t, d)
		st1, err := r.proc.Stat()
		if err != nil {
			t.Fatal(err)
		}
		cpus[i] = float64(st1.UTime+st1.STime-st0.UTime-st0.STime) / procfind.ClockTicks / time.Since(t0).Seconds()
	}
	slices.Sort(rates)
	slices.Sort(cpus)
	return sample{rates[n/2], cpus[n/2]}
}

// kernelQuota reads the CFS quota of the confinement's group from the
// kernel's own files (cpu.max on v2, cpu.cfs_quota_us and
// cpu.cfs_period_us on v1), in CPUs.
func kernelQuota(t testing.TB, c *cgroup.Confinement) float64 {
	t.Helper()
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(c.Mount, c.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	var quota, period string
	if c.Version == cgroup.V2 {
		var ok bool
		if quota, period, ok = strings.Cut(read("cpu.max"), " "); !ok {
			t.Fatalf("cpu.max of %s: %q", c.Dir, read("cpu.max"))
		}
	} else {
		quota, period = read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")
	}
	q, qerr := strconv.ParseFloat(quota, 64)
	p, perr := strconv.ParseFloat(period, 64)
	if qerr != nil || perr != nil || q <= 0 || p <= 0 {
		t.Fatalf("group %s: quota %q, period %q: not a limit", c.Dir, quota, period)
	}
	return q / p
}

// TestStragglerSlowsTheRank checks what the kernel was asked to do and
// what CFS enforces whatever else runs. Asked: while injected, the rank's
// group holds a CFS quota of the CPUs the rank used (as the injector
// measured them) over the slowdown, read back from the kernel's files;
// after Recover, every thread of the rank is back in its own group, ours
// is gone, and the rank steps again. Enforced: the throttled rank uses no
// more CPU than the quota. How much slower it steps is not asserted: the
// machine's other load takes CPU from the unthrottled rank too, so the
// ratio moves with it (BenchmarkStragglerSlowdown reports it). That
// recovery lifts the quota before moving the threads, so that a throttled
// rank does not stand still on an idle CPU, is checked in internal/cgroup.
// It runs alone (not parallel) so that its rank, which burns a CPU, does
// not compete with this package's other ranks.
func TestStragglerSlowsTheRank(t *testing.T) {
	if _, err := cgroup.Find("cpu"); err != nil {
		t.Skipf("no cpu cgroup controller: %v", err)
	}
	for _, slowdown := range []float64{2, 4} {
		t.Run(fmt.Sprint(slowdown), func(t *testing.T) {
			job := jobName(t)
			// The key names our cgroup: one of this process alone keeps
			// this package's tests, run at once from other checkouts on
			// the machine, out of each other's groups.
			key := job
			r := startRank(t, job, 0, false)
			in := newInjector(t, idStraggler, "")
			v := faulttest.Values(t, idStraggler, map[string]string{"slowdown": fmt.Sprint(slowdown), "window": "500ms"})
			if err := in.Inject(context.Background(), key, ref(job, 0), v); err != nil {
				t.Fatal(err)
			}
			st := record(t, in, key)
			if !confined(t, r.proc) {
				t.Fatal("rank not confined after Inject")
			}
			// The quota is at least the kernel's minimum, 1 ms a 100 ms period.
			quota := max(st.CPUs/slowdown, float64(minQuota)/float64(cfsPeriod))
			if got := kernelQuota(t, st.Confinement); math.Abs(got-quota) > 1e-4 {
				t.Errorf("the kernel holds a quota of %.4f CPUs, want %.4f: %.3f measured over a slowdown of %v", got, quota, st.CPUs, slowdown)
			}
			during := r.measure(t, 5, 200*time.Millisecond)
			t.Logf("slowdown %v: %.3f CPUs measured by the injector, quota %.3f; throttled, %.0f steps/s on %.3f CPUs",
				slowdown, st.CPUs, quota, during.rate, during.cpus)
			// One clock tick of slack per window on top of 10 %.
			if during.cpus > 1.1*quota+0.05 {
				t.Errorf("throttled rank used %.3f CPUs, over its quota of %.3f", during.cpus, quota)
			}
			tids, err := procfind.Threads(r.proc.PID)
			if err != nil {
				t.Fatal(err)
			}
			if err := in.Recover(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			c := st.Confinement
			if c.Exists() {
				t.Errorf("our group %s remains after recovery", c.Dir)
			}
			for _, tid := range tids {
				if g, err := cgroup.GroupOf(c.Hierarchy, r.proc.PID, tid); err == nil && g != c.Home {
					t.Errorf("thread %d in %s after recovery, want %s", tid, g, c.Home)
				}
			}
			steps := r.count(t)
			testutil.Eventually(t, 10*time.Second, "the rank to step after recovery", func() bool { return r.count(t) > steps })
		})
	}
}

// BenchmarkStragglerSlowdown reports how many times slower the throttled
// rank steps (slowdown) than the mean of its rates before and after, and
// that over the slowdown asked (of-asked: 1 is exact). Each iteration is
// one 200 ms window of the throttled rank; -benchtime 10x is 2 s.
func BenchmarkStragglerSlowdown(b *testing.B) {
	if _, err := cgroup.Find("cpu"); err != nil {
		b.Skipf("no cpu cgroup controller: %v", err)
	}
	for _, slowdown := range []float64{2, 4} {
		b.Run(fmt.Sprint(slowdown), func(b *testing.B) {
			job := jobName(b)
			r := startRank(b, job, 0, false)
			in := newInjector(b, idStraggler, "")
			before := r.measure(b, 5, 200*time.Millisecond)
			v := faulttest.Values(b, idStraggler, map[string]string{"slowdown": fmt.Sprint(slowdown), "window": "500ms"})
			if err := in.Inject(context.Background(), job, ref(job, 0), v); err != nil {
				b.Fatal(err)
			}
			var rates []float64
			for b.Loop() {
				rates = append(rates, r.rate(b, 200*time.Millisecond))
			}
			b.StopTimer()
			if err := in.Recover(context.Background(), job); err != nil {
				b.Fatal(err)
			}
			after := r.measure(b, 5, 200*time.Millisecond)
			slices.Sort(rates)
			ratio := (before.rate + after.rate) / 2 / rates[len(rates)/2]
			b.ReportMetric(ratio, "slowdown")
			b.ReportMetric(ratio/slowdown, "of-asked")
		})
	}
}

// TestRecoverAfterTheInjectorWasKilled injects from a helper process,
// SIGKILLs it, and recovers with a fresh injector in this process.
func TestRecoverAfterTheInjectorWasKilled(t *testing.T) {
	t.Parallel()
	for _, id := range []string{idHang, idStraggler} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			job := jobName(t)
			r := startRank(t, job, 0, false)
			dir := t.TempDir()
			testutil.KillInjector(t, runHelper(t, id, dir, "crash-key", r.proc.PID))
			var before []int
			switch id {
			case idHang:
				if s := r.state(t); s != 'T' {
					t.Fatalf("rank state %c after the helper injected, want T", s)
				}
			case idStraggler:
				if !confined(t, r.proc) {
					t.Fatal("rank not confined after the helper injected")
				}
				before, _ = procfind.Threads(r.proc.PID)
			}
			in := newInjector(t, id, dir)
			b, err := in.dir.Read("crash-key")
			if err != nil {
				t.Fatal(err)
			}
			st, err := parseState(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := in.Recover(context.Background(), "crash-key"); err != nil {
				t.Fatal(err)
			}
			switch id {
			case idHang:
				testutil.Eventually(t, 10*time.Second, "the rank to show running", func() bool { return r.state(t) != 'T' })
			case idStraggler:
				if st.Confinement.Exists() {
					t.Errorf("our group %s remains", st.Confinement.Dir)
				}
				for _, tid := range before {
					g, err := cgroup.GroupOf(st.Confinement.Hierarchy, r.proc.PID, tid)
					if err == nil && g != st.Confinement.Home {
						t.Errorf("thread %d in %s, want %s", tid, g, st.Confinement.Home)
					}
				}
			}
			if ok, _ := in.dir.Exists("crash-key"); ok {
				t.Error("record kept after recovery")
			}
		})
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	good := `{"version":1,"key":"k","fault":"workload.hang-rank","proc":{"pid":100,"start_ticks":5},"rank":0,"created":"2026-01-01T00:00:00Z"}`
	conf := `{"version":1,"mount":"/sys/fs/cgroup/cpu","controller":"cpu","proc":{"pid":100,"start_ticks":5},"home":"/","dir":"/gpuchaos-x","files":[],"moves":[]}`
	ctr := "/kubepods/burstable/pod0f0e0d0c-0b0a-0908-0706-050403020100/" + strings.Repeat("ab", 32)
	pq := `{"version":1,"mount":"/sys/fs/cgroup/cpu","controller":"cpu","dir":"` + ctr + `","before":[{"name":"cpu.cfs_period_us","value":"50000"},{"name":"cpu.cfs_quota_us","value":"-1"}],"files":[{"name":"cpu.cfs_period_us","value":"100000"},{"name":"cpu.cfs_quota_us","value":"50000"}]}`
	tests := []struct {
		name, in, wantErr string
	}{
		{"hang", good, ""},
		{"straggler in a pod", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","pod_quota":`+pq, 1), ""},
		{"pod quota beside a confinement", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","confinement":`+conf+`,"pod_quota":`+pq, 1), "both"},
		{"pod quota on the pod's own group", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","pod_quota":`+strings.Replace(pq, "/"+strings.Repeat("ab", 32), "", 1), 1), "not a pod container's"},
		{"pod quota below the container's group", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","pod_quota":`+strings.Replace(pq, strings.Repeat("ab", 32), strings.Repeat("ab", 32)+"/x", 1), 1), "not a pod container's"},
		{"pod quota outside the mount", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","pod_quota":`+strings.Replace(pq, "/kubepods", "/../kubepods", 1), 1), "clean absolute"},
		{"pod quota writing another file", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","pod_quota":`+strings.Replace(pq, `"cpu.cfs_quota_us","value":"50000"`, `"cgroup.procs","value":"1"`, 1), 1), "quota file"},
		{"duty cycle with a pod quota", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","mechanism":"duty-cycle","pod_quota":`+pq, 1), "with a confinement"},
		{"kill", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.kill-rank","signal":"SIGTERM"`, 1), ""},
		{"straggler", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","confinement":`+conf, 1), ""},
		{"kill with a foreign signal", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.kill-rank","signal":"SIGSTOP"`, 1), "signal"},
		{"straggler without confinement", strings.Replace(good, "hang-rank", "straggler", 1), "without a confinement"},
		{"duty cycle before the pacer started", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","mechanism":"duty-cycle","slowdown":2`, 1), ""},
		{"duty cycle with its pacer", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","mechanism":"duty-cycle","pacer":{"pid":200,"start_ticks":9}`, 1), ""},
		{"duty cycle with pacer pid 1", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","mechanism":"duty-cycle","pacer":{"pid":1,"start_ticks":9}`, 1), "cannot be ours"},
		{"duty cycle with a pacer group", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","mechanism":"duty-cycle","pacer":{"pid":-200,"start_ticks":9}`, 1), "cannot be ours"},
		{"duty cycle whose pacer is the rank", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","mechanism":"duty-cycle","pacer":{"pid":100,"start_ticks":5}`, 1), "cannot be ours"},
		{"duty cycle with a confinement", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","mechanism":"duty-cycle","confinement":`+conf, 1), "with a confinement"},
		{"cgroup-cpu with a pacer", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","mechanism":"cgroup-cpu","confinement":`+conf+`,"pacer":{"pid":200,"start_ticks":9}`, 1), "with a pacer"},
		{"foreign straggler mechanism", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","mechanism":"cgroup-freeze"`, 1), "not this package's"},
		{"confinement of another process", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","confinement":`+strings.Replace(conf, "100", "101", 1), 1), "another process"},
		{"group not ours", strings.Replace(good, `"fault":"workload.hang-rank"`, `"fault":"workload.straggler","confinement":`+strings.Replace(conf, "gpuchaos-x", "kubepods", 1), 1), "not one of ours"},
		{"pid 1", strings.Replace(good, `"pid":100`, `"pid":1`, 1), "cannot be a rank"},
		{"pid -1", strings.Replace(good, `"pid":100`, `"pid":-1`, 1), "cannot be a rank"},
		{"no start time", strings.Replace(good, `"start_ticks":5`, `"start_ticks":0`, 1), "cannot be a rank"},
		{"other version", strings.Replace(good, `"version":1`, `"version":2`, 1), "version"},
		{"no key", strings.Replace(good, `"key":"k"`, `"key":""`, 1), "no key"},
		{"foreign fault", strings.Replace(good, "workload.hang-rank", "network.loss", 1), "not this package's"},
		{"unknown field", strings.Replace(good, `"rank":0`, `"rank":0,"x":1`, 1), "unknown field"},
		{"trailing data", good + "{}", "after the record"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseState([]byte(tc.in))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("parseState = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"version":1,"key":"k","fault":"workload.hang-rank","proc":{"pid":100,"start_ticks":5},"rank":0}`))
	f.Add([]byte(`{"version":1,"key":"k","fault":"workload.kill-rank","signal":"SIGKILL","proc":{"pid":2,"start_ticks":1}}`))
	f.Add([]byte(`{"version":1,"key":"k","fault":"workload.straggler","mechanism":"duty-cycle","proc":{"pid":2,"start_ticks":1},"pacer":{"pid":3,"start_ticks":1}}`))
	f.Add([]byte(`{"version":1,"key":"k","fault":"workload.straggler","proc":{"pid":2,"start_ticks":1},"pod_quota":{"version":2,"mount":"/sys/fs/cgroup","controller":"cpu","dir":"/kubepods.slice/kubepods-pod0f0e0d0c_0b0a_0908_0706_050403020100.slice/cri-containerd-` + strings.Repeat("ab", 32) + `.scope","before":[{"name":"cpu.max","value":"max 100000"}],"files":[{"name":"cpu.max","value":"50000 100000"}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseState(b)
		if err != nil {
			return
		}
		// Whatever is accepted can never make a signal reach a group,
		// init or every process.
		if st.Proc.PID <= 1 || st.Proc.StartTicks == 0 {
			t.Fatalf("accepted process %+v", st.Proc)
		}
		if st.Fault == idStraggler && st.Mechanism != mechDutyCycle && st.PodQuota != nil {
			if st.Confinement != nil || st.PodQuota.validate() != nil {
				t.Fatalf("accepted a pod quota that does not validate, or beside a confinement")
			}
		} else if st.Fault == idStraggler && st.Mechanism != mechDutyCycle && (st.Confinement == nil || st.Confinement.Validate() != nil) {
			t.Fatalf("accepted a straggler record without a valid confinement")
		}
		if st.Pacer != nil && (st.Mechanism != mechDutyCycle || !st.Pacer.Valid() || st.Pacer.PID == st.Proc.PID) {
			t.Fatalf("accepted pacer %+v of a %q record for process %+v", *st.Pacer, st.Mechanism, st.Proc)
		}
	})
}

// TestKillRecordsWhatWasKilledAcrossProcesses checks that the record left
// by a kill is readable and removable by a fresh injector, as after a
// crash.
func TestKillRecordsWhatWasKilledAcrossProcesses(t *testing.T) {
	t.Parallel()
	job := jobName(t)
	r := startRank(t, job, 0, false)
	dir := t.TempDir()
	if err := newInjector(t, idKill, dir).Inject(context.Background(), "k", ref(job, 0), faulttest.Values(t, idKill, nil)); err != nil {
		t.Fatal(err)
	}
	err := <-r.done
	r.done <- err
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("rank ended with %v", err)
	}
	fresh := newInjector(t, idKill, dir)
	if err := fresh.Recover(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := fresh.dir.Exists("k"); ok {
		t.Error("record kept after recovery")
	}
}
