package exhaustfault

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault/internal/childproc"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// TestRecoveryAfterSIGKILLAtRandom is the recovery property for the GPU
// load children, run with the fake gpuchaos (no GPU needed): an injector
// of exhaustion.sm-burn killed at a random moment (from before its record
// is written to long after its child is ready), with or without
// Pdeathsig for the child, the child then exiting or not, is recovered by
// a fresh injector, as the next run would: no child of the key left
// running, or pending with a reason. Never recovered over a leftover.
func TestRecoveryAfterSIGKILLAtRandom(t *testing.T) {
	t.Parallel()
	rng := testutil.Rand(t)
	r := newRig(t, "exhaustion.sm-burn", "ready", nil)
	sp := testutil.NewSpawner(t, "^$", roleEnv+"=injector")
	tally := testutil.Tally{}
	start := time.Now()
	for round := range testutil.CrashRounds {
		key := fmt.Sprintf("exp/crash-%d", round)
		noDeath := "0"
		if rng.IntN(3) == 0 {
			noDeath = "1" // the child outlives its injector
		}
		// A child is a process start and its ready line: some hundreds
		// of milliseconds on a loaded machine.
		moment := testutil.Moment(rng, 600*time.Millisecond)
		injected := sp.KillAt(t, moment, helperStateEnv+"="+r.stateDir, helperKeyEnv+"="+key,
			helperNoDeathEnv+"="+noDeath, recordEnv+"="+r.recDir)
		// A child forked without Pdeathsig just before the kill may not
		// have exec'd yet, and cannot be told for what it will be.
		sp.Settle(t)
		way := "none"
		if rng.IntN(4) == 0 {
			way = "child exited"
			for _, pid := range r.alive(t) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		fresh := newRig(t, "exhaustion.sm-burn", "ready", func(o *Options) { o.StateDir = r.stateDir })
		err := fresh.inj.Recover(context.Background(), key)
		what := fmt.Sprintf("round %d: sm-burn killed after %s (injected %v, no pdeathsig %s), %s", round, moment, injected, noDeath, way)
		diff := func() string {
			var d []string
			if left := r.alive(t); len(left) > 0 {
				d = append(d, fmt.Sprintf("children %v", left))
			}
			if found, _ := childproc.Find(r.inj.dir.Mark(key), r.inj.opts.Exec); len(found.Procs) > 0 {
				d = append(d, fmt.Sprintf("marked %v", found.Procs))
			}
			return strings.Join(d, "; ")
		}
		kept := func() bool { return r.stateExists(t, key) }
		verdict := testutil.CheckRecovery(t, what, err, diff, kept)
		cut := ""
		if !injected {
			cut = "(cut)"
		}
		tally.Add(way + "/" + verdict + cut)
		if t.Failed() {
			break
		}
		for _, pid := range r.alive(t) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // after a pending round
		}
	}
	t.Logf("%d rounds in %s: %s", testutil.CrashRounds, time.Since(start).Round(time.Millisecond), tally)
}
