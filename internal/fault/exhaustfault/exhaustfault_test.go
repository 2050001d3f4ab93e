package exhaustfault

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// rig is one injector over the fake gpuchaos, with its directories.
type rig struct {
	inj      *Injector
	stateDir string
	recDir   string
	log      *syncWriter
}

// newRig builds an injector for a fault whose children are fakes in mode.
func newRig(t *testing.T, faultID, mode string, tweak func(*Options)) rig {
	t.Helper()
	f, ok := catalog.Lookup(faultID)
	if !ok {
		t.Fatalf("fault %s is not in the catalogue", faultID)
	}
	name, _ := mechanismOf(faultID)
	r := rig{stateDir: filepath.Join(t.TempDir(), "state"), recDir: t.TempDir(), log: &syncWriter{}}
	o := Options{StateDir: r.stateDir, Log: r.log,
		env: []string{roleEnv + "=fake", modeEnv + "=" + mode, recordEnv + "=" + r.recDir}}
	if tweak != nil {
		tweak(&o)
	}
	inj, err := New(f, f.Mechanism(name), o)
	if err != nil {
		t.Fatal(err)
	}
	r.inj = inj.(*Injector)
	// Whatever a test leaves, its children must not outlive it.
	t.Cleanup(func() {
		for _, rec := range r.records(t) {
			_ = syscall.Kill(rec.PID, syscall.SIGKILL)
		}
	})
	return r
}

// syncWriter lets the injector's log be read while children run.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// records are the fakes started so far, from their own reports.
func (r rig) records(t *testing.T) []fakeRecord {
	t.Helper()
	ents, err := os.ReadDir(r.recDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []fakeRecord
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".json" {
			continue // a fake killed before it renamed its record into place
		}
		b, err := os.ReadFile(filepath.Join(r.recDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var rec fakeRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		out = append(out, rec)
	}
	return out
}

// alive returns the pids of recorded fakes that still run, looking at
// /proc rather than asking the injector.
func (r rig) alive(t *testing.T) []int {
	t.Helper()
	var out []int
	for _, rec := range r.records(t) {
		if st, err := procfind.ReadStat(rec.PID); err == nil && st.State != 'Z' && st.State != 'X' {
			out = append(out, rec.PID)
		}
	}
	return out
}

func (r rig) statePath(key string) string { return r.inj.dir.File(key) }

func (r rig) stateExists(t *testing.T, key string) bool {
	t.Helper()
	_, err := os.Stat(r.statePath(key))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// shortHold makes the children's own duration a minute, so nothing a
// failing test leaves runs for long.
func shortHold() context.Context {
	return fault.WithHoldUntil(context.Background(), time.Now())
}

var smBurnValues = catalog.Values{"load": 0.5, "ceiling": int64(85)}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault  string
		values catalog.Values
	}{
		{"exhaustion.sm-burn", smBurnValues},
		{"exhaustion.thermal-soak", catalog.Values{"ceiling": int64(87)}},
		{"exhaustion.vram", catalog.Values{"fraction": 0.9}},
		{"exhaustion.pcie", catalog.Values{"rate": int64(25e9)}},
		{"exhaustion.noisy-neighbour", catalog.Values{"share": 0.5, "memory": 0.1}},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			faulttest.Run(t, func(t *testing.T) faulttest.Env {
				r := newRig(t, tc.fault, "ready", nil)
				return faulttest.Env{
					Injector: r.inj,
					Ref:      inventory.Ref{Kind: catalog.ScopeGPU, GPU: 1},
					Values:   tc.values,
					Applied:  func(string) bool { return len(r.alive(t)) > 0 },
					Vanish: func() {
						for _, pid := range r.alive(t) {
							_ = syscall.Kill(pid, syscall.SIGKILL)
						}
					},
				}
			})
		})
	}
}

func TestInjectStartsTheCommands(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fault  string
		values catalog.Values
		want   [][]string // argv after the binary, in start order
	}{
		{name: "sm-burn", fault: "exhaustion.sm-burn", values: smBurnValues,
			want: [][]string{{"burn", "--gpus", "2", "--duration", "60s", "--duty", "0.5", "--temp-ceiling", "85", "--format", "json", "--ready-fd", "3"}}},
		{name: "neighbour with memory", fault: "exhaustion.noisy-neighbour", values: catalog.Values{"share": 0.3, "memory": 0.2},
			want: [][]string{
				{"burn", "--gpus", "2", "--duration", "60s", "--duty", "0.3", "--temp-ceiling", "85", "--format", "json", "--ready-fd", "3"},
				{"exhaust", "vram", "--gpu", "2", "--fraction", "0.2", "--duration", "60s", "--format", "json", "--ready-fd", "3"},
			}},
		{name: "neighbour without memory", fault: "exhaustion.noisy-neighbour", values: catalog.Values{"share": 0.3, "memory": 0.0},
			want: [][]string{{"burn", "--gpus", "2", "--duration", "60s", "--duty", "0.3", "--temp-ceiling", "85", "--format", "json", "--ready-fd", "3"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, tc.fault, "ready", nil)
			const key = "exp/argv"
			if err := r.inj.Inject(shortHold(), key, inventory.Ref{GPU: 2}, tc.values); err != nil {
				t.Fatal(err)
			}
			st, err := readState(r.inj.dir, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Children) != len(tc.want) {
				t.Fatalf("state records %d children, want %d", len(st.Children), len(tc.want))
			}
			alive := r.alive(t)
			for i, c := range st.Children {
				if !slices.Equal(c.Argv[1:], tc.want[i]) {
					t.Errorf("child %d argv %q, want %q", i, c.Argv[1:], tc.want[i])
				}
				if !slices.Contains(alive, c.PID) {
					t.Errorf("child %d (pid %d) is not running", i, c.PID)
				}
			}
			var seen [][]string
			for _, rec := range r.records(t) {
				seen = append(seen, rec.Argv)
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(seen, func(a []string) bool { return slices.Equal(a, w) }) {
					t.Errorf("no fake saw argv %q (saw %q)", w, seen)
				}
			}
			if err := r.inj.Recover(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			if a := r.alive(t); len(a) != 0 {
				t.Errorf("pids %v still run after recover", a)
			}
			if r.stateExists(t, key) {
				t.Error("state file left after recover")
			}
			if _, err := os.Stat(strings.TrimSuffix(r.statePath(key), ".json") + ".log"); err != nil {
				t.Errorf("the log should stay after recover: %v", err)
			}
		})
	}
}

func TestInjectFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		fault    string
		values   catalog.Values
		mode     string
		ctx      func(t *testing.T) context.Context
		wantErr  []string
		wantIs   error
		children int // fakes that must have started
		// ready is the ready timeout; 0 means one long enough for a
		// loaded machine, so that only "never ready" depends on it.
		ready time.Duration
	}{
		{name: "exits before ready", fault: "exhaustion.sm-burn", values: smBurnValues, mode: "fail",
			wantErr: []string{"exited before it was ready", "exit status 1", "log", "no CUDA driver found (libcuda.so.1)"}, children: 1},
		{name: "second child fails, first is stopped", fault: "exhaustion.noisy-neighbour", values: catalog.Values{"share": 0.5, "memory": 0.5},
			mode: "vram=fail", wantErr: []string{"exited before it was ready", "fake vram: no CUDA driver"}, children: 2},
		{name: "never ready", fault: "exhaustion.vram", values: catalog.Values{"fraction": 0.5}, mode: "hang",
			// Long enough for the fake to have started and recorded itself
			// on a loaded machine (300 ms was not, under a parallel CI).
			wantErr: []string{"not ready after 2s"}, children: 1, ready: 2 * time.Second},
		{name: "cancelled while waiting", fault: "exhaustion.pcie", values: catalog.Values{"rate": int64(1e9)}, mode: "hang",
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithTimeout(shortHold(), 2*time.Second)
				t.Cleanup(cancel)
				return ctx
			}, wantIs: context.DeadlineExceeded, children: 1},
		{name: "bad value starts nothing", fault: "exhaustion.sm-burn", values: catalog.Values{"load": 1.5, "ceiling": int64(85)}, mode: "ready",
			wantErr: []string{"load 1.5"}, children: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ready := tc.ready
			if ready == 0 {
				ready = 30 * time.Second
			}
			r := newRig(t, tc.fault, tc.mode, func(o *Options) { o.readyTimeout = ready })
			ctx := shortHold()
			if tc.ctx != nil {
				ctx = tc.ctx(t)
			}
			const key = "exp/fail"
			err := r.inj.Inject(ctx, key, inventory.Ref{GPU: 0}, tc.values)
			if err == nil {
				t.Fatal("inject succeeded")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %v is not %v", err, tc.wantIs)
			}
			if n := len(r.records(t)); n != tc.children {
				t.Errorf("%d fakes started, want %d", n, tc.children)
			}
			if a := r.alive(t); len(a) != 0 {
				t.Errorf("pids %v still run after a failed inject", a)
			}
			if r.stateExists(t, key) {
				t.Error("a failed inject left its state file")
			}
			// The key can be injected afresh once the cause is gone.
			if err := r.inj.Recover(context.Background(), key); err != nil {
				t.Errorf("recover after a failed inject: %v", err)
			}
		})
	}
}

// TestChildThatEndsByItself: a burn stopped by its ceiling has ended when
// the engine recovers; that is success.
func TestChildThatEndsByItself(t *testing.T) {
	t.Parallel()
	r := newRig(t, "exhaustion.thermal-soak", "exit", nil)
	const key = "exp/self"
	if err := r.inj.Inject(shortHold(), key, inventory.Ref{GPU: 0}, catalog.Values{"ceiling": int64(87)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(r.alive(t)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := r.inj.Recover(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if r.stateExists(t, key) {
		t.Error("state file left after recover")
	}
	// A second inject of the recovered key starts a child again.
	if err := r.inj.Inject(shortHold(), key, inventory.Ref{GPU: 0}, catalog.Values{"ceiling": int64(87)}); err != nil {
		t.Fatal(err)
	}
	if n := len(r.records(t)); n != 2 {
		t.Errorf("%d fakes started over two injects, want 2", n)
	}
	if err := r.inj.Recover(context.Background(), key); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverEscalatesToSIGKILL: a child that ignores SIGTERM gets
// SIGKILL once the grace is over.
func TestRecoverEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	const grace = 300 * time.Millisecond
	r := newRig(t, "exhaustion.vram", "ignore-term", func(o *Options) { o.termGrace = grace })
	const key = "exp/kill"
	if err := r.inj.Inject(shortHold(), key, inventory.Ref{GPU: 0}, catalog.Values{"fraction": 0.5}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := r.inj.Recover(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < grace {
		t.Errorf("recover took %s, less than the grace: SIGTERM should not have ended the child", took)
	}
	if a := r.alive(t); len(a) != 0 {
		t.Errorf("pids %v survived recover", a)
	}
	if !strings.Contains(r.log.String(), "sent SIGKILL to process group") {
		t.Errorf("log %q does not show SIGKILL", r.log.String())
	}
}

// TestRecoverAfterInjectorKilled injects from a separate process, SIGKILLs
// it, and recovers from a fresh injector over the same state directory.
// With Pdeathsig the orphan dies with the injector's thread; without it
// the orphan lives on and only the state file's pid and start time find
// it.
func TestRecoverAfterInjectorKilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		pdeathsig bool
	}{{"with pdeathsig", true}, {"through /proc alone", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, "exhaustion.sm-burn", "ready", nil)
			const key = "exp/crash"
			noDeath := "0"
			if !tc.pdeathsig {
				noDeath = "1"
			}
			helper := exec.Command(os.Args[0])
			helper.Env = append(os.Environ(), roleEnv+"=injector", helperStateEnv+"="+r.stateDir,
				helperKeyEnv+"="+key, helperNoDeathEnv+"="+noDeath, recordEnv+"="+r.recDir)
			out, err := helper.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			helper.Stderr = &stderr
			if err := helper.Start(); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(out)
			line := readLine(t, br)
			if line == testutil.StartingLine {
				line = readLine(t, br)
			}
			if line != testutil.InjectedLine {
				_ = helper.Process.Kill()
				_ = helper.Wait()
				t.Fatalf("helper said %q (stderr %q)", line, stderr.String())
			}
			st, err := readState(r.inj.dir, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Children) != 1 {
				t.Fatalf("state records %d children, want 1", len(st.Children))
			}
			orphan := st.Children[0]
			if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = helper.Wait()
			if tc.pdeathsig {
				// The kernel kills the orphan as the helper's threads die.
				testutil.Eventually(t, 10*time.Second, "the orphan to end", func() bool { ok, _ := running(orphan); return !ok })
			} else if ok, err := running(orphan); err != nil || !ok {
				t.Fatalf("without pdeathsig the orphan should outlive its injector (running %v, %v)", ok, err)
			}
			fresh := newRig(t, "exhaustion.sm-burn", "ready", func(o *Options) { o.StateDir = r.stateDir })
			if err := fresh.inj.Recover(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			if ok, err := running(orphan); err != nil || ok {
				t.Errorf("orphan pid %d still running after recover (%v)", orphan.PID, err)
			}
			if r.stateExists(t, key) {
				t.Error("state file left after recover")
			}
		})
	}
}

// TestRecoverSparesARecycledPID: a state file naming a live process with
// another start time (the child died, its pid went to someone else) must
// not signal that process.
func TestRecoverSparesARecycledPID(t *testing.T) {
	t.Parallel()
	r := newRig(t, "exhaustion.vram", "ready", nil)
	bystander := exec.Command(os.Args[0])
	bystander.Env = append(os.Environ(), roleEnv+"=sleeper")
	bystander.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = bystander.Wait(); close(exited) }()
	t.Cleanup(func() { _ = bystander.Process.Kill(); <-exited })
	stat, err := procfind.ReadStat(bystander.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	const key = "exp/recycled"
	st := state{Version: stateVersion, Key: key, Fault: "exhaustion.vram", Created: time.Now(),
		Children: []childRecord{{PID: bystander.Process.Pid, StartTicks: stat.StartTicks + 1, Argv: []string{"gpuchaos", "exhaust", "vram"}}}}
	if err := r.inj.dir.Write(key, st); err != nil {
		t.Fatal(err)
	}
	if err := r.inj.Recover(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Fatalf("the bystander with a recycled pid was stopped: %v", waitErr)
	case <-time.After(200 * time.Millisecond):
	}
	if r.stateExists(t, key) {
		t.Error("state file left after recover")
	}
}

func TestRecoverRefusesABadStateFile(t *testing.T) {
	t.Parallel()
	r := newRig(t, "exhaustion.vram", "ready", nil)
	const key = "exp/bad"
	if err := os.WriteFile(r.statePath(key), []byte(`{"version":1,"key":"exp/bad","children":[{"pid":-1,"start_ticks":5,"argv":["x"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := r.inj.Recover(context.Background(), key)
	if err == nil || !strings.Contains(err.Error(), "pid -1") {
		t.Fatalf("recover = %v, want an error naming pid -1", err)
	}
	if !r.stateExists(t, key) {
		t.Error("a state file that could not be read was removed")
	}
}

func TestConcurrentKeys(t *testing.T) {
	t.Parallel()
	r := newRig(t, "exhaustion.pcie", "ready", nil)
	keys := []string{"exp/a", "exp/b", "exp/c"}
	errs := make(chan error, len(keys))
	for i, k := range keys {
		go func() {
			errs <- r.inj.Inject(shortHold(), k, inventory.Ref{GPU: i}, catalog.Values{"rate": int64(1e9)})
		}()
	}
	for range keys {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.alive(t)); n != len(keys) {
		t.Fatalf("%d children run, want %d", n, len(keys))
	}
	for _, k := range keys {
		if err := r.inj.Recover(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	if a := r.alive(t); len(a) != 0 {
		t.Errorf("pids %v survived recover", a)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	burn, _ := catalog.Lookup("exhaustion.sm-burn")
	xid, _ := catalog.Lookup("hardware.xid")
	dir := t.TempDir()
	tests := []struct {
		name    string
		f       *catalog.Fault
		mech    string
		o       Options
		wantErr string
	}{
		{name: "ok", f: burn, mech: "burn", o: Options{StateDir: dir}},
		{name: "not an exhaustion fault", f: xid, mech: "kernel-log", o: Options{StateDir: dir}, wantErr: "not run as a child process"},
		{name: "wrong mechanism", f: burn, mech: "twin", o: Options{StateDir: dir}, wantErr: "mechanism twin"},
		{name: "no state dir", f: burn, mech: "burn", wantErr: "state directory"},
		{name: "missing binary", f: burn, mech: "burn", o: Options{StateDir: dir, Exec: filepath.Join(dir, "nope")}, wantErr: "not an executable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &catalog.Mechanism{Name: tc.mech}
			_, err := New(tc.f, m, tc.o)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}
