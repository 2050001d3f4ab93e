package procfault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/childproc"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// TestRecoverWhateverBecameOfTheRank injects each recoverable fault, makes
// its target vanish in each way it can, and checks what Recover says:
// recovered with the rank as before, gone only with the proof of how the
// rank ended, or pending with the record kept.
func TestRecoverWhateverBecameOfTheRank(t *testing.T) {
	t.Parallel()
	exited := func(t *testing.T, r *rank, _ *Injector) {
		_ = r.cmd.Process.Kill()
		err := <-r.done
		r.done <- err
	}
	// reused rewrites the record as if the rank's pid now named another
	// process: the rank itself, seen under another start time.
	reused := func(t *testing.T, r *rank, in *Injector) {
		st := record(t, in, "k")
		st.Proc.StartTicks--
		if st.Confinement != nil {
			st.Confinement.Proc = st.Proc
		}
		if err := in.dir.Write("k", st); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, id, mech string
		raw            map[string]string
		vanish         func(t *testing.T, r *rank, in *Injector)
		want           string // recovered, gone or pending
		proof          string
		// stopped is whether the rank must be left stopped: a recycled
		// pid's process is never continued.
		stopped bool
	}{
		{name: "hang, rank exited", id: idHang, mech: mechSignal, vanish: exited, want: "gone", proof: "has exited: /proc/"},
		{name: "hang, pid reused", id: idHang, mech: mechSignal, vanish: reused, want: "gone", proof: "now names a process started at tick", stopped: true},
		{name: "cgroup-cpu, rank exited", id: idStraggler, mech: mechCgroupCPU, raw: map[string]string{"cpus": "1", "slowdown": "2"},
			vanish: exited, want: "gone", proof: "removed from the cpu hierarchy"},
		{name: "cgroup-cpu, pid reused", id: idStraggler, mech: mechCgroupCPU, raw: map[string]string{"cpus": "1", "slowdown": "2"},
			vanish: reused, want: "gone", proof: "now names a process started at tick"},
		{name: "cgroup-cpu, hierarchy not mounted where recorded", id: idStraggler, mech: mechCgroupCPU, raw: map[string]string{"cpus": "1", "slowdown": "2"},
			vanish: func(t *testing.T, _ *rank, in *Injector) {
				st := record(t, in, "k")
				real := *st.Confinement
				t.Cleanup(func() { _ = real.Release() })
				st.Confinement.Mount = t.TempDir()
				if err := in.dir.Write("k", st); err != nil {
					t.Fatal(err)
				}
			}, want: "pending", proof: "not the cgroup"},
		{name: "duty-cycle, rank exited", id: idStraggler, mech: mechDutyCycle, raw: paceValues(t, 10),
			vanish: exited, want: "gone", proof: "has exited: /proc/"},
		{name: "duty-cycle, pacer not recorded", id: idStraggler, mech: mechDutyCycle, raw: paceValues(t, 10),
			vanish: func(t *testing.T, _ *rank, in *Injector) {
				// As if the injector died between starting the pacer and
				// recording it, and the pacer outlived its Pdeathsig.
				st := record(t, in, "k")
				st.Pacer = nil
				if err := in.dir.Write("k", st); err != nil {
					t.Fatal(err)
				}
			}, want: "recovered"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.mech == mechCgroupCPU {
				if _, err := cgroup.Find("cpu"); err != nil {
					t.Skipf("no cpu cgroup controller: %v", err)
				}
			}
			job := jobName(t)
			r := startRank(t, job, 0, false)
			in := newInjectorOf(t, tc.id, tc.mech, "")
			if err := in.Inject(context.Background(), "k", ref(job, 0), faulttest.Values(t, tc.id, tc.raw)); err != nil {
				t.Fatal(err)
			}
			st := record(t, in, "k")
			tc.vanish(t, r, in)
			// A fresh injector, as the next run has.
			fresh := newInjectorOf(t, tc.id, tc.mech, in.dir.Path())
			err := fresh.Recover(context.Background(), "k")
			kept, _ := fresh.dir.Exists("k")
			switch tc.want {
			case "recovered":
				if err != nil || kept {
					t.Fatalf("Recover = %v (record kept %v), want success", err, kept)
				}
			case "gone":
				if !errors.Is(err, fault.ErrTargetGone) || errors.Is(err, fault.ErrUnproven) || !strings.Contains(err.Error(), tc.proof) || kept {
					t.Fatalf("Recover = %v (record kept %v), want ErrTargetGone with %q", err, kept, tc.proof)
				}
			case "pending":
				if !errors.Is(err, fault.ErrUnproven) || !strings.Contains(err.Error(), tc.proof) || !kept {
					t.Fatalf("Recover = %v (record kept %v), want ErrUnproven with %q and the record kept", err, kept, tc.proof)
				}
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("the error spans lines: %q", err)
			}
			if ok, _ := r.proc.Alive(); ok {
				time.Sleep(20 * time.Millisecond)
				if s := r.state(t); (s == 'T') != tc.stopped {
					t.Errorf("rank in state %c after recovery, want stopped %v", s, tc.stopped)
				}
			}
			if st.Confinement != nil && tc.want != "pending" && st.Confinement.Exists() {
				t.Errorf("our group %s remains", st.Confinement.Dir)
			}
			if tc.mech == mechDutyCycle {
				found, ferr := childproc.Find(in.dir.Mark("k"), os.Args[0])
				if len(found.Procs) > 0 {
					t.Errorf("pacers left after recovery: %v (%v)", found.Procs, ferr)
				}
			}
			if tc.stopped {
				_ = syscall.Kill(r.proc.PID, syscall.SIGCONT)
			}
		})
	}
}

// TestDutyCycleRecoverFindsAnUnrecordedPacerByItsMark checks the mark
// itself: the pacer carries its record's path in its environment.
func TestDutyCycleRecoverFindsAnUnrecordedPacerByItsMark(t *testing.T) {
	t.Parallel()
	job := jobName(t)
	startRank(t, job, 0, false)
	in := newInjectorOf(t, idStraggler, mechDutyCycle, "")
	if err := in.Inject(context.Background(), "k", ref(job, 0), faulttest.Values(t, idStraggler, paceValues(t, 4))); err != nil {
		t.Fatal(err)
	}
	defer in.Recover(context.Background(), "k")
	st := record(t, in, "k")
	found, err := childproc.Find(in.dir.Mark("k"), os.Args[0])
	if err != nil && !errors.Is(err, fault.ErrUnproven) {
		t.Fatal(err)
	}
	if len(found.Procs) != 1 || found.Procs[0] != *st.Pacer {
		t.Fatalf("marked processes %v, want the pacer %v", found.Procs, *st.Pacer)
	}
	if want := filepath.Join(in.dir.Path(), in.dir.Name("k")+".json"); in.dir.Mark("k") != want {
		t.Errorf("mark %q, want the record's path %q", in.dir.Mark("k"), want)
	}
}

// TestHangRecoverContinuesALeaderlessRank stops a rank whose leader thread
// has exited while its other threads run on (a C main that called
// pthread_exit): /proc shows it a zombie, yet its threads stay stopped
// until someone continues them, so it is not gone and Recover must reach
// them.
func TestHangRecoverContinuesALeaderlessRank(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), testutil.LeaderlessEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p, err := procfind.Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	threads := func() (states []byte) {
		tids, _ := procfind.Threads(p.PID)
		for _, tid := range tids {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", p.PID, tid)); err == nil {
				if st, err := procfind.ParseStat(b); err == nil && tid != p.PID {
					states = append(states, st.State)
				}
			}
		}
		return states
	}
	testutil.Eventually(t, 10*time.Second, "a zombie leader with live threads", func() bool { st, _ := procfind.ReadStat(p.PID); return st.State == 'Z' && len(threads()) > 0 })
	if err := syscall.Kill(p.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "every thread stopped", func() bool { return !slices.ContainsFunc(threads(), func(s byte) bool { return s != 'T' }) })
	in := newInjector(t, idHang, "")
	if err := in.dir.Write("k", state{Version: stateVersion, Key: "k", Fault: idHang, Proc: p}); err != nil {
		t.Fatal(err)
	}
	if err := in.Recover(context.Background(), "k"); err != nil {
		t.Fatalf("Recover = %v, want the live threads continued", err)
	}
	testutil.Eventually(t, 10*time.Second, "no thread stopped", func() bool { return !slices.Contains(threads(), 'T') })
}
