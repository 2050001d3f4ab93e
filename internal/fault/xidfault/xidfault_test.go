package xidfault_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/fault/nodeall"
	"github.com/gpuchaos/gpuchaos/internal/fault/xidfault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
)

// childEnv makes the test binary act as a run that injects and is killed.
const childEnv = "GPUCHAOS_KMSGXID_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		crashChild(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

var gpu = inventory.Ref{Kind: catalog.ScopeGPU, Node: "n1", GPU: 3, UUID: "GPU-1234", PCI: "00000000:18:00.0"}

func mustFault(t testing.TB, id string) *catalog.Fault {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("no fault %s in the catalogue", id)
	}
	return f
}

func resolve(t testing.TB, f *catalog.Fault, raw map[string]string) catalog.Values {
	t.Helper()
	v, err := f.Resolve(raw)
	if err != nil {
		t.Fatalf("resolve %s %v: %v", f.ID, raw, err)
	}
	return v
}

// lineCase is one row of TestLine.
type lineCase struct {
	name  string
	fault string
	raw   map[string]string
	ref   inventory.Ref
	code  int
	want  string // exact line; "" to check only the code
	err   bool
}

func TestLine(t *testing.T) {
	t.Parallel()
	tests := []lineCase{
		{
			name: "xid default is 13 from no process", fault: "hardware.xid", ref: gpu, code: 13,
			want: "NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
		},
		{
			name: "xid with a process", fault: "hardware.xid", raw: map[string]string{"code": "31", "pid": "20417", "process": "python3"}, ref: gpu, code: 31,
		},
		{
			name: "fallen-off-bus from no process", fault: "hardware.fallen-off-bus", ref: gpu, code: 79,
			want: "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
		},
		{name: "a GPU without a bus id", fault: "hardware.xid", ref: inventory.Ref{Kind: catalog.ScopeGPU, GPU: 1}, err: true},
		{name: "a malformed bus id", fault: "hardware.xid", ref: inventory.Ref{Kind: catalog.ScopeGPU, PCI: "18:00"}, err: true},
	}
	// Every other fault with a kernel-log mechanism writes the code its
	// catalogue entry gives; the catalogue's own test holds that code to
	// the entry's text and to the XID table.
	var fixed int
	for _, f := range catalog.All() {
		if f.ID == "hardware.xid" || f.Mechanism(catalog.MechanismKernelLog) == nil {
			continue
		}
		fixed++
		tests = append(tests, lineCase{name: fmt.Sprintf("%s is %d", f.ID, f.Signature.XID), fault: f.ID, ref: gpu, code: f.Signature.XID})
	}
	if fixed == 0 {
		t.Fatal("no fault of the catalogue has a kernel-log mechanism of a fixed code")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := mustFault(t, tt.fault)
			in, err := xidfault.New(f, kmsg.Writer{Path: os.DevNull})
			if err != nil {
				t.Fatal(err)
			}
			got, err := in.Line(tt.ref, resolve(t, f, tt.raw))
			if tt.err {
				if err == nil {
					t.Fatalf("Line = %q, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("Line =\n %q\nwant\n %q", got, tt.want)
			}
			// Whatever the fault, the line must read back as its XID on the
			// target's bus id, through the same parser every watcher here uses.
			ev, ok := xid.ParseLine(got)
			if !ok || ev.Code != tt.code || ev.PCI != "0000:18:00" {
				t.Errorf("ParseLine(%q) = %+v %v, want code %d on 0000:18:00", got, ev, ok, tt.code)
			}
			if strings.Contains(strings.ToLower(got), "gpuchaos") || strings.Contains(strings.ToLower(got), "inject") {
				t.Errorf("line %q marks itself as injected", got)
			}
		})
	}
}

func TestNewRefusesFaultsWithoutALine(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"hardware.thermal-throttle", "hardware.nvlink-errors", "exhaustion.vram"} {
		if f, ok := catalog.Lookup(id); ok {
			if _, err := xidfault.New(f, kmsg.Writer{}); err == nil {
				t.Errorf("New(%s) succeeded for a fault with no kernel-log line", id)
			}
		}
	}
}

// fileEnv is an injector writing to a regular file, and a way to count the
// lines it holds: the same Writer code as on /dev/kmsg.
func fileEnv(t *testing.T) (*xidfault.Injector, catalog.Values, func() int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f := mustFault(t, "hardware.xid")
	in, err := xidfault.New(f, kmsg.Writer{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	lines := func() int {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}
	return in, resolve(t, f, nil), lines
}

// TestContract runs the conformance suite with the meaning a log line
// allows: the effect counted is a line written, and recovery, which cannot
// unwrite it, must write nothing and succeed.
func TestContract(t *testing.T) {
	t.Parallel()
	faulttest.Run(t, func(t *testing.T) faulttest.Env {
		in, v, lines := fileEnv(t)
		return faulttest.Env{Injector: in, Ref: gpu, Values: v, Count: lines}
	})
}

// TestOneShot covers what only a one-shot injector has to say: a recovered
// key is a new event, and concurrent injects of one key write once.
func TestOneShot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const key = "faulttest/0"
	t.Run("a recovered key injects again", func(t *testing.T) {
		t.Parallel()
		in, v, lines := fileEnv(t)
		must(t, in.Inject(ctx, key, gpu, v))
		must(t, in.Recover(ctx, key))
		must(t, in.Inject(ctx, key, gpu, v))
		if n := lines(); n != 2 {
			t.Fatalf("%d lines, want 2: a new injection after recovery is a new line", n)
		}
	})
	t.Run("concurrent injects of one key write once, distinct keys each", func(t *testing.T) {
		t.Parallel()
		in, v, lines := fileEnv(t)
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				if err := in.Inject(ctx, fmt.Sprintf("k%d", i%4), gpu, v); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := lines(); n != 4 {
			t.Fatalf("%d lines from 4 keys injected 4 times each, want 4", n)
		}
	})
}

type failingWriter struct{ calls int }

func (w *failingWriter) Write(int, string) error {
	w.calls++
	if w.calls == 1 {
		return errors.New("permission denied")
	}
	return nil
}

func TestWriteErrorIsNotRemembered(t *testing.T) {
	t.Parallel()
	f := mustFault(t, "hardware.xid")
	w := &failingWriter{}
	in, err := xidfault.New(f, w)
	if err != nil {
		t.Fatal(err)
	}
	v := resolve(t, f, nil)
	if err := in.Inject(context.Background(), "k", gpu, v); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Inject = %v, want the writer's error", err)
	}
	must(t, in.Inject(context.Background(), "k", gpu, v))
	if w.calls != 2 {
		t.Fatalf("writer called %d times, want a retry after the failed write", w.calls)
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	f := mustFault(t, "hardware.xid")
	var m *catalog.Mechanism
	for i := range f.Mechanisms {
		if f.Mechanisms[i].Name == "kernel-log" {
			m = &f.Mechanisms[i]
		}
	}
	if m == nil {
		t.Fatal("hardware.xid has no kernel-log mechanism")
	}
	if _, err := nodeall.Injector(f, m, fault.Env{}); err == nil {
		t.Error("kernel-log without a kernel log writer was accepted")
	}
	inj, err := nodeall.Injector(f, m, fault.Env{Kmsg: kmsg.Writer{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inj.(*xidfault.Injector); !ok {
		t.Errorf("kernel-log gave %T", inj)
	}
}

// TestRealKmsg injects on the real kernel log as root and checks, by
// following /dev/kmsg rather than asking the injector, that two injects of
// one key log one line the driver could have written. CI runs as root,
// where it must run.
func TestRealKmsg(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: writing /dev/kmsg needs root; run as root to test the real kernel log")
	}
	if _, err := os.Stat(kmsg.DefaultPath); err != nil {
		t.Skipf("no kernel log device: %v", err)
	}
	tag := make([]byte, 4)
	if _, err := rand.Read(tag); err != nil {
		t.Fatal(err)
	}
	proc := "gc" + hex.EncodeToString(tag)
	f := mustFault(t, "hardware.xid")
	v := resolve(t, f, map[string]string{"code": "13", "pid": "4343", "process": proc})
	in, err := xidfault.New(f, kmsg.Writer{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := in.Line(gpu, v)
	if err != nil {
		t.Fatal(err)
	}

	fl, err := kmsg.Open(kmsg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	seen := make(chan kmsg.Record, 4)
	done := make(chan error, 1)
	go func() {
		done <- fl.Run(ctx, func(r kmsg.Record) {
			if strings.Contains(r.Message, "name="+proc+",") {
				seen <- r
			}
		})
	}()
	must(t, in.Inject(context.Background(), "real/0", gpu, v))
	must(t, in.Inject(context.Background(), "real/0", gpu, v))
	select {
	case r := <-seen:
		if r.Message != want || r.Priority != kmsg.LevelErr || r.Facility != kmsg.FacilityUser {
			t.Errorf("logged %q at level %d facility %d, want %q at level 3 facility 1", r.Message, r.Priority, r.Facility, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the injected line did not appear in /dev/kmsg within 5 s")
	}
	must(t, in.Recover(context.Background(), "real/0"))
	// A second line, had one been written, would have arrived by now: the
	// first came within milliseconds.
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(seen); n != 0 {
		t.Errorf("%d more lines for one key", n)
	}
}

// crashChild plays a run that records an injection in the ledger, injects,
// says so, and waits to be killed before it can recover.
func crashChild(dir string) {
	l, err := ledger.Open(filepath.Join(dir, "ledger.jsonl"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	f, _ := catalog.Lookup("hardware.xid")
	v, _ := f.Resolve(map[string]string{"code": "13"})
	e := ledger.Entry{Key: "crash/0", Run: "crash", Target: "local", Fault: f.ID, Mechanism: "kernel-log",
		Params: map[string]string{"code": "13"}, Ref: gpu, InjectedAt: time.Now(), Expires: time.Now().Add(time.Hour)}
	if err := l.Record(context.Background(), e); err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	in, _ := xidfault.New(f, kmsg.Writer{Path: filepath.Join(dir, "kmsg")})
	if err := in.Inject(context.Background(), e.Key, e.Ref, v); err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	fmt.Println("injected")
	select {} // killed here
}

// TestCrashRecovery kills a run with SIGKILL after it injected and checks
// that the next start finds the injection in the ledger and recovers it
// with the injector the registry gives, writing nothing more.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kmsg"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "injected\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q (%v), want injected", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("child exited cleanly; it should have been killed")
	}

	ctx := context.Background()
	l, err := ledger.Open(filepath.Join(dir, "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := l.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].Key != "crash/0" || pending[0].Mechanism != "kernel-log" || pending[0].Ref.PCI != gpu.PCI {
		t.Fatalf("pending after the crash = %+v, want the one kernel-log injection", pending)
	}
	e := pending[0]
	f := mustFault(t, e.Fault)
	var m *catalog.Mechanism
	for i := range f.Mechanisms {
		if f.Mechanisms[i].Name == e.Mechanism {
			m = &f.Mechanisms[i]
		}
	}
	inj, err := nodeall.Injector(f, m, fault.Env{Kmsg: kmsg.Writer{Path: filepath.Join(dir, "kmsg")}})
	if err != nil {
		t.Fatal(err)
	}
	must(t, inj.Recover(ctx, e.Key))
	must(t, l.Done(ctx, e.Key))
	must(t, l.Close())

	l2, err := ledger.Open(filepath.Join(dir, "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if p, _ := l2.Pending(ctx); len(p) != 0 {
		t.Errorf("pending after recovery = %+v, want none", p)
	}
	b, err := os.ReadFile(filepath.Join(dir, "kmsg"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "\n"); got != 1 || !strings.HasPrefix(string(b), "<3>NVRM: Xid (PCI:0000:18:00): 13,") {
		t.Errorf("kernel log holds %q, want the one line the killed run wrote", b)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
