package numafault

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault/internal/childproc"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// TestRecoveryAfterSIGKILLAtRandom is the recovery property for the NUMA
// faults this machine runs: an injector killed at a random moment (from
// before its record is written to long after the fault is in), with or
// without Pdeathsig for its hog, the target then exiting or not, is
// recovered by a fresh injector, as the next run would: no hog left and
// every thread of the rank on its own CPUs, or pending with a reason.
// Never recovered or gone over a leftover. wrong-affinity moves a
// sleeper's threads to CPU 1, "node 1" of a made-up tree; one sleeper
// serves every round it survives.
func TestRecoveryAfterSIGKILLAtRandom(t *testing.T) {
	t.Parallel()
	rng := testutil.Rand(t)
	dir, root := t.TempDir(), fakeTwoNodes(t)
	var (
		rank *exec.Cmd
		mask []int // every thread's CPUs before the fault
	)
	fresh := func() {
		rank = sleeper(t, "crash-"+newTag(t))
		waitThreads(t, rank.Process.Pid)
		ms := threadMasks(t, rank.Process.Pid)
		mask = ms[rank.Process.Pid]
	}
	fresh()
	sp := testutil.NewSpawner(t, "^$", roleEnv+"=crash-injector")
	tally := testutil.Tally{}
	start := time.Now()
	for round := range testutil.CrashRounds {
		key := fmt.Sprintf("crash/%d", round)
		tag := newTag(t)
		id, nodes, max := "numa.wrong-affinity", root, 60*time.Millisecond
		if rng.IntN(3) == 0 {
			// A hog is a process start and 8 MiB touched and checked,
			// most of a second on a loaded machine.
			id, nodes, max = "numa.memory-pressure", "", 1500*time.Millisecond
		}
		pdeath := "on"
		if rng.IntN(3) == 0 {
			pdeath = "off" // the hog outlives its injector
		}
		moment := testutil.Moment(rng, max)
		injected := sp.KillAt(t, moment, faultEnv+"="+id, stateEnv+"="+dir, keyEnv+"="+key, tagEnv+"="+tag,
			pidEnv+"="+strconv.Itoa(rank.Process.Pid), nodesEnv+"="+nodes, pdeathEnv+"="+pdeath)
		// A child forked without Pdeathsig just before the kill may not
		// have exec'd yet, and cannot be told for what it will be.
		sp.Settle(t)
		f, m := lookup(t, id)
		fi, err := New(f, m, Options{StateDir: dir, Exec: os.Args[0], SysNodeDir: nodes, termGrace: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		in := fi.(*Injector)
		way := "none"
		if rng.IntN(4) == 0 {
			way = "target exited"
			if id == "numa.memory-pressure" {
				for _, pid := range tagged(t, tag) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			} else {
				_ = rank.Process.Kill()
				_ = rank.Wait()
			}
		}
		err = in.Recover(context.Background(), key)
		what := fmt.Sprintf("round %d: %s killed after %s (injected %v, pdeathsig %s), %s", round, id, moment, injected, pdeath, way)
		diff := func() string {
			var d []string
			if left := tagged(t, tag); len(left) > 0 {
				d = append(d, fmt.Sprintf("hogs %v", left))
			}
			if found, _ := childproc.Find(in.dir.Mark(key), os.Args[0]); len(found.Procs) > 0 {
				d = append(d, fmt.Sprintf("marked %v", found.Procs))
			}
			for tid, cpus := range threadMasks(t, rank.Process.Pid) {
				if !slices.Equal(cpus, mask) {
					d = append(d, fmt.Sprintf("thread %d on cpus %v, was %v", tid, cpus, mask))
				}
			}
			return strings.Join(d, "; ")
		}
		kept := func() bool { ok, _ := in.dir.Exists(key); return ok }
		verdict := testutil.CheckRecovery(t, what, err, diff, kept, "has exited")
		cut := ""
		if !injected {
			cut = "(cut)"
		}
		tally.Add(strings.TrimPrefix(id, "numa.") + "/" + way + "/" + verdict + cut)
		if t.Failed() {
			break
		}
		if verdict == "pending" {
			for _, pid := range tagged(t, tag) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			_ = rank.Process.Kill()
		}
		if !exists(rank.Process.Pid) {
			_ = rank.Wait()
			fresh()
		}
	}
	t.Logf("%d rounds in %s: %s", testutil.CrashRounds, time.Since(start).Round(time.Millisecond), tally)
}
