package numafault

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/numa"
)

// The test binary plays more parts when re-executed, chosen by roleEnv:
// the hog the injectors start ("hog", through RunHog exactly as the
// hidden command would), an injecting process that the test SIGKILLs
// ("injector"), and a rank to move ("sleeper").
const (
	roleEnv = "NUMAFAULT_TEST_ROLE"
	// tagEnv marks every process one test starts, so the test can find
	// them in /proc without asking the injector.
	tagEnv = "NUMAFAULT_TEST_TAG"
	// stateEnv and pdeathEnv configure the injector role.
	stateEnv  = "NUMAFAULT_TEST_STATE"
	pdeathEnv = "NUMAFAULT_TEST_PDEATHSIG"
	// faultEnv, keyEnv, pidEnv and nodesEnv configure the crash-injector
	// role: the fault, the key, the rank's pid (wrong-affinity) and the
	// node tree (SysNodeDir).
	faultEnv = "NUMAFAULT_TEST_FAULT"
	keyEnv   = "NUMAFAULT_TEST_KEY"
	pidEnv   = "NUMAFAULT_TEST_PID"
	nodesEnv = "NUMAFAULT_TEST_NODES"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "hog":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		code := RunHog(ctx, os.Args[1:], os.Stderr)
		stop()
		os.Exit(code)
	case "injector":
		os.Exit(injectorRole())
	case "crash-injector":
		os.Exit(crashInjectorRole())
	case "sleeper":
		sleeperRole()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// injectorRole injects numa.memory-pressure with the state directory from
// stateEnv, prints the hog's pid, and waits to be killed.
func injectorRole() int {
	f, _ := catalog.Lookup("numa.memory-pressure")
	o := Options{StateDir: os.Getenv(stateEnv), Exec: os.Args[0], ExecArgs: []string{},
		env: []string{roleEnv + "=hog", tagEnv + "=" + os.Getenv(tagEnv)}, maxHogBytes: 8 << 20,
		noPdeathsig: os.Getenv(pdeathEnv) == "off"}
	in, err := New(f, f.Mechanism("memory-hog"), o)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	v, _ := f.Resolve(map[string]string{"fraction": "0.1"})
	if err := in.Inject(context.Background(), "crash/0", inventory.Ref{Kind: catalog.ScopeRank}, v); err != nil {
		fmt.Println("error", err)
		return 1
	}
	st, err := readState(in.(*Injector).dir, "crash/0")
	if err != nil || st.Child == nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("hog", st.Child.PID)
	time.Sleep(time.Minute)
	return 0
}

// crashInjectorRole injects faultEnv under keyEnv, on the rank pidEnv
// names (wrong-affinity) or with a hog of 8 MiB (memory-pressure), saying
// "starting" before (and taking the rest of its environment then, as a
// testutil.Spawner starts it) and "injected" after, and waits to be
// killed. The GPU is on the first node of the tree nodesEnv names.
func crashInjectorRole() int {
	testutil.Starting()
	id := os.Getenv(faultEnv)
	f, _ := catalog.Lookup(id)
	topo, err := numa.ReadTopology(os.Getenv(nodesEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash-injector:", err)
		return 1
	}
	o := Options{StateDir: os.Getenv(stateEnv), Exec: os.Args[0], ExecArgs: []string{}, SysNodeDir: os.Getenv(nodesEnv),
		env: []string{roleEnv + "=hog", tagEnv + "=" + os.Getenv(tagEnv)}, maxHogBytes: 8 << 20,
		noPdeathsig: os.Getenv(pdeathEnv) == "off",
		GPUNode:     func(context.Context, int) (int, error) { return topo.Nodes[0].ID, nil }}
	in, err := New(f, f.Mechanism(mechanisms[id]), o)
	if err == nil {
		var v catalog.Values
		raw := map[string]string{"fraction": "0.1"}
		if id == "numa.wrong-affinity" {
			raw = map[string]string{"pid": os.Getenv(pidEnv)}
		}
		if v, err = f.Resolve(raw); err == nil {
			err = in.Inject(context.Background(), os.Getenv(keyEnv), inventory.Ref{Kind: catalog.ScopeRank}, v)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash-injector:", err)
		return 1
	}
	testutil.Injected()
	return 0
}

// sleeperRole is a rank that sleeps for a minute and, on its first
// SIGUSR1, starts a thread. A goroutine locked to its thread and parked
// keeps that thread to itself, so it locks and parks goroutines until the
// runtime has had to start one more thread than it had. Later signals are
// ignored, so a test may repeat the signal until it sees the thread.
func sleeperRole() {
	grow := make(chan os.Signal, 1)
	signal.Notify(grow, syscall.SIGUSR1)
	threads := func() int { tasks, _ := os.ReadDir("/proc/self/task"); return len(tasks) }
	select {
	case <-grow:
		signal.Ignore(syscall.SIGUSR1)
		for had := threads(); threads() <= had; {
			locked := make(chan struct{})
			go func() {
				runtime.LockOSThread()
				close(locked)
				select {}
			}()
			<-locked
		}
	case <-time.After(time.Minute):
		return
	}
	time.Sleep(time.Minute)
}
