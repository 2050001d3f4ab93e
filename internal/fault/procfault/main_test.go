package procfault

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// The test binary plays three more parts when re-executed, chosen by
// roleEnv: a fake rank ("rank") that burns one CPU counting steps and
// writes the count to stepsEnv's file, an injecting process ("injector")
// that injects one fault, says "injected" and waits to be SIGKILLed, and
// the duty-cycle pacer ("pacer"), through RunPace exactly as the hidden
// command runs it.
const (
	roleEnv  = "PROCFAULT_TEST_ROLE"
	stepsEnv = "PROCFAULT_TEST_STEPS"
	// waitEnv makes the fake rank's step a 1 ms sleep instead of CPU
	// work: a rank waiting on its GPU, whose progress follows the wall
	// time it runs rather than the CPU it gets.
	waitEnv = "PROCFAULT_TEST_WAIT"
	// Environment of the injector helper.
	helperFaultEnv = "PROCFAULT_HELPER_FAULT"
	helperStateEnv = "PROCFAULT_HELPER_STATE"
	helperKeyEnv   = "PROCFAULT_HELPER_KEY"
	helperPIDEnv   = "PROCFAULT_HELPER_PID"
	helperMechEnv  = "PROCFAULT_HELPER_MECHANISM"
	// helperCPUsEnv, when set, is a cgroup-cpu straggler's cpus, so the
	// helper does not measure them first.
	helperCPUsEnv = "PROCFAULT_HELPER_CPUS"
	// helperPodEnv, when set, makes the helper's injector the node
	// agent's (Options.PodCgroups).
	helperPodEnv = "PROCFAULT_HELPER_POD"
)

func TestMain(m *testing.M) {
	if os.Getenv(testutil.LeaderlessEnv) != "" {
		testutil.Leaderless()
	}
	switch os.Getenv(roleEnv) {
	case "rank":
		fakeRank(os.Getenv(stepsEnv), os.Getenv(waitEnv) != "")
	case "injector":
		os.Exit(injectorHelper())
	case "pacer":
		os.Exit(RunPace(context.Background(), os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// step is one unit of CPU work, some tens of microseconds long, so that
// the step rate follows the CPU the rank gets.
func step(x uint64) uint64 {
	for i := range 20000 {
		x = x*6364136223846793005 + uint64(i)
	}
	return x
}

// fakeRank counts steps forever, writing the count to file every 20 ms
// in one fixed-width write, so a reader never sees half a number. With
// wait, each step sleeps 1 ms instead of computing.
func fakeRank(file string, wait bool) {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rank:", err)
		os.Exit(1)
	}
	var (
		steps uint64
		x     uint64 = 1
		last         = time.Now()
	)
	for {
		if wait {
			time.Sleep(time.Millisecond)
		} else {
			x = step(x)
		}
		steps++
		if time.Since(last) >= 20*time.Millisecond {
			if _, err := f.WriteAt(fmt.Appendf(nil, "%20d\n", steps), 0); err != nil {
				os.Exit(1)
			}
			last = time.Now()
		}
		if x == 42 {
			fmt.Println(x) // keeps the work from being optimised away
		}
	}
}

// rank is a fake rank the test started.
type rank struct {
	cmd   *exec.Cmd
	steps string
	proc  procfind.Proc
	done  chan error
}

// startRank starts a fake rank of job with the given rank number, in a
// process group of its own when ownGroup is set, with env added to its
// environment.
func startRank(t testing.TB, job string, n int, ownGroup bool, env ...string) *rank {
	t.Helper()
	r := &rank{steps: filepath.Join(t.TempDir(), "steps"), done: make(chan error, 1)}
	r.cmd = exec.Command(os.Args[0], "-test.run=^$")
	r.cmd.Env = append(append(os.Environ(), roleEnv+"=rank", stepsEnv+"="+r.steps, "GOMAXPROCS=1",
		procfind.EnvJob+"="+job, "RANK="+strconv.Itoa(n), "LOCAL_RANK="+strconv.Itoa(n), "WORLD_SIZE=2"), env...)
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ownGroup}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Kill()
		<-r.done
	})
	var err error
	if r.proc, err = procfind.Identify(r.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// Ready once it has counted.
	testutil.Eventually(t, 10*time.Second, "the rank's first step", func() bool { return r.count(t) > 0 })
	return r
}

// count reads the rank's step count (0 before its first write).
func (r *rank) count(t testing.TB) uint64 {
	t.Helper()
	for range 5 {
		b, err := os.ReadFile(r.steps)
		if err != nil || len(b) == 0 {
			return 0
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return n
		}
	}
	t.Fatalf("unreadable step file %s", r.steps)
	return 0
}

// rate measures the rank's steps per second over d.
func (r *rank) rate(t testing.TB, d time.Duration) float64 {
	t.Helper()
	c0, t0 := r.count(t), time.Now()
	time.Sleep(d)
	c1, t1 := r.count(t), time.Now()
	return float64(c1-c0) / t1.Sub(t0).Seconds()
}

// state returns the letter of the rank's state in /proc/PID/stat.
func (r *rank) state(t testing.TB) byte {
	t.Helper()
	st, err := procfind.ReadStat(r.proc.PID)
	if err != nil {
		t.Fatal(err)
	}
	return st.State
}

// newInjector returns the injector of fault id, by its first mechanism,
// on a fresh state directory (or dir, when given).
func newInjector(t testing.TB, id, dir string) *Injector {
	t.Helper()
	return newInjectorOf(t, id, mechanisms[id][0], dir)
}

// newInjectorOf is newInjector for mechanism mech.
func newInjectorOf(t testing.TB, id, mech, dir string) *Injector {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("no fault %s", id)
	}
	if dir == "" {
		dir = t.TempDir()
	}
	in, err := New(f, f.Mechanism(mech), testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// testOptions runs the pacer as this test binary in its pacer role.
func testOptions(dir string) Options {
	return Options{StateDir: dir, Exec: os.Args[0], ExecArgs: []string{}, env: []string{roleEnv + "=pacer"}, TermGrace: 2 * time.Second}
}

// injectorHelper injects the fault helperFaultEnv names, by the mechanism
// helperMechEnv names (its first when empty), on the pid helperPIDEnv
// gives, saying "starting" before (and taking the rest of its
// environment then, when a testutil.Spawner started it) and "injected"
// after, and waits to be killed.
func injectorHelper() int {
	testutil.Starting()
	id := os.Getenv(helperFaultEnv)
	f, _ := catalog.Lookup(id)
	mech := os.Getenv(helperMechEnv)
	if mech == "" {
		mech = mechanisms[id][0]
	}
	o := testOptions(os.Getenv(helperStateEnv))
	o.PodCgroups = os.Getenv(helperPodEnv) != ""
	in, err := New(f, f.Mechanism(mech), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	raw := map[string]string{"pid": os.Getenv(helperPIDEnv)}
	if id == idStraggler {
		raw["slowdown"], raw["window"] = "2", "200ms"
		if cpus := os.Getenv(helperCPUsEnv); cpus != "" {
			raw["cpus"] = cpus
		}
	}
	if mech == mechDutyCycle {
		// Stopped 90 % of the time, so that a pacer killed with its
		// injector (rather than ending itself) would likely leave the rank
		// stopped, which the test would see.
		raw["slowdown"] = "10"
	}
	v, err := f.Resolve(raw)
	if err == nil {
		err = in.Inject(context.Background(), os.Getenv(helperKeyEnv), inventory.Ref{Kind: catalog.ScopeRank}, v)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	testutil.Injected()
	return 0
}

// runHelper starts the injector helper and returns once it has injected.
func runHelper(t *testing.T, id, dir, key string, pid int) *exec.Cmd {
	t.Helper()
	return runHelperOf(t, id, "", dir, key, pid)
}

// runHelperOf is runHelper for mechanism mech ("" for the first).
func runHelperOf(t *testing.T, id, mech, dir, key string, pid int) *exec.Cmd {
	t.Helper()
	return testutil.StartInjector(t, "^$", roleEnv+"=injector", helperFaultEnv+"="+id, helperMechEnv+"="+mech,
		helperStateEnv+"="+dir, helperKeyEnv+"="+key, helperPIDEnv+"="+strconv.Itoa(pid))
}
