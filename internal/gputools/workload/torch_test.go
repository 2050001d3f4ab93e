package workload

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// These tests run the embedded train.py with Debian's PyTorch on CPU
// (gloo, two ranks), as CI does after scripts/setup-torch. Each is a few
// seconds of real training on two cores.

// rankLine is one JSON line a rank prints.
type rankLine struct {
	Event       string  `json:"event"`
	Time        float64 `json:"time"`
	Rank        int     `json:"rank"`
	Step        int64   `json:"step"`
	ResumedFrom int64   `json:"resumed_from_step"`
	Restart     int     `json:"restart"`
	File        string  `json:"file"`
	Reason      string  `json:"reason"`
	Error       string  `json:"error"`
	Failures    int     `json:"checkpoint_failures"`
	StepsPerSec float64 `json:"steps_per_second"`
	ParamsSHA   string  `json:"params_sha256"`
	// Attempt is not printed: parseRankLines fills it in from the
	// "start" lines, since the supervisor reaps one attempt's ranks
	// before it starts the next.
	Attempt int `json:"-"`
}

func parseRankLines(t *testing.T, out string) []rankLine {
	t.Helper()
	var lines []rankLine
	attempt := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		_, js, ok := strings.Cut(sc.Text(), "] ")
		if !ok || !strings.HasPrefix(js, "{") {
			continue // tracebacks and warnings
		}
		var l rankLine
		if err := json.Unmarshal([]byte(js), &l); err != nil {
			continue
		}
		if l.Event == "start" {
			attempt = l.Restart
		}
		l.Attempt = attempt
		lines = append(lines, l)
	}
	return lines
}

func find(lines []rankLine, f func(rankLine) bool) []rankLine {
	var out []rankLine
	for _, l := range lines {
		if f(l) {
			out = append(out, l)
		}
	}
	return out
}

func requireTorch(t *testing.T) {
	t.Helper()
	out, err := exec.Command(DefaultPython, "-c", "import torch, torch.distributed as d; assert d.is_available(); print(torch.__version__)").CombinedOutput()
	if err != nil {
		t.Skipf("%s cannot import torch.distributed (scripts/setup-torch installs Debian's python3-torch): %v: %s",
			DefaultPython, err, lastLine(string(out)))
	}
	t.Logf("torch %s", strings.TrimSpace(string(out)))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// runJob runs the supervisor over train.py and returns its result, the
// ranks' lines and the events.
type jobRun struct {
	res    Result
	err    error
	lines  []rankLine
	events []Event
	output string
}

func runJob(ctx context.Context, t *testing.T, o Options, tr Train) jobRun {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	var out, events testutil.LockedBuffer
	o.Ranks = 2
	o.Args = tr.Args()
	o.Output, o.Events = &out, &events
	if o.Grace == 0 {
		o.Grace = 2 * time.Second
	}
	if o.Job == "" {
		o.Job = "torchtest-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	}
	ctx, cancel := context.WithTimeout(ctx, 80*time.Second)
	defer cancel()
	res, err := Run(ctx, o)
	jr := jobRun{res: res, err: err, output: out.String(), events: parseEvents(t, events.String())}
	jr.lines = parseRankLines(t, jr.output)
	if left, ferr := procfind.Ranks(o.Job); ferr != nil || len(left) > 0 {
		t.Errorf("ranks left after Run: %+v %v", left, ferr)
	}
	return jr
}

func (j jobRun) failf(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Fatalf(format+"\n--- rank output ---\n%s", append(args, tail(j.output, 60))...)
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// dirFiles lists the names in dir, sorted.
func dirFiles(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

func TestTorchWorkload(t *testing.T) {
	requireTorch(t)
	const every = 20
	var cleanSHA string

	for _, mode := range []string{ModeSync, ModeAsync} {
		t.Run("clean run "+mode, func(t *testing.T) {
			dir := t.TempDir()
			j := runJob(context.Background(), t, Options{}, Train{Backend: "gloo", Steps: 80, CkptDir: dir, CkptEvery: every, CkptMode: mode, Keep: 3, LogEvery: 10})
			if j.err != nil || j.res.Restarts != 0 {
				j.failf(t, "Run: %v, %d restarts", j.err, j.res.Restarts)
			}
			saved := find(j.lines, func(l rankLine) bool { return l.Event == "checkpoint_saved" })
			var steps []int64
			for _, l := range saved {
				steps = append(steps, l.Step)
			}
			if !slices.Equal(steps, []int64{20, 40, 60, 80}) {
				t.Errorf("checkpoints saved at %v, want every %d steps to 80", steps, every)
			}
			want := []string{"ckpt-40.json", "ckpt-40.pt", "ckpt-60.json", "ckpt-60.pt", "ckpt-80.json", "ckpt-80.pt"}
			if got := dirFiles(t, dir); !slices.Equal(got, want) {
				t.Errorf("directory holds %v, want the newest 3 checkpoints %v", got, want)
			}
			for _, s := range []int64{40, 60, 80} {
				m, err := Verify(dir, s)
				if err != nil {
					t.Errorf("Go verifier rejects a checkpoint train.py wrote: %v", err)
				}
				if m.Mode != mode || m.WorldSize != 2 {
					t.Errorf("manifest %+v, want mode %s world 2", m, mode)
				}
			}
			done := find(j.lines, func(l rankLine) bool { return l.Event == "done" })
			if len(done) != 2 || done[0].Step != 80 || done[0].ParamsSHA == "" || done[0].ParamsSHA != done[1].ParamsSHA {
				j.failf(t, "done lines %+v: want both ranks at step 80 with equal parameters", done)
			}
			t.Logf("%s: %.1f steps/s (rank 0, 2 ranks, gloo)", mode, done[0].StepsPerSec)
			// Synchronous and asynchronous checkpoints train the same
			// model: the snapshot must not disturb the training.
			if cleanSHA != "" && done[0].ParamsSHA != cleanSHA {
				t.Errorf("%s run ends with parameters %s, the sync run with %s", mode, done[0].ParamsSHA, cleanSHA)
			}
			cleanSHA = done[0].ParamsSHA
		})
	}

	t.Run("kill rank resumes from newest checkpoint", func(t *testing.T) {
		dir := t.TempDir()
		port := freePortPair(t)
		job := "torchtest-kill"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		started := make(chan []int, 4)
		type killInfo struct {
			pid    int
			at     time.Time
			steps  [2]float64
			series map[string]bool
			err    error
		}
		killed := make(chan killInfo, 1)
		go func() {
			ki := killInfo{series: map[string]bool{}}
			defer func() { killed <- ki }()
			var pids []int
			select {
			case pids = <-started:
			case <-ctx.Done():
				ki.err = errors.New("the ranks never started")
				return
			}
			// Watch rank 0's step rise past two checkpoints, through
			// its metrics endpoint.
			deadline := time.Now().Add(40 * time.Second)
			for time.Now().Before(deadline) {
				fams, err := scrapeFamilies(port)
				if err == nil && familyValue(fams, "gpuchaos_job_step_total") >= 45 {
					if ki.steps[0] == 0 {
						ki.steps[0] = familyValue(fams, "gpuchaos_job_step_total")
						for name := range fams {
							ki.series[name] = true
						}
						if f1, err := scrapeFamilies(port + 1); err == nil {
							for name := range f1 {
								ki.series[name+"@1"] = true
							}
						}
						time.Sleep(100 * time.Millisecond)
						continue
					}
					ki.steps[1] = familyValue(fams, "gpuchaos_job_step_total")
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Find rank 1 the way a fault injector does.
			ranks, err := procfind.Ranks(job)
			if err != nil {
				ki.err = err
				return
			}
			for _, r := range ranks {
				if restart, _ := procfind.Environ(r.Env).Lookup(EnvRestart); r.Rank == 1 && r.Main && restart == "0" {
					ki.pid = r.PID
				}
			}
			if ki.pid != pids[1] {
				ki.err = fmt.Errorf("procfind.Ranks found rank 1 at pid %d, the supervisor started it as %d (%+v)", ki.pid, pids[1], ranks)
				return
			}
			ki.at = time.Now()
			ki.err = syscall.Kill(ki.pid, syscall.SIGKILL)
		}()
		j := runJob(ctx, t, Options{Job: job, MaxRestarts: 2, Started: func(_ int, pids []int) { started <- pids }},
			Train{Backend: "gloo", Steps: 80, CkptDir: dir, CkptEvery: every, LogEvery: 1, MetricsPort: port})
		cancel()
		ki := <-killed
		if ki.err != nil {
			j.failf(t, "kill: %v", ki.err)
		}
		if j.err != nil || j.res.Restarts != 1 {
			j.failf(t, "Run: %v, %d restarts; want success after 1 restart", j.err, j.res.Restarts)
		}

		// Metrics: the twin's series on rank 0, the rank series on both,
		// and the step rising between two scrapes.
		for _, name := range []string{"gpuchaos_job_step_total", "gpuchaos_job_steps_per_second", "gpuchaos_job_up",
			"gpuchaos_job_last_checkpoint_step", "gpuchaos_job_last_checkpoint_timestamp_seconds",
			"gpuchaos_job_checkpoint_failures_total", "gpuchaos_job_resumed_from_step", "gpuchaos_rank_step_seconds",
			"gpuchaos_rank_step_seconds@1", "gpuchaos_job_step_total@1"} {
			if !ki.series[name] {
				t.Errorf("metrics lack %s (rank 0 unless @1)", name)
			}
		}
		if ki.steps[1] <= ki.steps[0] {
			t.Errorf("gpuchaos_job_step_total did not rise: %v", ki.steps)
		}

		// Lost work: the steps done before the kill that the resumed run
		// computes again.
		before := find(j.lines, func(l rankLine) bool { return l.Attempt == 0 && l.Event == "step" })
		var lastBefore int64
		for _, l := range before {
			lastBefore = max(lastBefore, l.Step)
		}
		resumed := find(j.lines, func(l rankLine) bool { return l.Attempt == 1 && l.Event == "start" && l.Rank == 0 })
		if len(resumed) != 1 {
			j.failf(t, "no start line of attempt 1")
		}
		from := resumed[0].ResumedFrom
		lost := lastBefore - from
		if from == 0 || from%every != 0 || lost < 0 || lost > every {
			j.failf(t, "last step before the kill %d, resumed from %d: lost work %d steps, want a checkpoint step and at most %d", lastBefore, from, lost, every)
		}
		var exitAt, restartAt time.Time
		for _, e := range j.events {
			if e.Event == "exit" && e.Rank != nil && *e.Rank == 1 && e.Attempt == 0 {
				exitAt = e.Time
			}
			if e.Event == "restart" {
				restartAt = e.Time
			}
		}
		firstAfter := find(j.lines, func(l rankLine) bool { return l.Attempt == 1 && l.Event == "step" })
		if len(firstAfter) == 0 || exitAt.IsZero() || restartAt.IsZero() {
			j.failf(t, "no step after the restart, or no exit/restart event")
		}
		back := time.Unix(0, int64(firstAfter[0].Time*1e9)).Sub(ki.at)
		t.Logf("kill -9 rank 1 at step %d; last step before %d; resumed from %d: lost work %d steps (interval %d); "+
			"supervisor saw the exit after %v, restarted after %v more; first step after resume %v after the kill",
			int64(ki.steps[1]), lastBefore, from, lost, every, exitAt.Sub(ki.at).Round(time.Millisecond),
			restartAt.Sub(exitAt).Round(time.Millisecond), back.Round(time.Millisecond))

		done := find(j.lines, func(l rankLine) bool { return l.Event == "done" })
		if len(done) != 2 || done[0].Step != 80 {
			j.failf(t, "done lines %+v", done)
		}
		// Resuming recomputes exactly what was lost: the run ends where an
		// uninterrupted one does.
		if cleanSHA != "" && done[0].ParamsSHA != cleanSHA {
			t.Errorf("resumed run ends with parameters %s, the uninterrupted run with %s", done[0].ParamsSHA, cleanSHA)
		}
	})

	t.Run("torn and corrupted newest are rejected", func(t *testing.T) {
		dir := t.TempDir()
		tr := Train{Backend: "gloo", Steps: 60, CkptDir: dir, CkptEvery: every, LogEvery: 20}
		if j := runJob(context.Background(), t, Options{}, tr); j.err != nil {
			j.failf(t, "first run: %v", j.err)
		}
		// corrupt-newest: one byte of ckpt-60 flipped; kill-writer: a
		// temporary file cut short, and a data file renamed in place
		// whose manifest never was.
		p := filepath.Join(dir, DataName(60))
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/3] ^= 0xff
		b40, err := os.ReadFile(filepath.Join(dir, DataName(40)))
		if err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string][]byte{DataName(60): b, DataName(70): b40, "ckpt-80.pt.tmp": b40[:len(b40)/2]} {
			if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if cp, ok, err := Newest(dir); err != nil || !ok || cp.Step != 40 {
			t.Fatalf("Go verifier picks %d, %v, %v; want 40", cp.Step, ok, err)
		}

		tr.Steps = 80
		j := runJob(context.Background(), t, Options{}, tr)
		if j.err != nil {
			j.failf(t, "second run: %v", j.err)
		}
		rejected := map[string]string{}
		for _, l := range find(j.lines, func(l rankLine) bool { return l.Event == "checkpoint_rejected" }) {
			rejected[l.File] = l.Reason
			t.Logf("rejected %s: %s", l.File, l.Reason)
		}
		for file, why := range map[string]string{"ckpt-80.pt.tmp": "unfinished write", "ckpt-70.pt": "no manifest", "ckpt-60.pt": "corrupted"} {
			if !strings.Contains(rejected[file], why) {
				t.Errorf("%s rejected for %q, want a reason saying %q", file, rejected[file], why)
			}
		}
		start := find(j.lines, func(l rankLine) bool { return l.Event == "start" })
		if len(start) != 2 || start[0].ResumedFrom != 40 || start[1].ResumedFrom != 40 {
			j.failf(t, "start lines %+v, want both ranks resumed from 40", start)
		}
		if cp, ok, err := Newest(dir); err != nil || !ok || cp.Step != 80 {
			t.Errorf("after the run the newest valid checkpoint is %d, %v, %v; want 80", cp.Step, ok, err)
		}
		for _, name := range dirFiles(t, dir) {
			if strings.HasSuffix(name, ".tmp") || name == DataName(70) {
				t.Errorf("%s left in the directory", name)
			}
		}
	})

	for _, tc := range []struct {
		name   string
		policy string
		mode   string
	}{
		{name: "full volume continue", policy: OnSaveErrorContinue, mode: ModeSync},
		{name: "full volume exit", policy: OnSaveErrorExit, mode: ModeAsync},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, errno := unwritableDir(t)
			tr := Train{Backend: "gloo", CkptDir: dir, CkptEvery: every, CkptMode: tc.mode, OnSaveError: tc.policy, LogEvery: 20}
			o := Options{}
			if tc.policy == OnSaveErrorContinue {
				// Runs for a time, not a step count: also proves every
				// rank leaves the loop at the same step.
				tr.Duration = 2 * time.Second
			} else {
				tr.Steps = 40
				o.MaxRestarts = 1
			}
			j := runJob(context.Background(), t, o, tr)
			failed := find(j.lines, func(l rankLine) bool { return l.Event == "checkpoint_failed" })
			if len(failed) == 0 {
				j.failf(t, "no checkpoint_failed line")
			}
			for _, l := range failed {
				if !strings.Contains(l.Error, errno) {
					t.Errorf("checkpoint_failed error %q, want %q", l.Error, errno)
				}
			}
			if got := dirFiles(t, dir); len(got) != 0 {
				t.Errorf("failed saves left %v", got)
			}
			if tc.policy == OnSaveErrorContinue {
				done := find(j.lines, func(l rankLine) bool { return l.Event == "done" })
				if j.err != nil || len(done) != 2 || done[0].Step != done[1].Step {
					j.failf(t, "Run %v, done lines %+v: want success, both ranks at one step", j.err, done)
				}
				r0 := find(done, func(l rankLine) bool { return l.Rank == 0 })[0]
				if want := int(r0.Step / every); r0.Failures != want || want == 0 {
					t.Errorf("rank 0 counted %d failures at step %d, want %d", r0.Failures, r0.Step, want)
				}
				return
			}
			if !errors.Is(j.err, ErrRestartsExhausted) || j.res.Restarts != 1 {
				j.failf(t, "Run: %v, %d restarts; want restarts exhausted after 1", j.err, j.res.Restarts)
			}
			// Rank 0 (the one that saves) exits with the save-failed
			// status and the others fail after it, their peer gone. Exits
			// are in the order the supervisor reaped them, which a loaded
			// machine can swap when both end within a moment, so the test
			// holds the statuses, not the order.
			for _, a := range j.res.Attempts {
				var saveFailed []int
				for _, e := range a.Exits {
					if e.Code == ExitSaveFailed {
						saveFailed = append(saveFailed, e.Rank)
					}
				}
				if !slices.Equal(saveFailed, []int{0}) {
					t.Errorf("attempt %d exits %+v: ranks %v exited with status %d, want rank 0 alone", a.Number, a.Exits, saveFailed, ExitSaveFailed)
				}
			}
		})
	}
}

// unwritableDir returns a checkpoint directory where a write fails for
// real, and the error text expected: a 1 MiB tmpfs (a checkpoint is 2 MiB)
// when root, as a full volume does, or a read-only directory otherwise
// (root ignores permissions).
func unwritableDir(t *testing.T) (string, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		return dir, "Permission denied"
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir, "No space left on device"
}

// freePortPair finds a port p with p and p+1 free, for two ranks'
// metrics endpoints.
func freePortPair(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no two adjacent free ports")
	return 0
}

func scrapeFamilies(port int) (map[string]float64, error) {
	body := scrape("127.0.0.1:" + strconv.Itoa(port))
	if body == "" {
		return nil, errors.New("no answer")
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out, nil
}

func familyValue(f map[string]float64, name string) float64 { return f[name] }
