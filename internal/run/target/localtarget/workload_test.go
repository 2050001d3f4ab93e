package localtarget

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/gputools/workload"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
)

// These tests run the reference workload (train.py, two gloo ranks on
// CPU, under the supervisor) and put the rank and checkpoint injectors on
// it through the local target and the engine, measuring what the job did
// from its own metrics, output and checkpoint directory. They need root
// (cgroups, tmpfs, /dev/kmsg) and Debian's PyTorch for /usr/bin/python3.

// Settings of the shared job: steps of some tens of milliseconds, so that
// rates are measurable on two slow cores, and a checkpoint every
// ckptEvery steps.
const (
	ckptEvery = 20
	// helperRoleEnv makes the test binary an injecting engine that the
	// test kills (TestWorkloadInjectorHelper).
	helperRoleEnv = "GPUCHAOS_ENGINE_HELPER"
)

// needWorkload skips unless the tests can run the real job and its
// faults.
func needWorkload(t *testing.T) {
	t.Helper()
	needKmsg(t)
	out, err := exec.Command(workload.DefaultPython, "-c", "import torch.distributed as d; assert d.is_available()").CombinedOutput()
	if err != nil {
		t.Skipf("%s cannot import torch.distributed (scripts/setup-torch installs Debian's python3-torch): %v: %s",
			workload.DefaultPython, err, strings.TrimSpace(string(out)))
	}
}

// rankEvent is one JSON line a rank printed.
type rankEvent struct {
	Event       string `json:"event"`
	Rank        int    `json:"rank"`
	Step        int    `json:"step"`
	ResumedFrom int    `json:"resumed_from_step"`
	Restart     int    `json:"restart"`
	File        string `json:"file"`
	Reason      string `json:"reason"`
}

// job is the shared training job.
type job struct {
	name    string
	ckpt    string
	rankURL [2]string
	supURL  string
	out     *testutil.LockedBuffer
	events  *testutil.LockedBuffer
	done    chan error
}

// rankEvents returns the JSON lines of the ranks so far.
func (j *job) rankEvents() []rankEvent {
	var evs []rankEvent
	sc := bufio.NewScanner(strings.NewReader(j.out.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		_, js, ok := strings.Cut(sc.Text(), "] ")
		if !ok || !strings.HasPrefix(js, "{") {
			continue
		}
		var e rankEvent
		if json.Unmarshal([]byte(js), &e) == nil {
			evs = append(evs, e)
		}
	}
	return evs
}

// starts returns rank r's "start" lines: one per attempt.
func (j *job) starts(r int) []rankEvent {
	var out []rankEvent
	for _, e := range j.rankEvents() {
		if e.Event == "start" && e.Rank == r {
			out = append(out, e)
		}
	}
	return out
}

// freeBase finds a port p with p and p+1 free on the loopback, for the
// two ranks' metrics.
func freeBase(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p >= 65535 {
			continue
		}
		if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1)); err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no two consecutive free ports")
	return 0
}

// startJob mounts a small tmpfs for the checkpoints and runs the
// workload on it until the test ends.
func startJob(t *testing.T) *job {
	t.Helper()
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := os.Mkdir(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", ckpt, "tmpfs", 0, "size=64m"); err != nil {
		t.Skipf("mount a tmpfs for the checkpoints: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(ckpt, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", ckpt, err)
		}
	})
	base := freeBase(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sup := l.Addr().String()
	l.Close()
	j := &job{
		name: fmt.Sprintf("wl-%d", os.Getpid()), ckpt: ckpt,
		rankURL: [2]string{fmt.Sprintf("http://127.0.0.1:%d/metrics", base), fmt.Sprintf("http://127.0.0.1:%d/metrics", base+1)},
		supURL:  "http://" + sup + "/metrics",
		out:     &testutil.LockedBuffer{}, events: &testutil.LockedBuffer{}, done: make(chan error, 1),
	}
	tr := workload.Train{
		Backend: "gloo", Hidden: 512, Layers: 4, Batch: 32, Duration: 10 * time.Minute,
		StepSleep: 40 * time.Millisecond, CkptDir: ckpt, CkptEvery: ckptEvery, CkptMode: workload.ModeSync,
		Keep: 3, OnSaveError: workload.OnSaveErrorContinue, MetricsPort: base, LogEvery: 1,
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := workload.Run(ctx, workload.Options{
			Ranks: 2, Args: tr.Args(), Job: j.name, MaxRestarts: 20, Grace: 2 * time.Second,
			Env:    []string{"GPUCHAOS_CKPT_DIR=" + ckpt},
			Output: j.out, Events: j.events, MetricsAddr: sup,
		})
		j.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-j.done:
		case <-time.After(15 * time.Second):
			t.Error("workload did not stop within 15s")
		}
		if t.Failed() {
			t.Logf("rank output (tail):\n%s", tail(j.out.String(), 4000))
			t.Logf("events:\n%s", tail(j.events.String(), 3000))
		}
	})
	j.waitStep(t, 0, 2*ckptEvery+1, 90*time.Second)
	return j
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// metric reads the first sample of name from a Prometheus text page.
func metric(url, name string) (float64, error) {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			return strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}

// step reads rank r's step counter.
func (j *job) step(r int) (int, error) {
	v, err := metric(j.rankURL[r], "gpuchaos_job_step_total")
	return int(v), err
}

// waitStep waits until rank r's step counter is at least min.
func (j *job) waitStep(t *testing.T, r, min int, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s, err := j.step(r)
		if err == nil && s >= min {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank %d at step %d (err %v) after %s, want %d", r, s, err, d, min)
		}
		select {
		case err := <-j.done:
			t.Fatalf("workload ended: %v\n%s", err, tail(j.out.String(), 3000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitAttempt waits until rank 0 has started attempt n and returns its
// start line.
func (j *job) waitAttempt(t *testing.T, n int, d time.Duration) rankEvent {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, e := range j.starts(0) {
			if e.Restart == n {
				return e
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("attempt %d did not start within %s", n, d)
	return rankEvent{}
}

// rate measures rank 0's steps per second over d from its step counter.
func (j *job) rate(t *testing.T, d time.Duration) float64 {
	t.Helper()
	s0, err := j.step(0)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(d)
	s1, err := j.step(0)
	if err != nil {
		t.Fatal(err)
	}
	return float64(s1-s0) / time.Since(t0).Seconds()
}

// lastStepBefore returns the highest step rank 0 printed in attempt n.
func (j *job) lastStep(n int) int {
	last, attempt := 0, -1
	for _, e := range j.rankEvents() {
		if e.Rank != 0 {
			continue
		}
		if e.Event == "start" {
			attempt = e.Restart
		}
		if attempt == n && e.Event == "step" && e.Step > last {
			last = e.Step
		}
	}
	return last
}

// localFor starts a local target that knows the job and scrapes its
// supervisor and ranks.
func localFor(t *testing.T, j *job, stateDir string) *Target {
	t.Helper()
	return startLocalWith(t, Options{
		StateDir: stateDir, Exporter: j.supURL, MoreExporters: j.rankURL[:],
		// A stopped rank accepts connections but never answers; a short
		// timeout keeps every observation round short.
		Client: &http.Client{Timeout: 500 * time.Millisecond},
		// The ranks are found from their environment, as `gpuchaos run
		// --job` finds them.
		JobNames: []string{j.name},
	})
}

// rankExperiment builds an experiment of one fault on rank 1 (rank scope) or
// the job (job scope).
func rankExperiment(t *testing.T, name, jobName, faultYAML, expectYAML string, d time.Duration) *v1alpha1.Experiment {
	t.Helper()
	src := fmt.Sprintf(`apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata:
  name: %s
spec:
  selector:
    jobs: [%s]
    ranks: [1]
    mode: all
  faults:
%s
  duration: %s
  expectations:
%s
`, name, jobName, faultYAML, d, expectYAML)
	exp, err := v1alpha1.Load([]byte(src), name+".yaml")
	if err != nil {
		t.Fatalf("load %s: %v\n%s", name, err, src)
	}
	exp.Default()
	return exp
}

// runEngine runs exp on lt with a ledger in dir and fails on any run
// error.
func runEngine(t *testing.T, lt *Target, exp *v1alpha1.Experiment, ledgerPath string) *engine.Record {
	t.Helper()
	l, err := ledger.Open(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	eng := engine.New(engine.Options{Target: lt, Ledger: l, PollInterval: 250 * time.Millisecond, RecoveryWindow: -1})
	rec, err := eng.Run(t.Context(), exp)
	if err != nil {
		t.Fatalf("engine run %s: %v", exp.ObjectMeta.Name, err)
	}
	return rec
}

// logRates logs the job's scraped step rates around the injection, to
// tell a wrong verdict from a job that really stalled.
func logRates(t *testing.T, lt *Target, rec *engine.Record) {
	t.Helper()
	t0 := rec.InjectedAt.UnixMilli()
	lt.metrics.With(func() {
		for _, se := range lt.metrics.Select("gpuchaos_job_steps_per_second") {
			var b strings.Builder
			for _, x := range se.Samples {
				if x.T >= t0-12000 && x.T <= t0+2000 {
					fmt.Fprintf(&b, " %+.1fs=%.2f", float64(x.T-t0)/1000, x.V)
				}
			}
			t.Logf("scraped %s:%s", se.Labels, b.String())
		}
	})
}

// verdictOf returns the verdict named name.
func verdictOf(rec *engine.Record, name string) engine.Verdict {
	for _, v := range rec.Verdicts {
		if v.Name == name {
			return v
		}
	}
	return engine.Verdict{Name: name, Verdict: "absent"}
}

// passed checks every verdict passed and logs its time to detect.
func passed(t *testing.T, rec *engine.Record) {
	t.Helper()
	for _, v := range rec.Verdicts {
		if v.Verdict != engine.Pass || v.TTDSeconds == nil {
			t.Errorf("%s: verdict %s (%s), want pass", v.Name, v.Verdict, v.Detail)
			continue
		}
		t.Logf("%s: time to detect %.3fs %s", v.Name, *v.TTDSeconds, v.Detail)
	}
}

// mechanismOf returns fault f's mechanism named name.
func mechanismOf(t *testing.T, f *catalog.Fault, name string) *catalog.Mechanism {
	t.Helper()
	for i := range f.Mechanisms {
		if f.Mechanisms[i].Name == name {
			return &f.Mechanisms[i]
		}
	}
	t.Fatalf("%s has no mechanism %s", f.ID, name)
	return nil
}

// injector returns the local target's injector of fault id.
func injector(t *testing.T, lt *Target, id string) fault.Injector {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("%s is not in the catalogue", id)
	}
	inj, err := lt.Injector(f, &f.Mechanisms[0])
	if err != nil {
		t.Fatal(err)
	}
	return inj
}

// waitCheckpoint waits for a checkpoint newer than after and returns the
// newest valid step.
func (j *job) waitCheckpoint(t *testing.T, after int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, ok, err := workload.Newest(j.ckpt); err == nil && ok && int(c.Step) > after {
			return int(c.Step)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no checkpoint after step %d within 30s", after)
	return 0
}

func TestWorkloadChaosLocal(t *testing.T) {
	needWorkload(t)
	j := startJob(t)
	state := filepath.Join(t.TempDir(), "state")
	lt := localFor(t, j, state)
	rank1 := inventory.Ref{Kind: catalog.ScopeRank, Job: j.name, Rank: 1, Node: "node-a", GPU: 1}
	jobRef := inventory.Ref{Kind: catalog.ScopeJob, Job: j.name}

	// The straggler mechanisms: each attempt is a whole inject, measure,
	// recover. The two cores also run the test, its scrapes and the
	// other rank, so one window can be disturbed; up to three attempts
	// are made and every one is logged, and a mechanism that does not
	// throttle fails all three.
	for _, tc := range []struct {
		mech   string
		lo, hi float64 // the step-rate ratio wanted
		why    string
	}{
		// A CFS quota of half the rank's measured CPU use. The bound is
		// generous: other load on a busy machine moves the ratio, and
		// what the kernel was asked (the quota written) is asserted in
		// internal/fault/procfault, with the precise slowdown in its
		// BenchmarkStragglerSlowdown. Here the job must slow clearly.
		{"cgroup-cpu", 0.05, 0.8, "clearly slower (below 0.8)"},
		// Stopped half of each 100 ms: the rank's 40 ms sleep per step
		// goes on while it is stopped, as a GPU's queued kernels would,
		// so the job slows less than 2×; it must slow clearly.
		{"duty-cycle", 0.05, 0.85, "clearly slower (below 0.85)"},
	} {
		t.Run("straggler-"+tc.mech, func(t *testing.T) {
			f, _ := catalog.Lookup("workload.straggler")
			inj, err := lt.Injector(f, mechanismOf(t, f, tc.mech))
			if err != nil {
				t.Fatal(err)
			}
			var ratio, before, after float64
			for attempt := 1; attempt <= 3; attempt++ {
				before = j.rate(t, 4*time.Second)
				key := fmt.Sprintf("straggler-%s-%d-%s", tc.mech, attempt, j.name)
				if err := inj.Inject(fault.WithHoldUntil(t.Context(), time.Now().Add(time.Minute)), key, rank1,
					faulttest.Values(t, "workload.straggler", map[string]string{"slowdown": "2"})); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second) // the throttle settles
				during := j.rate(t, 6*time.Second)
				if err := inj.Recover(t.Context(), key); err != nil {
					t.Fatal(err)
				}
				for range 4 {
					if after = j.rate(t, 3*time.Second); after >= 0.6*before {
						break
					}
				}
				ratio = during / before
				t.Logf("straggler %s slowdown 2, attempt %d: %.2f steps/s before, %.2f during (ratio %.3f, want %s), %.2f after",
					tc.mech, attempt, before, during, ratio, tc.why, after)
				if ratio >= tc.lo && ratio <= tc.hi && after >= 0.6*before {
					return
				}
			}
			t.Errorf("%s: step rate ratio %.3f (want %s) and %.2f steps/s after recovery against %.2f before, in three attempts",
				tc.mech, ratio, tc.why, after, before)
		})
	}

	t.Run("hang-rank", func(t *testing.T) {
		exp := rankExperiment(t, "hang-rank", j.name, `    - id: workload.hang-rank
      mechanism: signal
      params:
        watchdog: 10m`, `    - name: steps-stalled
      probe:
        threshold:
          metric: gpuchaos_job_steps_per_second
          labels: {job: `+j.name+`}
          op: "<"
          value: 0.5
      within: 8s
    - name: stalled
      probe: {workload: {check: stalled, baseline: 10s}}
      within: 8s
    - name: rate-back
      probe: {workload: {check: rate-recovered, tolerance: 0.3, for: 3s, baseline: 10s}}
      within: 40s`, 8*time.Second)
		rec := runEngine(t, lt, exp, filepath.Join(t.TempDir(), "ledger.jsonl"))
		passed(t, rec)
		// The rate can only come back after SIGCONT, at the end of the
		// 8s window.
		if back := verdictOf(rec, "rate-back"); back.TTDSeconds != nil && *back.TTDSeconds < 8 {
			t.Errorf("rate back %.1fs after injection, before the rank was continued at 8s (%s)", *back.TTDSeconds, back.Detail)
		}
		s0, err := j.step(0)
		if err != nil {
			t.Fatal(err)
		}
		s1 := j.waitStep(t, 0, s0+10, 20*time.Second)
		t.Logf("hang-rank: training continued after SIGCONT, step %d -> %d", s0, s1)
	})

	t.Run("kill-rank", func(t *testing.T) {
		// The rate checks compare with the 10s before injection: let the
		// job run steadily that long after the hang.
		j.waitStep(t, 0, j.waitStep(t, 0, 0, time.Second)+10, 30*time.Second)
		time.Sleep(10 * time.Second)
		attempts := len(j.starts(0))
		exp := rankExperiment(t, "kill-rank", j.name, `    - id: workload.kill-rank
      mechanism: signal
      params:
        signal: SIGKILL`, `    - name: job-restarted
      probe:
        threshold:
          metric: gpuchaos_job_restarts_total
          labels: {job: `+j.name+`}
          op: ">="
          value: 1
      within: 10s
    - name: resumed
      probe: {workload: {check: resumed}}
      within: 60s
    - name: lost
      probe: {workload: {check: lost-work}}
      within: 60s
    - name: rate-back
      probe: {workload: {check: rate-recovered, tolerance: 0.3, for: 3s, baseline: 10s}}
      within: 60s
    - name: goodput
      probe: {workload: {check: goodput, min: 0.2, baseline: 10s}}
      within: 30s`, 5*time.Second)
		rec := runEngine(t, lt, exp, filepath.Join(t.TempDir(), "ledger.jsonl"))
		passed(t, rec)
		start := j.waitAttempt(t, attempts, 60*time.Second)
		lost := j.lastStep(attempts-1) - start.ResumedFrom
		// The verdicts read the job's pages only; the ranks' own output is
		// the truth. The last scrape before the kill may be some steps
		// short of the last step made (scrapes every second at most, about
		// 20-35 steps a second here).
		if v := verdictOf(rec, "resumed"); v.Value == nil || int(*v.Value) != start.ResumedFrom {
			t.Errorf("resumed verdict %v (%s), the ranks resumed from %d", v.Value, v.Detail, start.ResumedFrom)
		}
		if v := verdictOf(rec, "lost"); v.Value == nil || int(*v.Value) > lost || int(*v.Value) < lost-40 {
			t.Errorf("lost-work verdict %v (%s), the ranks lost %d steps", v.Value, v.Detail, lost)
		}
		if v := verdictOf(rec, "goodput"); v.Value == nil {
			logRates(t, lt, rec)
		}
		if v := verdictOf(rec, "goodput"); v.Value == nil || *v.Value > 1.1 {
			t.Errorf("goodput verdict %v (%s), want a share of at most about 1", v.Value, v.Detail)
		}
		t.Logf("kill-rank: last step before the kill %d, resumed from %d: lost work %d steps (interval %d)",
			j.lastStep(attempts-1), start.ResumedFrom, lost, ckptEvery)
		if start.ResumedFrom == 0 || lost < 0 || lost > ckptEvery {
			t.Errorf("resumed from %d after step %d: lost %d steps, want 0..%d", start.ResumedFrom, j.lastStep(attempts-1), lost, ckptEvery)
		}
		j.waitStep(t, 0, start.ResumedFrom+5, 60*time.Second)
	})

	t.Run("corrupt-newest-then-kill", func(t *testing.T) {
		attempts := len(j.starts(0))
		newest := j.waitCheckpoint(t, j.waitStep(t, 0, 0, time.Second))
		if err := injector(t, lt, "checkpoint.corrupt-newest").Inject(t.Context(), "corrupt-"+j.name, jobRef,
			faulttest.Values(t, "checkpoint.corrupt-newest", map[string]string{"bytes": "64"})); err != nil {
			t.Fatal(err)
		}
		if err := injector(t, lt, "workload.kill-rank").Inject(t.Context(), "kill2-"+j.name, rank1,
			faulttest.Values(t, "workload.kill-rank", map[string]string{"signal": "SIGKILL"})); err != nil {
			t.Fatal(err)
		}
		start := j.waitAttempt(t, attempts, 60*time.Second)
		// The bytes cannot be put back once training rewrote the step:
		// the injector must say so rather than write over a new file.
		if err := injector(t, lt, "checkpoint.corrupt-newest").Recover(t.Context(), "corrupt-"+j.name); err != nil && !errors.Is(err, fault.ErrTargetGone) {
			t.Errorf("recover corrupt-newest: %v", err)
		}
		if err := injector(t, lt, "workload.kill-rank").Recover(t.Context(), "kill2-"+j.name); err != nil {
			t.Errorf("recover kill-rank: %v", err)
		}
		t.Logf("corrupt-newest: corrupted step %d, restarted job resumed from %d", newest, start.ResumedFrom)
		if start.ResumedFrom != newest-ckptEvery {
			t.Errorf("resumed from %d, want the previous checkpoint %d", start.ResumedFrom, newest-ckptEvery)
		}
		if !rejected(j.rankEvents(), fmt.Sprintf("ckpt-%d.pt", newest)) {
			t.Errorf("no checkpoint_rejected line for ckpt-%d.pt", newest)
		}
		j.waitStep(t, 0, start.ResumedFrom+5, 60*time.Second)
	})

	t.Run("kill-writer", func(t *testing.T) {
		attempts := len(j.starts(0))
		// Let the job pass every step that already has a checkpoint (a
		// fallback rewinds it), so the write torn is of a new step and
		// the one resumed from is strictly older.
		cps, _, err := workload.Scan(j.ckpt)
		if err != nil {
			t.Fatal(err)
		}
		highest := 0
		for _, c := range cps {
			highest = max(highest, int(c.Step))
		}
		j.waitStep(t, 0, highest+1, 30*time.Second)
		err = injector(t, lt, "checkpoint.kill-writer").Inject(t.Context(), "killwriter-"+j.name, jobRef,
			faulttest.Values(t, "checkpoint.kill-writer", map[string]string{"signal": "SIGKILL", "timeout": "30s"}))
		if err != nil {
			t.Fatal(err)
		}
		// The torn file is there until the next start removes it.
		var tmps []string
		ents, _ := os.ReadDir(j.ckpt)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".tmp") {
				tmps = append(tmps, e.Name())
			}
		}
		start := j.waitAttempt(t, attempts, 60*time.Second)
		t.Logf("kill-writer: torn files %v, restarted job resumed from %d", tmps, start.ResumedFrom)
		if len(tmps) == 0 {
			t.Errorf("no torn .tmp file after the writer was killed")
		}
		if _, err := workload.Verify(j.ckpt, int64(start.ResumedFrom)); err != nil || start.ResumedFrom == 0 {
			t.Errorf("resumed from step %d, not a valid checkpoint: %v", start.ResumedFrom, err)
		}
		for _, tmp := range tmps {
			base, _, _ := strings.Cut(strings.TrimPrefix(tmp, "ckpt-"), ".")
			step, err := strconv.Atoi(base)
			if err != nil {
				t.Errorf("torn file %s: no step in its name", tmp)
			} else if start.ResumedFrom >= step {
				t.Errorf("resumed from %d, not older than the torn %s", start.ResumedFrom, tmp)
			}
			if !rejected(j.rankEvents(), tmp) {
				t.Errorf("no checkpoint_rejected line for %s", tmp)
			}
		}
		j.waitStep(t, 0, start.ResumedFrom+5, 60*time.Second)
	})

	t.Run("fill-volume", func(t *testing.T) {
		fails0, err := metric(j.rankURL[0], "gpuchaos_job_checkpoint_failures_total")
		if err != nil {
			t.Fatal(err)
		}
		inj := injector(t, lt, "checkpoint.fill-volume")
		key := "fill-" + j.name
		free0 := avail(t, j.ckpt)
		if err := inj.Inject(t.Context(), key, jobRef, faulttest.Values(t, "checkpoint.fill-volume", nil)); err != nil {
			t.Fatal(err)
		}
		s0, _ := j.step(0)
		j.waitStep(t, 0, s0+2*ckptEvery+1, 60*time.Second)
		fails1, err := metric(j.rankURL[0], "gpuchaos_job_checkpoint_failures_total")
		if err != nil {
			t.Fatal(err)
		}
		partial := lingering(j.ckpt, partialFile)
		newest, _, _ := workload.Newest(j.ckpt)
		full := avail(t, j.ckpt)
		if err := inj.Recover(t.Context(), key); err != nil {
			t.Fatal(err)
		}
		freed := avail(t, j.ckpt)
		t.Logf("fill-volume: %d bytes free before, %d while full, %d after recovery", free0, full, freed)
		if full >= 1<<20 || freed < free0/2 {
			t.Errorf("free space %d -> %d -> %d: want the volume full while injected and free again after", free0, full, freed)
		}

		t.Logf("fill-volume: checkpoint failures %g -> %g while full, partial files %v, newest valid step %d", fails0, fails1, partial, newest.Step)
		if fails1 < fails0+2 {
			t.Errorf("failures %g -> %g over two checkpoint intervals, want at least 2 more", fails0, fails1)
		}
		if len(partial) > 0 {
			t.Errorf("partial checkpoint files left: %v", partial)
		}
		after := j.waitCheckpoint(t, int(newest.Step))
		fails2, _ := metric(j.rankURL[0], "gpuchaos_job_checkpoint_failures_total")
		t.Logf("fill-volume: after recovery checkpoint %d saved, failures %g", after, fails2)
	})

	t.Run("sigkill-mid-fault/hang-rank", func(t *testing.T) {
		helperState := filepath.Join(t.TempDir(), "state")
		ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
		killHelper(t, j, helperConfig{Fault: "workload.hang-rank", Params: "watchdog: 10m", State: helperState, Ledger: ledgerPath})
		s0, _ := j.step(0)
		time.Sleep(2 * time.Second)
		s1, _ := j.step(0)
		t.Logf("sigkill-mid-fault hang-rank: rank 0 at step %d, 2s later %d, with the injecting engine dead", s0, s1)
		if s1 > s0+1 {
			t.Fatalf("rank 0 stepped %d -> %d: the hang did not outlive its engine, nothing to recover", s0, s1)
		}
		recoverPending(t, j, helperState, ledgerPath)
		s2 := j.waitStep(t, 0, s1+10, 30*time.Second)
		t.Logf("sigkill-mid-fault hang-rank: after RecoverPending rank 0 at step %d", s2)
	})

	t.Run("sigkill-mid-fault/fill-volume", func(t *testing.T) {
		helperState := filepath.Join(t.TempDir(), "state")
		ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
		free0 := avail(t, j.ckpt)
		killHelper(t, j, helperConfig{Fault: "checkpoint.fill-volume", Params: "free: 0", State: helperState, Ledger: ledgerPath})
		full := avail(t, j.ckpt)
		isFiller := func(_, name string) bool { return strings.HasPrefix(name, ".gpuchaos-fill-") }
		if f := lingering(j.ckpt, isFiller); len(f) != 1 {
			t.Fatalf("fillers with the injecting engine dead: %v, want one", f)
		}
		recoverPending(t, j, helperState, ledgerPath)
		freed := avail(t, j.ckpt)
		t.Logf("sigkill-mid-fault fill-volume: %d bytes free before, %d with the injecting engine dead, %d after RecoverPending", free0, full, freed)
		if full >= 1<<20 || freed < free0/2 {
			t.Errorf("free space %d -> %d -> %d: want full after the kill and free again after RecoverPending", free0, full, freed)
		}
		if left := lingering(j.ckpt, isFiller); len(left) > 0 {
			t.Errorf("filler left after RecoverPending: %v", left)
		}
		newest, _, _ := workload.Newest(j.ckpt)
		after := j.waitCheckpoint(t, int(newest.Step))
		t.Logf("sigkill-mid-fault fill-volume: checkpoint %d saved after RecoverPending", after)
	})
}

// helperConfig tells TestWorkloadInjectorHelper what to inject; it
// travels as JSON in helperRoleEnv.
type helperConfig struct {
	Job     string    `json:"job"`
	RankURL [2]string `json:"rank_url"`
	SupURL  string    `json:"sup_url"`
	Fault   string    `json:"fault"`
	Params  string    `json:"params"`
	State   string    `json:"state"`
	Ledger  string    `json:"ledger"`
	Ready   string    `json:"ready"`
}

// killHelper runs an engine injecting cfg.Fault on rank 1 of the job in a
// child process, and SIGKILLs it once the fault is in: what a crash or
// an OOM kill mid-experiment leaves behind.
func killHelper(t *testing.T, j *job, cfg helperConfig) {
	t.Helper()
	cfg.Job, cfg.RankURL, cfg.SupURL = j.name, j.rankURL, j.supURL
	cfg.Ready = filepath.Join(t.TempDir(), "ready")
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out testutil.LockedBuffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkloadInjectorHelper$", "-test.v")
	cmd.Env = append(os.Environ(), helperRoleEnv+"="+string(b))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(cfg.Ready); err == nil {
			break
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("injecting helper ended before injecting: %v\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("helper did not inject within 60s:\n%s", out.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = <-done
	done <- err
	t.Logf("injecting engine (pid %d) killed mid-fault: %v", cmd.Process.Pid, err)
}

// recoverPending recovers what the killed helper left, as the next
// start of gpuchaos does: a fresh local target over the same state
// directory and ledger.
func recoverPending(t *testing.T, j *job, state, ledgerPath string) {
	t.Helper()
	lt := localFor(t, j, state)
	l, err := ledger.Open(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pending, err := l.Pending(t.Context())
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending injections after the kill: %+v, %v; want one", pending, err)
	}
	done, err := ledger.RecoverPending(t.Context(), lt.Kind().Recoverer(lt.Injector), l)
	if err != nil || len(done) != 1 || done[0].Status != ledger.Recovered {
		t.Fatalf("RecoverPending = %+v, %v; want the one injection recovered", done, err)
	}
	if left, err := l.Pending(t.Context()); err != nil || len(left) != 0 {
		t.Errorf("still pending after RecoverPending: %+v, %v", left, err)
	}
}

// TestWorkloadInjectorHelper is the engine that killHelper starts and
// kills; run on its own it skips.
func TestWorkloadInjectorHelper(t *testing.T) {
	raw := os.Getenv(helperRoleEnv)
	if raw == "" {
		t.Skip("the injecting engine of TestWorkloadChaosLocal's sigkill-mid-fault cases, run only by them")
	}
	var cfg helperConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	j := &job{name: cfg.Job, rankURL: cfg.RankURL, supURL: cfg.SupURL}
	lt := localFor(t, j, cfg.State)
	params := ""
	if cfg.Params != "" {
		params = "\n      params:\n        " + cfg.Params
	}
	// An expectation that cannot hold keeps the engine in its window.
	exp := rankExperiment(t, "sigkill-mid-fault", cfg.Job, "    - id: "+cfg.Fault+params, `    - name: never
      probe:
        threshold:
          metric: gpuchaos_job_up
          op: "<"
          value: -1
      within: 10m`, 10*time.Minute)
	l, err := ledger.Open(cfg.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	eng := engine.New(engine.Options{Target: lt, Ledger: l, PollInterval: time.Second, RecoveryWindow: -1, OnEvent: func(ev engine.Event) {
		if ev.Kind == "inject" {
			_ = os.WriteFile(cfg.Ready, []byte(ev.Name+"\n"), 0o644)
		}
	}})
	_, err = eng.Run(t.Context(), exp)
	t.Errorf("the run ended (%v): the test was to kill this process mid-fault", err)
}

// avail returns the bytes an unprivileged writer could still write under
// dir.
func avail(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// lingering lists the files of dir that bad calls bad and that are still
// there 300 ms later: every write has a temporary file, and a data file
// waiting for its manifest, for a moment; only a leftover stays.
func lingering(dir string, bad func(dir, name string) bool) []string {
	list := func() map[string]bool {
		out := map[string]bool{}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if bad(dir, e.Name()) {
				out[e.Name()] = true
			}
		}
		return out
	}
	first := list()
	time.Sleep(300 * time.Millisecond)
	var out []string
	for name := range list() {
		if first[name] {
			out = append(out, name)
		}
	}
	return out
}

// partialFile is a temporary file, or a data file without its manifest.
func partialFile(dir, name string) bool {
	if strings.HasSuffix(name, ".tmp") {
		return true
	}
	base, ok := strings.CutSuffix(name, ".pt")
	if !ok {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, base+".json"))
	return err != nil
}

func rejected(evs []rankEvent, file string) bool {
	for _, e := range evs {
		if e.Event == "checkpoint_rejected" && e.File == file {
			return true
		}
	}
	return false
}
