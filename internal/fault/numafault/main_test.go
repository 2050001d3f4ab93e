package numafault

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/target"
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
	case "sleeper":
		time.Sleep(time.Minute)
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
	if err := in.Inject(context.Background(), "crash/0", target.Ref{Kind: catalog.ScopeRank}, v); err != nil {
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
