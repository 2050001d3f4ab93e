package netfault_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/fault/netfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/nodeall"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	nf "github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
	nt "github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
)

// childEnv makes the test binary a run that injects and waits to be killed;
// its value is the JSON of a childSpec.
const childEnv = "GPUCHAOS_NETFAULT_CRASH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(nt.SleeperEnv) != "" {
		nt.Sleep()
	}
	goleak.VerifyTestMain(m)
}

var node = inventory.Ref{Kind: catalog.ScopeNode, Node: "n1"}

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

// cases are every fault and mechanism the package injects that this
// kernel runs, with values aimed at the fixture.
var cases = []struct {
	fault, mechanism string
	raw              map[string]string
}{
	{"network.rate-limit", "tc-tbf", map[string]string{"rate": "10M"}},
	{"network.loss", "cls-bpf", map[string]string{"probability": "0.2"}},
	{"network.partition", "cls-bpf", map[string]string{"cidr": nt.AddrB + "/32", "port": "7000"}},
	{"ebpf.packet-drop", "cls-bpf", map[string]string{"probability": "0.5", "direction": "both"}},
	{"ebpf.port-blackhole", "cls-bpf", map[string]string{"min-port": "7400", "max-port": "7410"}},
}

func withTarget(raw map[string]string, pid int) map[string]string {
	out := map[string]string{"pid": strconv.Itoa(pid), "interface": nt.IfA}
	for k, v := range raw {
		out[k] = v
	}
	return out
}

func snapshot(t *testing.T, pid int) nf.Snapshot {
	t.Helper()
	s, err := nf.Take(context.Background(), nf.Target{PID: pid, Interface: nt.IfA})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	for _, c := range cases {
		t.Run(c.fault+"/"+c.mechanism, func(t *testing.T) {
			f := mustFault(t, c.fault)
			faulttest.Run(t, func(t *testing.T) faulttest.Env {
				fx := nt.New(t, nt.Options{})
				in, err := netfault.New(f, c.mechanism, t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				before := snapshot(t, fx.PID)
				return faulttest.Env{
					Injector: in,
					Ref:      node,
					Values:   resolve(t, f, withTarget(c.raw, fx.PID)),
					// Applied looks at the interface, not the injector.
					Applied: func(string) bool { return !snapshot(t, fx.PID).Equal(before) },
					Vanish:  fx.Vanish,
				}
			})
		})
	}
}

func TestNetemSaysWhatIsMissing(t *testing.T) {
	for _, c := range []struct {
		fault string
		raw   map[string]string
	}{
		{"network.delay", map[string]string{"delay": "5ms"}},
		{"network.loss", map[string]string{"probability": "0.1"}},
	} {
		t.Run(c.fault, func(t *testing.T) {
			fx := nt.New(t, nt.Options{})
			f := mustFault(t, c.fault)
			dir := t.TempDir()
			in, err := netfault.New(f, "netem", dir)
			if err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, fx.PID)
			ctx := context.Background()
			err = in.Inject(ctx, "k", node, resolve(t, f, withTarget(c.raw, fx.PID)))
			if err == nil {
				// A kernel with sch_netem: the fault is real, and recovery
				// must undo it.
				if snapshot(t, fx.PID).Equal(before) {
					t.Fatal("netem injected but the interface did not change")
				}
				if err := in.Recover(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				if !snapshot(t, fx.PID).Equal(before) {
					t.Fatal("recover did not restore the interface")
				}
				return
			}
			if !errors.Is(err, nf.ErrKernelFeature) || !strings.Contains(err.Error(), "sch_netem") ||
				!strings.Contains(err.Error(), "CONFIG_NET_SCH_NETEM") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q, want one line naming sch_netem and CONFIG_NET_SCH_NETEM", err)
			}
			if !snapshot(t, fx.PID).Equal(before) {
				t.Fatal("a refused netem changed the interface")
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
				t.Fatalf("a refused inject left records: %v", left)
			}
		})
	}
}

func TestInjectRejectsBadTargets(t *testing.T) {
	fx := nt.New(t, nt.Options{})
	gone := exec.Command(os.Args[0], "-test.run=^$")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	f := mustFault(t, "network.partition")
	tests := []struct {
		name string
		raw  map[string]string
		want string
	}{
		{"unknown interface", map[string]string{"pid": strconv.Itoa(fx.PID), "interface": "nope0"}, `no interface "nope0"`},
		{"no such pid", map[string]string{"pid": strconv.Itoa(gone.Process.Pid), "interface": nt.IfA}, "no such process"},
		{"IPv6 prefix", map[string]string{"pid": strconv.Itoa(fx.PID), "interface": nt.IfA, "cidr": "fd00::/8"}, "not IPv4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in, err := netfault.New(f, "cls-bpf", dir)
			if err != nil {
				t.Fatal(err)
			}
			err = in.Inject(context.Background(), "k", node, resolve(t, f, tc.raw))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line containing %q", err, tc.want)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
				t.Fatalf("a refused inject left records: %v", left)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	if _, err := netfault.New(mustFault(t, "network.loss"), "cls-bpf", ""); err == nil || !strings.Contains(err.Error(), "state directory") {
		t.Fatalf("no state directory: %v", err)
	}
	if _, err := netfault.New(mustFault(t, "hardware.xid"), "cls-bpf", t.TempDir()); err == nil {
		t.Fatal("hardware.xid through cls-bpf was accepted")
	}
	if _, err := nodeall.Injector(mustFault(t, "network.loss"), &catalog.Mechanism{Name: "cls-bpf"}, fault.Env{}); err == nil ||
		!strings.Contains(err.Error(), "state directory") {
		t.Fatalf("nodeall.Injector without StateDir: %v", err)
	}
	in, err := nodeall.Injector(mustFault(t, "network.rate-limit"), &catalog.Mechanism{Name: "tc-tbf"}, fault.Env{StateDir: t.TempDir()})
	if err != nil || in == nil {
		t.Fatalf("nodeall.Injector with StateDir: %v", err)
	}
}

// dialTCP connects from A to addr within a short timeout.
func dialTCP(fx *nt.Fixture, addr string) error {
	return nt.In(fx.A.Handle, func() error {
		c, err := net.DialTimeout("tcp4", addr, 300*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	})
}

func TestPortBlackhole(t *testing.T) {
	fx := nt.New(t, nt.Options{})
	f := mustFault(t, "ebpf.port-blackhole")
	in, err := netfault.New(f, "cls-bpf", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var inRange, outside net.Listener
	if err := nt.In(fx.B.Handle, func() (err error) {
		if inRange, err = net.Listen("tcp4", net.JoinHostPort(nt.AddrB, "7405")); err != nil {
			return err
		}
		outside, err = net.Listen("tcp4", net.JoinHostPort(nt.AddrB, "7420"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer inRange.Close()
	defer outside.Close()
	ctx := context.Background()
	v := resolve(t, f, withTarget(map[string]string{"min-port": "7400", "max-port": "7410"}, fx.PID))
	if err := in.Inject(ctx, "k", node, v); err != nil {
		t.Fatal(err)
	}
	if err := dialTCP(fx, inRange.Addr().String()); err == nil {
		t.Fatal("connected to a port inside the blackholed range")
	}
	if err := dialTCP(fx, outside.Addr().String()); err != nil {
		t.Fatalf("connect to a port outside the range: %v", err)
	}
	if err := in.Recover(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := dialTCP(fx, inRange.Addr().String()); err != nil {
		t.Fatalf("connect after recover: %v", err)
	}
}

// childSpec is what the crash child injects.
type childSpec struct {
	Dir, Fault, Mechanism, Key string
	Raw                        map[string]string
}

// TestHelperProcess is not a test: run by TestRecoverAfterSIGKILL with
// childEnv set, it injects, says so on stdout, and waits to be killed.
func TestHelperProcess(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("helper process for TestRecoverAfterSIGKILL")
	}
	injectAsChild(raw)
}

// injectAsChild is a crash child's work: inject the childSpec in raw, say
// so on stdout and wait to be killed; any failure exits 2 saying why.
func injectAsChild(raw string) {
	var s childSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Println("bad spec:", err)
		os.Exit(2)
	}
	f, _ := catalog.Lookup(s.Fault)
	in, err := netfault.New(f, s.Mechanism, s.Dir)
	if err == nil {
		var v catalog.Values
		if v, err = f.Resolve(s.Raw); err == nil {
			err = in.Inject(context.Background(), s.Key, node, v)
		}
	}
	if err != nil {
		fmt.Println("inject:", err)
		os.Exit(2)
	}
	testutil.Injected()
}

func TestRecoverAfterSIGKILL(t *testing.T) {
	for _, c := range cases[:3] {
		t.Run(c.fault, func(t *testing.T) {
			fx := nt.New(t, nt.Options{})
			// Someone else's root qdisc and clsact filters are there first.
			h, l := fx.A.Netlink, fx.A.Link(t, nt.IfA)
			mustDo(t, h.QdiscReplace(&netlink.Tbf{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: netlink.MakeHandle(5, 0), Parent: netlink.HANDLE_ROOT},
				Rate: 1e9, Buffer: netlink.Xmittime(1e9, 1<<20), Limit: 4 << 20}))
			mustDo(t, h.QdiscAdd(&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}))
			nt.AddForeignFilter(t, h, l, netlink.HANDLE_MIN_EGRESS)
			before := snapshot(t, fx.PID)

			dir := t.TempDir()
			spec, _ := json.Marshal(childSpec{Dir: dir, Fault: c.fault, Mechanism: c.mechanism, Key: "run-1/" + c.fault,
				Raw: withTarget(c.raw, fx.PID)})
			testutil.KillInjector(t, testutil.StartInjector(t, "^TestHelperProcess$", childEnv+"="+string(spec)))
			if snapshot(t, fx.PID).Equal(before) {
				t.Fatal("the killed child's fault is not in effect")
			}

			fresh, err := netfault.New(mustFault(t, c.fault), c.mechanism, dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := fresh.Recover(context.Background(), "run-1/"+c.fault); err != nil {
				t.Fatal(err)
			}
			if got := snapshot(t, fx.PID); !got.Equal(before) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(before)
				t.Fatalf("after recovery in a fresh injector\n got %s\nwant %s", g, w)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
				t.Fatalf("records left after recovery: %v", left)
			}
		})
	}
}

func TestRecoverRecycledPID(t *testing.T) {
	// A record whose namespace identity no longer matches its pid's (the
	// pid was recycled) is a vanished target, not a namespace to touch.
	fx := nt.New(t, nt.Options{})
	f := mustFault(t, "network.loss")
	dir := t.TempDir()
	in, err := netfault.New(f, "cls-bpf", dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mustDo(t, in.Inject(ctx, "k", node, resolve(t, f, withTarget(nil, fx.PID))))
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("want one record, have %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	rec, err := netfault.DecodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	real := *rec.Change
	rec.Change.NS.Inode++ // as if the pid now lived elsewhere
	b, _ = json.Marshal(rec)
	mustDo(t, os.WriteFile(files[0], b, 0o600))
	wantGoneOrUnproven(t, "recover with a recycled pid", in.Recover(ctx, "k"))
	mustDo(t, real.Undo(ctx))
}

func FuzzDecodeRecord(f *testing.F) {
	valid := `{"version":1,"key":"k","fault":"network.loss","mechanism":"cls-bpf","change":{"id":"ab","kind":"bpf",` +
		`"ns":{"pid":1,"dev":4,"inode":9},"interface":"eth0","index":2,"before":{"interface":"eth0","qdiscs":[],"filters":[]},` +
		`"add_clsact":true,"filters":[{"hook":"egress","priority":26467,"handle":1,"name":"gpuchaos-ab","drop":{"probability":0.1}}]}}`
	if _, err := netfault.DecodeRecord([]byte(valid)); err != nil {
		f.Fatalf("seed record does not decode: %v", err)
	}
	f.Add([]byte(valid))
	f.Add([]byte(strings.Replace(valid, `"kind":"bpf"`, `"kind":"tbf"`, 1)))
	f.Add([]byte(strings.Replace(valid, `"name":"gpuchaos-ab"`, `"name":"their-filter"`, 1)))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := netfault.DecodeRecord(b)
		if err != nil {
			return
		}
		// Whatever decodes names only our own marks.
		if err := r.Change.Validate(); err != nil {
			t.Fatalf("decoded a record whose change is invalid: %v", err)
		}
		for _, fl := range r.Change.Filters {
			if !strings.HasPrefix(fl.Name, nf.FilterNamePrefix) {
				t.Fatalf("decoded a record that would delete filter %q", fl.Name)
			}
		}
		if r.Change.Root != nil && r.Change.Root.Handle.Major() != nf.RootMajor {
			t.Fatalf("decoded a record that would delete root qdisc %s", r.Change.Root.Handle)
		}
	})
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRecoverVanishedNamespace(t *testing.T) {
	fx := nt.New(t, nt.Options{})
	f := mustFault(t, "network.partition")
	dir := t.TempDir()
	in, err := netfault.New(f, "cls-bpf", dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mustDo(t, in.Inject(ctx, "k", node, resolve(t, f, withTarget(nil, fx.PID))))
	fx.Vanish()
	if !wantGoneOrUnproven(t, "recover after the namespace vanished", in.Recover(ctx, "k")) {
		if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 1 {
			t.Fatalf("records left for an unproven recovery: %v, want the one kept for the next try", left)
		}
		return
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("records left for a vanished target: %v", left)
	}
	if err := in.Recover(ctx, "k"); err != nil {
		t.Fatalf("second recover: %v", err)
	}
}

// wantGoneOrUnproven checks that a recovery whose namespace has no holder
// says it is gone, or, where some process is hidden from this test (a
// sandbox's init), that it cannot prove so and names that process. It
// reports which.
func wantGoneOrUnproven(t *testing.T, what string, err error) (gone bool) {
	t.Helper()
	if hidden := nt.HiddenProcesses(t); len(hidden) > 0 {
		if !errors.Is(err, fault.ErrUnproven) || errors.Is(err, fault.ErrTargetGone) || !strings.Contains(err.Error(), hidden[0]) {
			t.Fatalf("%s with %v hidden: %v, want ErrUnproven naming %s", what, hidden, err, hidden[0])
		}
		return false
	}
	if !errors.Is(err, fault.ErrTargetGone) || !strings.Contains(err.Error(), "no holder left") {
		t.Fatalf("%s: %v, want ErrTargetGone with its proof", what, err)
	}
	return true
}
