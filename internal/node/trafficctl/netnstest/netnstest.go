// Package netnstest builds throw-away network fixtures for tests: two fresh
// named network namespaces joined by a veth pair, a process living in the
// first (so a namespace can be found by pid, as a pod's is), and helpers to
// open sockets inside a namespace. Everything is removed by t.Cleanup.
//
// The fixture needs root and a kernel with network namespaces, veth, tbf,
// clsact and cls_bpf; it skips the test with the reason otherwise. Traffic stays inside the
// fixture's namespaces.
package netnstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
)

// The fixture's addresses: A on one end of the veth, B and B2 on the other.
const (
	AddrA  = "10.201.0.1"
	AddrB  = "10.201.0.2"
	AddrB2 = "10.201.0.3"
	// IfA and IfB are the veth ends' names, in A and B.
	IfA = "gcnf-a"
	IfB = "gcnf-b"
)

// SleeperEnv, set in a test binary's environment, makes TestMain call
// Sleep: the process then lives, idle, in the namespace it was started in.
const SleeperEnv = "GPUCHAOS_NETNSTEST_SLEEPER"

// Sleep blocks until the process is killed. A test package's TestMain calls
// it when SleeperEnv is set.
func Sleep() {
	for {
		time.Sleep(time.Hour)
	}
}

// Options shape a fixture.
type Options struct {
	// Queues is the number of transmit and receive queues of each veth end;
	// 0 means 1. More than one gives the interface the kernel's default mq
	// root qdisc instead of noqueue.
	Queues int
}

// Fixture is two namespaces, A and B, joined by a veth pair.
type Fixture struct {
	A, B NS
	// PID is a process living in A.
	PID  int
	kill func()
}

// Vanish removes namespace A as a node's namespace goes when its pod is
// deleted: the process in it is killed and its name and handles dropped,
// so the kernel destroys it and the veth pair with it.
func (f *Fixture) Vanish() {
	f.kill()
	f.A.remove()
}

// KillProcess kills the process living in A and nothing else: the
// namespace lives on through its name and the test's handles, as a pod's
// namespace outlives a container that restarts.
func (f *Fixture) KillProcess() { f.kill() }

// NS is one namespace of the fixture.
type NS struct {
	Name   string
	Handle netns.NsHandle
	// Netlink is a netlink handle bound to the namespace.
	Netlink *netlink.Handle
	remove  func()
	// closeHandles and unname each drop one kind of hold on the
	// namespace; remove drops both.
	closeHandles, unname func()
}

// CloseHandles closes the test's own descriptors of the namespace (Handle
// and Netlink's sockets), leaving its name and the processes in it.
func (n NS) CloseHandles() { n.closeHandles() }

// Unname removes the namespace's name (its bind mount under /run/netns),
// leaving the test's handles and the processes in it.
func (n NS) Unname() { n.unname() }

// RequireRoot skips the test unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces, veth pairs and qdiscs")
	}
}

// New builds a fixture: A holds IfA with AddrA/24 and a default route via
// AddrB; B holds IfB with AddrB/24 and AddrB2/24 and no default route.
func New(t testing.TB, o Options) *Fixture {
	t.Helper()
	RequireRoot(t)
	f := &Fixture{A: newNS(t), B: newNS(t)}
	q := max(o.Queues, 1)
	veth := &netlink.Veth{
		LinkAttrs:       netlink.LinkAttrs{Name: IfA, NumTxQueues: q, NumRxQueues: q},
		PeerName:        IfB,
		PeerNamespace:   netlink.NsFd(int(f.B.Handle)),
		PeerNumTxQueues: uint32(q),
		PeerNumRxQueues: uint32(q),
	}
	if err := f.A.Netlink.LinkAdd(veth); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOENT) {
			t.Skipf("kernel lacks veth (CONFIG_VETH): %v", err)
		}
		t.Fatalf("add veth pair: %v", err)
	}
	setup := func(n NS, name string, addrs ...string) {
		l, err := n.Netlink.LinkByName(name)
		if err != nil {
			t.Fatalf("find %s in %s: %v", name, n.Name, err)
		}
		for _, a := range addrs {
			ipn, err := netlink.ParseIPNet(a + "/24")
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Netlink.AddrAdd(l, &netlink.Addr{IPNet: ipn}); err != nil {
				t.Fatalf("add %s to %s: %v", a, name, err)
			}
		}
		if err := n.Netlink.LinkSetUp(l); err != nil {
			t.Fatalf("set %s up: %v", name, err)
		}
		if lo, err := n.Netlink.LinkByName("lo"); err == nil {
			_ = n.Netlink.LinkSetUp(lo)
		}
	}
	setup(f.A, IfA, AddrA)
	setup(f.B, IfB, AddrB, AddrB2)
	la, _ := f.A.Netlink.LinkByName(IfA)
	if err := f.A.Netlink.RouteAdd(&netlink.Route{LinkIndex: la.Attrs().Index, Gw: net.ParseIP(AddrB)}); err != nil {
		t.Fatalf("add default route in %s: %v", f.A.Name, err)
	}
	f.PID, f.kill = StartSleeper(t, f.A.Handle)
	requireFaults(t, f)
	return f
}

// requireFaults skips the test when the kernel cannot run the faults the
// tests exercise (tbf, clsact, cls_bpf and BPF programs), naming what is
// missing; any other failure fails the test.
func requireFaults(t testing.TB, f *Fixture) {
	t.Helper()
	ctx := context.Background()
	tgt := trafficctl.Target{PID: f.PID, Interface: IfA}
	plans := []func() (*trafficctl.Change, error){
		func() (*trafficctl.Change, error) { return trafficctl.PlanRateLimit(ctx, tgt, 1e6) },
		func() (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tgt, []trafficctl.Hook{trafficctl.Egress}, trafficctl.Drop{Probability: 0})
		},
	}
	for _, plan := range plans {
		ch, err := plan()
		if err != nil {
			t.Fatalf("plan a probe change: %v", err)
		}
		if err := ch.Apply(ctx); errors.Is(err, trafficctl.ErrKernelFeature) || errors.Is(err, unix.EPERM) {
			t.Skipf("the kernel cannot run the network faults here: %v", err)
		} else if err != nil {
			t.Fatalf("apply probe change %s: %v", ch, err)
		}
		if err := ch.Undo(ctx); err != nil {
			t.Fatalf("undo probe change: %v", err)
		}
	}
}

func newNS(t testing.TB) NS {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "gcnf-" + hex.EncodeToString(b[:])
	var ns netns.NsHandle
	err := onThread(func() error {
		var err error
		ns, err = netns.NewNamed(name)
		return err
	})
	if err != nil {
		t.Fatalf("create network namespace %s: %v", name, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		_ = netns.DeleteNamed(name)
		t.Fatalf("netlink in %s: %v", name, err)
	}
	closeHandles := sync.OnceFunc(func() {
		h.Close()
		ns.Close()
	})
	unname := sync.OnceFunc(func() { _ = netns.DeleteNamed(name) })
	remove := func() { closeHandles(); unname() }
	t.Cleanup(remove)
	return NS{Name: name, Handle: ns, Netlink: h, remove: remove, closeHandles: closeHandles, unname: unname}
}

// onThread runs fn on a locked OS thread and puts the thread back in the
// namespace it started in. A thread that cannot be put back stays locked,
// so the runtime discards it with the goroutine rather than reuse it.
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("get this thread's namespace: %w", err)
			return
		}
		defer orig.Close()
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to the original namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// In runs fn with the calling goroutine's thread switched into ns; sockets
// fn creates live in ns for their whole life.
func In(ns netns.NsHandle, fn func() error) error {
	return onThread(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("enter namespace: %w", err)
		}
		return fn()
	})
}

// StartSleeper starts this test binary again as an idle process living in
// ns (the test package's TestMain must call Sleep when SleeperEnv is set)
// and returns its pid and a function that kills it. Cleanup kills it too.
func StartSleeper(t testing.TB, ns netns.NsHandle) (int, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), SleeperEnv+"=1")
	// A child inherits the namespace of the thread that forks it.
	if err := In(ns, cmd.Start); err != nil {
		t.Fatalf("start a process in the namespace: %v", err)
	}
	kill := sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	t.Cleanup(kill)
	return cmd.Process.Pid, kill
}

// Link returns the named interface of n.
func (n NS) Link(t testing.TB, name string) netlink.Link {
	t.Helper()
	l, err := n.Netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("find %s in %s: %v", name, n.Name, err)
	}
	return l
}

// AddForeignFilter attaches, on parent of an existing clsact qdisc,
// someone else's cls_bpf filter (priority 1, handle 1, named
// "their-filter") whose program keeps every packet: what a CNI or a
// monitoring agent may have there before a fault is injected.
func AddForeignFilter(t testing.TB, h *netlink.Handle, l netlink.Link, parent uint32) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "theirs", Type: ebpf.SchedCLS, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load the foreign program: %v", err)
	}
	defer prog.Close()
	err = h.FilterAdd(&netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: l.Attrs().Index, Parent: parent, Handle: 1, Priority: 1, Protocol: unix.ETH_P_ALL},
		Fd:          prog.FD(), Name: "their-filter", DirectAction: true,
	})
	if err != nil {
		t.Fatalf("attach the foreign filter: %v", err)
	}
}

// HiddenProcesses lists the processes whose network namespace the caller
// may not read, as "pid N (comm)": a sandbox may hide its init even from
// root. No search for a namespace's holders can look past them, so a test
// of such a search expects "cannot prove" where they exist.
func HiddenProcesses(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + e.Name() + "/ns/net"); errors.Is(err, os.ErrPermission) {
			comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
			out = append(out, fmt.Sprintf("pid %s (%s)", e.Name(), strings.TrimSpace(string(comm))))
		}
	}
	return out
}
