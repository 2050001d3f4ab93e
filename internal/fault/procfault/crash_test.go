package procfault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault/internal/childproc"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// TestRecoveryAfterSIGKILLAtRandom is the recovery property for the rank
// faults: an injector killed at a random moment (from before its record
// is written to long after the fault is in), its rank then exiting, its
// pacer then killed, or neither, is recovered by a fresh injector, as the
// next run would: the rank running and back in its own cgroup, no group
// or pacer of ours left, or pending with a reason. Never recovered or
// gone over a leftover.
//
// One rank serves every round it survives: starting one takes a process
// start and its first steps.
func TestRecoveryAfterSIGKILLAtRandom(t *testing.T) {
	t.Parallel()
	rng := testutil.Rand(t)
	dir := t.TempDir()
	job := jobName(t)
	type kind struct {
		id, mech string
		// max bounds the kill's moment: a few times what the injection
		// takes (a signal; a cgroup's files; a pacer's process start).
		max time.Duration
	}
	kinds := []kind{{idHang, mechSignal, 100 * time.Millisecond}, {idStraggler, mechDutyCycle, 800 * time.Millisecond}}
	h, herr := cgroup.Find("cpu")
	if herr == nil {
		kinds = append(kinds, kind{idStraggler, mechCgroupCPU, 100 * time.Millisecond})
	} else {
		t.Logf("no cpu cgroup controller, cgroup-cpu left out: %v", herr)
	}
	var (
		r    *rank
		home string
	)
	fresh := func() {
		r = startRank(t, job, 0, false)
		if herr == nil {
			var err error
			if home, err = cgroup.GroupOf(h, r.proc.PID, r.proc.PID); err != nil {
				t.Fatal(err)
			}
		}
	}
	fresh()
	sp := testutil.NewSpawner(t, "^$", roleEnv+"=injector")
	tally := testutil.Tally{}
	start := time.Now()
	for round := range testutil.CrashRounds {
		key := fmt.Sprintf("crash-%d", round)
		k := kinds[rng.IntN(len(kinds))]
		moment := testutil.Moment(rng, k.max)
		injected := sp.KillAt(t, moment, helperFaultEnv+"="+k.id, helperMechEnv+"="+k.mech, helperStateEnv+"="+dir,
			helperKeyEnv+"="+key, helperPIDEnv+"="+strconv.Itoa(r.proc.PID), helperCPUsEnv+"=1")
		in := newInjectorOf(t, k.id, k.mech, dir)
		way := vanishRank(t, rng, r, in, key, k.mech)
		err := in.Recover(context.Background(), key)
		what := fmt.Sprintf("round %d: %s/%s killed after %s (injected %v), %s", round, k.id, k.mech, moment, injected, way)
		diff := func() string { return rankLeftovers(t, r, in, key, h, home, herr == nil) }
		kept := func() bool { ok, _ := in.dir.Exists(key); return ok }
		verdict := testutil.CheckRecovery(t, what, err, diff, kept, "has exited")
		cut := ""
		if !injected {
			cut = "(cut)"
		}
		tally.Add(k.mech + "/" + way + "/" + verdict + cut)
		if t.Failed() {
			break
		}
		if alive, _ := r.proc.Alive(); !alive || verdict == "pending" {
			_ = syscall.Kill(r.proc.PID, syscall.SIGKILL)
			fresh()
		}
	}
	t.Logf("%d rounds in %s: %s", testutil.CrashRounds, time.Since(start).Round(time.Millisecond), tally)
}

// vanishRank makes the round's target vanish, or not, and says how: the
// rank exits (a quarter of the rounds), or, for a duty-cycle straggler,
// its pacer is SIGKILLed (the OOM killer's way), which may leave the rank
// stopped for recovery to continue.
func vanishRank(t *testing.T, rng *rand.Rand, r *rank, in *Injector, key, mech string) string {
	t.Helper()
	switch n := rng.IntN(4); {
	case n == 0:
		_ = r.cmd.Process.Kill()
		err := <-r.done
		r.done <- err
		return "rank exited"
	case n == 1 && mech == mechDutyCycle:
		found, _ := childproc.Find(in.dir.Mark(key), os.Args[0])
		for _, p := range found.Procs {
			_ = p.Signal(syscall.SIGKILL)
		}
		return "pacer SIGKILLed"
	}
	return "none"
}

// rankLeftovers says what of a fault is left: a rank still stopped, a
// thread outside its own cgroup, our group, a pacer.
func rankLeftovers(t *testing.T, r *rank, in *Injector, key string, h cgroup.Hierarchy, home string, cg bool) string {
	t.Helper()
	var d []string
	if alive, _ := r.proc.Alive(); alive {
		if st, err := r.proc.Stat(); err == nil && st.State == 'T' {
			d = append(d, "rank stopped")
		}
		if cg {
			tids, _ := procfind.Threads(r.proc.PID)
			for _, tid := range tids {
				if g, err := cgroup.GroupOf(h, r.proc.PID, tid); err == nil && g != home {
					d = append(d, fmt.Sprintf("thread %d in %s", tid, g))
				}
			}
		}
	}
	if cg {
		name := cgroup.NamePrefix + in.dir.Name(key)
		for _, parent := range []string{home, path.Dir(home)} {
			if _, err := os.Stat(filepath.Join(h.Mount, parent, name)); err == nil {
				d = append(d, "group "+path.Join(parent, name))
			}
		}
	}
	if found, _ := childproc.Find(in.dir.Mark(key), os.Args[0]); len(found.Procs) > 0 {
		d = append(d, fmt.Sprintf("pacers %v", found.Procs))
	}
	return strings.Join(d, "; ")
}
