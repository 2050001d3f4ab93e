package exhaustfault

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// The test binary plays three more parts when re-executed, chosen by
// roleEnv: the fake gpuchaos the injector starts ("fake"), a process that
// injects and then waits to be SIGKILLed ("injector"), and a bystander
// that only sleeps ("sleeper").
const (
	roleEnv = "GPUPROC_TEST_ROLE"
	// modeEnv tells the fake how to behave: ready (the default), fail
	// (exit 1 before ready), exit (ready, then exit at once), hang (never
	// ready), ignore-term (ready, then ignore SIGTERM), or SUB=MODE to
	// apply MODE to one subcommand (burn, vram, pcie) only.
	modeEnv = "GPUPROC_FAKE_MODE"
	// recordEnv is the directory where each fake writes PID.json with
	// its argv.
	recordEnv = "GPUPROC_FAKE_RECORD"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "fake":
		os.Exit(fakeGPUChaos(os.Args[1:]))
	case "injector":
		os.Exit(injectorHelper())
	case "sleeper":
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// fakeRecord is what a fake writes about itself.
type fakeRecord struct {
	PID  int      `json:"pid"`
	Argv []string `json:"argv"`
}

// fakeGPUChaos understands exactly the flags of the real commands that
// the injector passes, so an argv the real CLI would refuse fails here too.
func fakeGPUChaos(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "fake: no command")
		return 2
	}
	var (
		sub      string
		rest     []string
		duration time.Duration
		readyFD  int
		fs       = flag.NewFlagSet("fake", flag.ContinueOnError)
	)
	fs.DurationVar(&duration, "duration", 0, "")
	fs.IntVar(&readyFD, "ready-fd", -1, "")
	fs.String("format", "table", "")
	switch {
	case args[0] == "burn":
		sub, rest = "burn", args[1:]
		fs.String("gpus", "all", "")
		fs.Float64("duty", 1, "")
		fs.Float64("temp-ceiling", 0, "")
	case len(args) > 1 && args[0] == "exhaust" && args[1] == "vram":
		sub, rest = "vram", args[2:]
		fs.Int("gpu", 0, "")
		fs.Float64("fraction", 0.9, "")
	case len(args) > 1 && args[0] == "exhaust" && args[1] == "pcie":
		sub, rest = "pcie", args[2:]
		fs.Int("gpu", 0, "")
		fs.String("rate", "0", "")
	default:
		fmt.Fprintf(os.Stderr, "fake: unknown command %q\n", args)
		return 2
	}
	if err := fs.Parse(rest); err != nil || fs.NArg() > 0 || duration <= 0 || readyFD != 3 {
		fmt.Fprintf(os.Stderr, "fake: bad arguments %q\n", args)
		return 2
	}
	mode := os.Getenv(modeEnv)
	if only, m, ok := strings.Cut(mode, "="); ok {
		mode = "ready"
		if only == sub {
			mode = m
		}
	}
	if dir := os.Getenv(recordEnv); dir != "" {
		// Renamed into place, so a reader never sees half a record of a
		// fake killed while it wrote it.
		b, _ := json.Marshal(fakeRecord{PID: os.Getpid(), Argv: args})
		tmp := filepath.Join(dir, strconv.Itoa(os.Getpid())+".tmp")
		err := os.WriteFile(tmp, b, 0o600)
		if err == nil {
			err = os.Rename(tmp, strings.TrimSuffix(tmp, ".tmp")+".json")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake:", err)
			return 1
		}
	}
	switch mode {
	case "fail":
		fmt.Fprintf(os.Stderr, "fake %s: starting\n", sub)
		fmt.Fprintf(os.Stderr, "fake %s: no CUDA driver found (libcuda.so.1)\n", sub)
		return 1
	case "hang":
		time.Sleep(duration)
		return 0
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
	}
	ready := os.NewFile(uintptr(readyFD), "ready")
	if _, err := ready.WriteString("ready\n"); err != nil {
		fmt.Fprintln(os.Stderr, "fake:", err)
		return 1
	}
	_ = ready.Close()
	fmt.Printf("{\"fake\":%q,\"stop_reason\":\"running\"}\n", sub)
	if mode == "exit" {
		return 0
	}
	time.Sleep(duration)
	return 0
}

// Environment of the injector helper.
const (
	helperStateEnv   = "GPUPROC_HELPER_STATE"
	helperKeyEnv     = "GPUPROC_HELPER_KEY"
	helperNoDeathEnv = "GPUPROC_HELPER_NO_PDEATHSIG"
)

// injectorHelper injects exhaustion.sm-burn on GPU 0 under the key it is
// given, saying "starting" before (and taking the rest of its environment
// then, when a testutil.Spawner started it) and "injected" after, and
// waits to be killed.
func injectorHelper() int {
	testutil.Starting()
	f, _ := catalog.Lookup("exhaustion.sm-burn")
	inj, err := New(f, f.Mechanism("burn"), Options{
		StateDir:    os.Getenv(helperStateEnv),
		noPdeathsig: os.Getenv(helperNoDeathEnv) == "1",
		env:         []string{roleEnv + "=fake", recordEnv + "=" + os.Getenv(recordEnv), modeEnv + "=ready"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	v := catalog.Values{"load": 0.5, "ceiling": int64(85)}
	if err := inj.Inject(context.Background(), os.Getenv(helperKeyEnv), inventory.Ref{GPU: 0}, v); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	testutil.Injected()
	return 0
}

// readLine reads one line from the helper's output, or fails the test.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() { s, err := r.ReadString('\n'); ch <- res{s, err} }()
	select {
	case x := <-ch:
		if x.err != nil {
			t.Fatalf("read the helper's output: %v", x.err)
		}
		return strings.TrimSpace(x.s)
	case <-time.After(30 * time.Second):
		t.Fatal("the helper said nothing for 30 s")
	}
	return ""
}
