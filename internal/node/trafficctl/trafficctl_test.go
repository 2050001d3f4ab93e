package trafficctl_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
	nt "github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
)

func TestMain(m *testing.M) {
	if os.Getenv(nt.SleeperEnv) != "" {
		nt.Sleep()
	}
	goleak.VerifyTestMain(m)
}

// fixture builds the namespaces (skipping when the kernel lacks what the
// faults need) and names A's veth end in the sleeper's namespace.
func fixture(t testing.TB, o nt.Options) (*nt.Fixture, trafficctl.Target) {
	t.Helper()
	f := nt.New(t, o)
	return f, trafficctl.Target{PID: f.PID, Interface: nt.IfA}
}

func take(t testing.TB, tgt trafficctl.Target) trafficctl.Snapshot {
	t.Helper()
	s, err := trafficctl.Take(context.Background(), tgt)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return s
}

func mustEqual(t *testing.T, what string, got, want trafficctl.Snapshot) {
	t.Helper()
	if !got.Equal(want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Fatalf("%s: snapshot differs\n got %s\nwant %s", what, g, w)
	}
}

func TestResolve(t *testing.T) {
	f, _ := fixture(t, nt.Options{})
	// A pid that no process has: a child that has been reaped.
	gone := exec.Command(os.Args[0], "-test.run=^$")
	if err := gone.Run(); err != nil {
		t.Fatalf("run a short-lived child: %v", err)
	}
	bPID, _ := nt.StartSleeper(t, f.B.Handle)
	tests := []struct {
		name    string
		tgt     trafficctl.Target
		wantIf  string
		wantErr string
	}{
		{name: "by name", tgt: trafficctl.Target{PID: f.PID, Interface: nt.IfA}, wantIf: nt.IfA},
		{name: "default route", tgt: trafficctl.Target{PID: f.PID}, wantIf: nt.IfA},
		{name: "no default route", tgt: trafficctl.Target{PID: bPID}, wantErr: "no default route"},
		{name: "unknown interface", tgt: trafficctl.Target{PID: f.PID, Interface: "nope0"}, wantErr: `no interface "nope0"`},
		{name: "no such pid", tgt: trafficctl.Target{PID: gone.Process.Pid, Interface: nt.IfA}, wantErr: "no such process"},
		{name: "negative pid", tgt: trafficctl.Target{PID: -4, Interface: nt.IfA}, wantErr: "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := trafficctl.Take(context.Background(), tc.tgt)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("error spans lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Interface != tc.wantIf {
				t.Fatalf("resolved %s, want %s", s.Interface, tc.wantIf)
			}
			if root, ok := s.Root(); !ok || root.Kind != "noqueue" || root.Handle != 0 {
				t.Fatalf("fresh veth's root qdisc is %+v (found %v), want the default noqueue 0:", root, ok)
			}
		})
	}
}

func TestPlanRejectsBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tgt := trafficctl.Target{PID: 0, Interface: "lo"}
	egress := []trafficctl.Hook{trafficctl.Egress}
	pfx := func(s string) *trafficctl.Match { return &trafficctl.Match{Prefix: netip.MustParsePrefix(s)} }
	tests := []struct {
		name string
		plan func() (*trafficctl.Change, error)
		want string
	}{
		{"probability above 1", func() (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tgt, egress, trafficctl.Drop{Probability: 1.5})
		}, "outside [0, 1]"},
		{"probability below 0", func() (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tgt, egress, trafficctl.Drop{Probability: -0.1})
		}, "outside [0, 1]"},
		{"probability NaN", func() (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tgt, egress, trafficctl.Drop{Probability: math.NaN()})
		}, "outside [0, 1]"},
		{"bad CIDR", func() (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tgt, egress, trafficctl.Drop{Probability: 1, Match: &trafficctl.Match{}})
		}, "not a valid CIDR"},
		{"IPv6 CIDR", func() (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tgt, egress, trafficctl.Drop{Probability: 1, Match: pfx("fd00::/8")})
		}, "not IPv4"},
		{"empty port range", func() (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tgt, egress, trafficctl.Drop{Probability: 1,
				Match: &trafficctl.Match{Prefix: netip.MustParsePrefix("0.0.0.0/0"), PortMin: 9, PortMax: 8}})
		}, "is empty"},
		{"no hook", func() (*trafficctl.Change, error) { return trafficctl.PlanDrop(ctx, tgt, nil, trafficctl.Drop{}) }, "no hook"},
		{"unknown hook", func() (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tgt, []trafficctl.Hook{"sideways"}, trafficctl.Drop{})
		}, "want egress or ingress"},
		{"hook twice", func() (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tgt, []trafficctl.Hook{trafficctl.Egress, trafficctl.Egress}, trafficctl.Drop{})
		}, "named twice"},
		{"rate 0", func() (*trafficctl.Change, error) { return trafficctl.PlanRateLimit(ctx, tgt, 0) }, "0 bytes/s"},
		{"netem loss above 1", func() (*trafficctl.Change, error) { return trafficctl.PlanNetem(ctx, tgt, 0, 2) }, "outside [0, 1]"},
		{"netem nothing", func() (*trafficctl.Change, error) { return trafficctl.PlanNetem(ctx, tgt, 0, 0) }, "does nothing"},
		{"netem negative delay", func() (*trafficctl.Change, error) { return trafficctl.PlanNetem(ctx, tgt, -time.Second, 0) }, "outside"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ch, err := tc.plan()
			if err == nil {
				t.Fatalf("planned %s, want an error containing %q", ch, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q, want one line containing %q", err, tc.want)
			}
		})
	}
}

// tcpGoodput sends TCP from A to B for warm+measure and returns the bytes
// per second B received during measure.
func tcpGoodput(t testing.TB, f *nt.Fixture, warm, measure time.Duration) float64 {
	t.Helper()
	var ln net.Listener
	if err := nt.In(f.B.Handle, func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(nt.AddrB, "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conn net.Conn
	if err := nt.In(f.A.Handle, func() (err error) {
		conn, err = net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 256<<10)
		for {
			n, err := srv.Read(buf)
			received.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	start := time.Now()
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		buf := make([]byte, 64<<10)
		_ = conn.SetWriteDeadline(start.Add(warm + measure + time.Second))
		for {
			if _, err := conn.Write(buf); err != nil {
				return
			}
		}
	}()
	time.Sleep(warm)
	b0, t0 := received.Load(), time.Now()
	time.Sleep(measure)
	b1, t1 := received.Load(), time.Now()
	conn.Close()
	<-writeDone
	srv.Close()
	<-done
	return float64(b1-b0) / t1.Sub(t0).Seconds()
}

// TestRateLimit checks the filter the kernel was given and a generous
// bound on what it does. Given: the interface's root qdisc is a tbf at the
// rate asked, as the kernel reports it back. Done: TCP goodput through it
// never exceeds the rate by more than 10 % (a token bucket caps the flow
// whatever else the host runs) and reaches a quarter of it (a flow a busy
// host starves for a moment still moves). How close the goodput comes to
// the rate depends on the host; BenchmarkRateLimit reports it.
func TestRateLimit(t *testing.T) {
	f, tgt := fixture(t, nt.Options{})
	ctx := context.Background()
	before := take(t, tgt)
	for _, mbit := range []float64{10, 50} {
		t.Run(fmt.Sprintf("%.0f Mbit/s", mbit), func(t *testing.T) {
			rate := uint64(mbit * 1e6 / 8)
			ch, err := trafficctl.PlanRateLimit(ctx, tgt, rate)
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.Apply(ctx); err != nil {
				t.Fatal(err)
			}
			if root, ok := take(t, tgt).Root(); !ok || root.Kind != "tbf" || root.TBF.Rate != rate {
				t.Errorf("root qdisc %+v (present %v), want a tbf at %d bytes/s", root, ok, rate)
			}
			got := tcpGoodput(t, f, 700*time.Millisecond, 2*time.Second)
			t.Logf("limit %.0f bytes/s (%.0f Mbit/s): measured TCP goodput %.0f bytes/s (%.1f Mbit/s, %.1f %% of the limit)",
				float64(rate), mbit, got, got*8/1e6, 100*got/float64(rate))
			if got > 1.10*float64(rate) {
				t.Errorf("goodput %.0f bytes/s exceeds the limit %d by more than 10 %%", got, rate)
			}
			if got < float64(rate)/4 {
				t.Errorf("goodput %.0f bytes/s is under a quarter of the limit %d", got, rate)
			}
			if err := ch.Undo(ctx); err != nil {
				t.Fatal(err)
			}
			mustEqual(t, "after undo", take(t, tgt), before)
		})
	}
	// Unlimited, the veth carries more than the highest limit: the cap
	// above is the tbf's.
	if got := tcpGoodput(t, f, 200*time.Millisecond, 300*time.Millisecond); got < 1.5*50e6/8 {
		t.Fatalf("unlimited goodput %.0f bytes/s is under 1.5 times the highest limit: the measurement cannot tell", got)
	}
}

// BenchmarkRateLimit reports the TCP goodput through the tbf as a share
// of its rate (of-rate: 1 is exact) and in Mbit/s. Each iteration is one
// flow: 700 ms to fill the bucket, then 2 s measured.
func BenchmarkRateLimit(b *testing.B) {
	f, tgt := fixture(b, nt.Options{})
	ctx := context.Background()
	for _, mbit := range []float64{10, 50} {
		b.Run(fmt.Sprintf("%.0fMbit", mbit), func(b *testing.B) {
			rate := uint64(mbit * 1e6 / 8)
			ch, err := trafficctl.PlanRateLimit(ctx, tgt, rate)
			if err != nil {
				b.Fatal(err)
			}
			if err := ch.Apply(ctx); err != nil {
				b.Fatal(err)
			}
			defer ch.Undo(ctx)
			var got []float64
			for b.Loop() {
				got = append(got, tcpGoodput(b, f, 700*time.Millisecond, 2*time.Second))
			}
			slices.Sort(got)
			b.ReportMetric(got[len(got)/2]/float64(rate), "of-rate")
			b.ReportMetric(got[len(got)/2]*8/1e6, "Mbit/s")
		})
	}
}

// udpCount sends n datagrams from a socket in from to dst and returns how
// many the receiver got. The receiver is bound in B to dst; src, when not
// empty, is the sender's own address and port.
func udpCount(t *testing.T, f *nt.Fixture, fromA bool, src, dst string, n int) int {
	t.Helper()
	recvNS, sendNS := f.B.Handle, f.A.Handle
	if !fromA {
		recvNS, sendNS = f.A.Handle, f.B.Handle
	}
	var rc *net.UDPConn
	if err := nt.In(recvNS, func() error {
		a, err := net.ResolveUDPAddr("udp4", dst)
		if err != nil {
			return err
		}
		rc, err = net.ListenUDP("udp4", a)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// A buffer that holds every datagram even if the reader is starved
	// (as under -race on two busy cores), so that no loss but the
	// filter's is counted. SO_RCVBUFFORCE, as root, passes rmem_max.
	raw, err := rc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	}); err != nil || serr != nil {
		t.Fatalf("enlarge the receive buffer: %v %v", err, serr)
	}
	var sc *net.UDPConn
	if err := nt.In(sendNS, func() error {
		var la *net.UDPAddr
		if src != "" {
			var err error
			if la, err = net.ResolveUDPAddr("udp4", src); err != nil {
				return err
			}
		}
		var err error
		sc, err = net.DialUDP("udp4", la, rc.LocalAddr().(*net.UDPAddr))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	seen := make([]bool, n)
	var arrived atomic.Int64
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			_ = rc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			m, err := rc.Read(buf)
			if err != nil {
				got <- int(arrived.Load())
				return
			}
			if i := int(binary.BigEndian.Uint32(buf[:m])); m >= 4 && i < n && !seen[i] {
				seen[i] = true
				arrived.Add(1)
			}
		}
	}()
	msg := make([]byte, 32)
	for i := range n {
		binary.BigEndian.PutUint32(msg, uint32(i))
		// A drop on egress may surface as ENOBUFS; the datagram counts
		// as sent either way.
		_, _ = sc.Write(msg)
		if i%50 == 49 {
			settle(&arrived)
		}
	}
	return <-got
}

// settle waits until no datagram has arrived for 2 ms. Sending in batches
// of 50 that each settle keeps the receiving CPU's backlog (1000 packets)
// from overflowing when softirqs run late on a loaded host, so the only
// loss counted is the filter's.
func settle(arrived *atomic.Int64) {
	for c := arrived.Load(); ; {
		time.Sleep(2 * time.Millisecond)
		now := arrived.Load()
		if now == c {
			return
		}
		c = now
	}
}

func TestLoss(t *testing.T) {
	f, tgt := fixture(t, nt.Options{})
	ctx := context.Background()
	before := take(t, tgt)
	const n = 5000
	dst := net.JoinHostPort(nt.AddrB, "7100")
	for _, p := range []float64{0, 0.10, 0.50, 1} {
		t.Run(fmt.Sprintf("p=%.2f", p), func(t *testing.T) {
			ch, err := trafficctl.PlanDrop(ctx, tgt, []trafficctl.Hook{trafficctl.Egress}, trafficctl.Drop{Probability: p})
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.Apply(ctx); err != nil {
				t.Fatal(err)
			}
			got := udpCount(t, f, true, "", dst, n)
			if err := ch.Undo(ctx); err != nil {
				t.Fatal(err)
			}
			loss := 1 - float64(got)/n
			t.Logf("p = %.2f: %d of %d UDP datagrams lost, measured loss %.2f %%", p, n-got, n, 100*loss)
			tol := 0.03
			if p == 0 || p == 1 {
				tol = 0 // exact: the program never or always drops
			}
			if math.Abs(loss-p) > tol {
				t.Fatalf("measured loss %.4f, want %.2f ± %.2f", loss, p, tol)
			}
			mustEqual(t, "after undo", take(t, tgt), before)
			if after := udpCount(t, f, true, "", dst, 500); after != 500 {
				t.Fatalf("%d of 500 datagrams arrived after undo", after)
			}
		})
	}
}

func TestPartition(t *testing.T) {
	f, tgt := fixture(t, nt.Options{})
	ctx := context.Background()
	before := take(t, tgt)
	const n = 300
	hp := net.JoinHostPort
	type flow struct {
		name     string
		fromA    bool
		src, dst string
		dropped  bool
	}
	tests := []struct {
		name  string
		cidr  string
		port  uint16
		flows []flow
	}{
		{
			name: "address and port", cidr: nt.AddrB + "/32", port: 7200,
			flows: []flow{
				{name: "to X:P dropped", fromA: true, dst: hp(nt.AddrB, "7200"), dropped: true},
				{name: "to X:other passes", fromA: true, dst: hp(nt.AddrB, "7201")},
				{name: "to another address:P passes", fromA: true, dst: hp(nt.AddrB2, "7200")},
				{name: "from X:P dropped on ingress", src: hp(nt.AddrB, "7200"), dst: hp(nt.AddrA, "7300"), dropped: true},
				{name: "from X:other passes ingress", src: hp(nt.AddrB, "7202"), dst: hp(nt.AddrA, "7300")},
			},
		},
		{
			name: "every port", cidr: nt.AddrB + "/32",
			flows: []flow{
				{name: "to X:P dropped", fromA: true, dst: hp(nt.AddrB, "7200"), dropped: true},
				{name: "to X:other dropped", fromA: true, dst: hp(nt.AddrB, "7201"), dropped: true},
				{name: "to another address passes", fromA: true, dst: hp(nt.AddrB2, "7200")},
				{name: "from X dropped on ingress", src: hp(nt.AddrB, "7203"), dst: hp(nt.AddrA, "7300"), dropped: true},
				{name: "from another address passes", src: hp(nt.AddrB2, "7203"), dst: hp(nt.AddrA, "7300")},
			},
		},
		{
			name: "prefix", cidr: "10.201.0.0/24", port: 7200,
			flows: []flow{
				{name: "to X:P dropped", fromA: true, dst: hp(nt.AddrB, "7200"), dropped: true},
				{name: "to another address in it:P dropped", fromA: true, dst: hp(nt.AddrB2, "7200"), dropped: true},
				{name: "to X:other passes", fromA: true, dst: hp(nt.AddrB, "7201")},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ch, err := trafficctl.PlanDrop(ctx, tgt, []trafficctl.Hook{trafficctl.Egress, trafficctl.Ingress}, trafficctl.Drop{
				Probability: 1,
				Match:       &trafficctl.Match{Prefix: netip.MustParsePrefix(tc.cidr), PortMin: tc.port, PortMax: tc.port},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.Apply(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := ch.Undo(ctx); err != nil {
					t.Fatal(err)
				}
				mustEqual(t, "after undo", take(t, tgt), before)
			}()
			for _, fl := range tc.flows {
				got := udpCount(t, f, fl.fromA, fl.src, fl.dst, n)
				want := n
				if fl.dropped {
					want = 0
				}
				if got != want {
					t.Errorf("%s: %d of %d datagrams arrived, want %d", fl.name, got, n, want)
				}
			}
		})
	}
}

// TestUndoRestoresExactly runs every mechanism over interfaces set up the
// ways one finds them: with the kernel's default root qdisc, with a root
// qdisc someone configured, and with someone else's clsact filters.
func TestUndoRestoresExactly(t *testing.T) {
	ctx := context.Background()
	setups := []struct {
		name   string
		queues int
		setup  func(t *testing.T, h *netlink.Handle, l netlink.Link)
	}{
		{name: "default noqueue"},
		{name: "default mq", queues: 4},
		{name: "configured mq", queues: 4, setup: func(t *testing.T, h *netlink.Handle, l netlink.Link) {
			mustDo(t, h.QdiscReplace(&netlink.GenericQdisc{QdiscType: "mq", QdiscAttrs: netlink.QdiscAttrs{
				LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(7, 0), Parent: netlink.HANDLE_ROOT}}))
		}},
		{name: "configured tbf", setup: func(t *testing.T, h *netlink.Handle, l netlink.Link) {
			mustDo(t, h.QdiscReplace(&netlink.Tbf{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: netlink.MakeHandle(5, 0), Parent: netlink.HANDLE_ROOT},
				Rate: 125e6, Buffer: netlink.Xmittime(125e6, 300000), Limit: 1 << 20}))
		}},
		{name: "configured pfifo_fast", setup: func(t *testing.T, h *netlink.Handle, l netlink.Link) {
			mustDo(t, h.QdiscReplace(&netlink.PfifoFast{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: netlink.MakeHandle(8, 0), Parent: netlink.HANDLE_ROOT}}))
		}},
		{name: "configured noqueue", setup: func(t *testing.T, h *netlink.Handle, l netlink.Link) {
			mustDo(t, h.QdiscReplace(&netlink.GenericQdisc{QdiscType: "noqueue", QdiscAttrs: netlink.QdiscAttrs{
				LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(5, 0), Parent: netlink.HANDLE_ROOT}}))
		}},
		{name: "their clsact filters and a tbf", setup: func(t *testing.T, h *netlink.Handle, l netlink.Link) {
			mustDo(t, h.QdiscReplace(&netlink.Tbf{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: netlink.MakeHandle(5, 0), Parent: netlink.HANDLE_ROOT},
				Rate: 1e9, Buffer: netlink.Xmittime(1e9, 1<<20), Limit: 4 << 20}))
			mustDo(t, h.QdiscAdd(&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}))
			nt.AddForeignFilter(t, h, l, netlink.HANDLE_MIN_EGRESS)
			nt.AddForeignFilter(t, h, l, netlink.HANDLE_MIN_INGRESS)
		}},
	}
	mechanisms := []struct {
		name string
		plan func(trafficctl.Target) (*trafficctl.Change, error)
	}{
		{"tbf", func(tg trafficctl.Target) (*trafficctl.Change, error) { return trafficctl.PlanRateLimit(ctx, tg, 1e6) }},
		{"loss", func(tg trafficctl.Target) (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tg, []trafficctl.Hook{trafficctl.Egress}, trafficctl.Drop{Probability: 0.3})
		}},
		{"partition", func(tg trafficctl.Target) (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tg, []trafficctl.Hook{trafficctl.Egress, trafficctl.Ingress}, trafficctl.Drop{Probability: 1,
				Match: &trafficctl.Match{Prefix: netip.MustParsePrefix("10.201.0.2/32"), PortMin: 1, PortMax: 1}})
		}},
		{"netem", func(tg trafficctl.Target) (*trafficctl.Change, error) {
			return trafficctl.PlanNetem(ctx, tg, 5*time.Millisecond, 0)
		}},
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			f, tgt := fixture(t, nt.Options{Queues: s.queues})
			if s.setup != nil {
				s.setup(t, f.A.Netlink, f.A.Link(t, nt.IfA))
			}
			before := take(t, tgt)
			for _, m := range mechanisms {
				ch, err := m.plan(tgt)
				if err != nil {
					t.Fatalf("%s: plan: %v", m.name, err)
				}
				// A round trip through JSON is what a fresh process sees.
				ch = roundTrip(t, ch)
				err = ch.Apply(ctx)
				if m.name == "netem" && errors.Is(err, trafficctl.ErrKernelFeature) {
					if !strings.Contains(err.Error(), "sch_netem") || !strings.Contains(err.Error(), "CONFIG_NET_SCH_NETEM") {
						t.Fatalf("netem: error %q does not name sch_netem and its config option", err)
					}
					mustEqual(t, "after a refused netem", take(t, tgt), before)
					continue
				}
				if err != nil {
					t.Fatalf("%s: apply: %v", m.name, err)
				}
				if take(t, tgt).Equal(before) {
					t.Fatalf("%s: applied, but the snapshot did not change", m.name)
				}
				for i := range 2 {
					if err := ch.Undo(ctx); err != nil {
						t.Fatalf("%s: undo %d: %v", m.name, i+1, err)
					}
					mustEqual(t, fmt.Sprintf("%s: after undo %d", m.name, i+1), take(t, tgt), before)
				}
			}
		})
	}
}

func TestPlanRefusesWhatCannotBeRestored(t *testing.T) {
	ctx := context.Background()
	t.Run("classful root", func(t *testing.T) {
		f, tgt := fixture(t, nt.Options{})
		l := f.A.Link(t, nt.IfA)
		mustDo(t, f.A.Netlink.QdiscReplace(netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
			Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT})))
		_, err := trafficctl.PlanRateLimit(ctx, tgt, 1e6)
		if err == nil || !strings.Contains(err.Error(), "cannot be re-created") {
			t.Fatalf("error %v, want one saying htb cannot be re-created", err)
		}
	})
	t.Run("ours already", func(t *testing.T) {
		_, tgt := fixture(t, nt.Options{})
		ch, err := trafficctl.PlanRateLimit(ctx, tgt, 1e6)
		if err != nil {
			t.Fatal(err)
		}
		mustDo(t, ch.Apply(ctx))
		defer func() { mustDo(t, ch.Undo(ctx)) }()
		if _, err := trafficctl.PlanRateLimit(ctx, tgt, 2e6); err == nil || !strings.Contains(err.Error(), "another fault") {
			t.Fatalf("error %v, want one saying another fault is in effect", err)
		}
	})
	t.Run("ingress qdisc", func(t *testing.T) {
		f, tgt := fixture(t, nt.Options{})
		l := f.A.Link(t, nt.IfA)
		ingress := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
			Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS}}
		mustDo(t, f.A.Netlink.QdiscAdd(ingress))
		_, err := trafficctl.PlanDrop(ctx, tgt, []trafficctl.Hook{trafficctl.Egress}, trafficctl.Drop{Probability: 1})
		if err == nil || !strings.Contains(err.Error(), "ingress qdisc") {
			t.Fatalf("error %v, want one naming the ingress qdisc", err)
		}
	})
}

func TestCancelledContext(t *testing.T) {
	_, tgt := fixture(t, nt.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := trafficctl.PlanRateLimit(context.Background(), tgt, 1e6)
	if err != nil {
		t.Fatal(err)
	}
	before := take(t, tgt)
	cancel()
	if err := ch.Apply(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("apply with a cancelled context: %v, want context.Canceled", err)
	}
	mustEqual(t, "after a cancelled apply", take(t, tgt), before)
	if _, err := trafficctl.PlanRateLimit(ctx, tgt, 1e6); !errors.Is(err, context.Canceled) {
		t.Fatalf("plan with a cancelled context: %v, want context.Canceled", err)
	}
}

func roundTrip(t *testing.T, ch *trafficctl.Change) *trafficctl.Change {
	t.Helper()
	b, err := json.Marshal(ch)
	if err != nil {
		t.Fatal(err)
	}
	var out trafficctl.Change
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func FuzzHandleText(f *testing.F) {
	for _, s := range []string{"root", "1:0", "ffff:fff2", "6763:", ":1", "10000:0", "x:1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var h trafficctl.Handle
		if err := h.UnmarshalText([]byte(s)); err != nil {
			return
		}
		b, _ := h.MarshalText()
		var again trafficctl.Handle
		if err := again.UnmarshalText(b); err != nil || again != h {
			t.Fatalf("%q parsed to %s, which reads back as %s (%v)", s, h, again, err)
		}
	})
}

// TestUndoFindsTheNamespaceWhereverItLives: the process a change was
// planned through exits while its namespace lives on, held in each way a
// namespace can be (its name, a process in it, a descriptor of a process
// outside it); Undo finds it by its inode and removes exactly what the
// change added. Only when nothing holds it, or its interface is deleted,
// is the change gone, and the error says so with what was searched.
func TestUndoFindsTheNamespaceWhereverItLives(t *testing.T) {
	ctx := context.Background()
	kinds := []struct {
		name string
		plan func(trafficctl.Target) (*trafficctl.Change, error)
	}{
		{"partition", func(tgt trafficctl.Target) (*trafficctl.Change, error) {
			return trafficctl.PlanDrop(ctx, tgt, []trafficctl.Hook{trafficctl.Egress, trafficctl.Ingress}, trafficctl.Drop{Probability: 1})
		}},
		{"rate-limit", func(tgt trafficctl.Target) (*trafficctl.Change, error) {
			return trafficctl.PlanRateLimit(ctx, tgt, 1e7)
		}},
	}
	// Each way leaves the namespace (or not) and returns a handle to look
	// into it afterwards, or -1 when it must be gone.
	ways := []struct {
		name    string
		vanish  func(t *testing.T, f *nt.Fixture) netns.NsHandle
		wantErr string // empty: Undo succeeds
		// unproven: where some process cannot be looked into, the
		// search must say it cannot prove the change gone instead.
		unproven bool
	}{
		{name: "process exited, name and handles left", vanish: func(t *testing.T, f *nt.Fixture) netns.NsHandle {
			f.KillProcess()
			return f.A.Handle
		}},
		{name: "process exited, only the name left", vanish: func(t *testing.T, f *nt.Fixture) netns.NsHandle {
			f.KillProcess()
			f.A.CloseHandles()
			ns, err := netns.GetFromName(f.A.Name)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ns.Close() })
			return ns
		}},
		{name: "process exited, another process left in it", vanish: func(t *testing.T, f *nt.Fixture) netns.NsHandle {
			other, _ := nt.StartSleeper(t, f.A.Handle)
			f.KillProcess()
			f.A.CloseHandles()
			f.A.Unname()
			return open(t, fmt.Sprintf("/proc/%d/ns/net", other))
		}},
		{name: "process exited, a descriptor held outside it", vanish: func(t *testing.T, f *nt.Fixture) netns.NsHandle {
			holder := holdDescriptor(t, f.A.Handle)
			f.KillProcess()
			f.A.CloseHandles()
			f.A.Unname()
			return open(t, fmt.Sprintf("/proc/%d/fd/3", holder))
		}},
		{name: "interface renamed", vanish: func(t *testing.T, f *nt.Fixture) netns.NsHandle {
			mustDo(t, f.A.Netlink.LinkSetName(f.A.Link(t, nt.IfA), "gcnf-renamed"))
			f.KillProcess()
			return f.A.Handle
		}},
		{name: "nothing holds it", wantErr: "no holder left", unproven: true, vanish: func(t *testing.T, f *nt.Fixture) netns.NsHandle {
			f.Vanish()
			return -1
		}},
		{name: "interface deleted", wantErr: "no device has the index", vanish: func(t *testing.T, f *nt.Fixture) netns.NsHandle {
			mustDo(t, f.A.Netlink.LinkDel(f.A.Link(t, nt.IfA)))
			f.KillProcess()
			return -1
		}},
	}
	for _, k := range kinds {
		for _, w := range ways {
			t.Run(k.name+"/"+w.name, func(t *testing.T) {
				f, tgt := fixture(t, nt.Options{})
				before := take(t, tgt)
				ch, err := k.plan(tgt)
				if err != nil {
					t.Fatal(err)
				}
				mustDo(t, ch.Apply(ctx))
				ch = roundTrip(t, ch) // as a fresh process reads it from its record
				ns := w.vanish(t, f)
				err = ch.Undo(ctx)
				if hidden := nt.HiddenProcesses(t); w.unproven && len(hidden) > 0 {
					if !errors.Is(err, trafficctl.ErrUnproven) || errors.Is(err, trafficctl.ErrGone) || !strings.Contains(err.Error(), hidden[0]) {
						t.Fatalf("undo with %v out of sight: %v, want ErrUnproven naming %s", hidden, err, hidden[0])
					}
					return
				}
				if w.wantErr != "" {
					if !errors.Is(err, trafficctl.ErrGone) || !strings.Contains(err.Error(), w.wantErr) {
						t.Fatalf("undo: %v, want ErrGone saying %q", err, w.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatalf("undo with the namespace still alive: %v", err)
				}
				after := snapshotIn(t, ns)
				after.Interface = before.Interface // the renamed one is the same device
				if !after.Equal(before) {
					g, _ := json.Marshal(after)
					b, _ := json.Marshal(before)
					t.Fatalf("after undo the interface is\n %s\nnot as before\n %s", g, b)
				}
				if err := ch.Undo(ctx); err != nil {
					t.Fatalf("second undo: %v", err)
				}
			})
		}
	}
}

func open(t *testing.T, path string) netns.NsHandle {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// holdDescriptor starts an idle process in this test's own namespace that
// holds ns open as its descriptor 3, as a container runtime holds a pod's.
func holdDescriptor(t *testing.T, ns netns.NsHandle) int {
	t.Helper()
	fd, err := unix.Dup(int(ns))
	if err != nil {
		t.Fatal(err)
	}
	file := os.NewFile(uintptr(fd), "netns")
	defer file.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), nt.SleeperEnv+"=1")
	cmd.ExtraFiles = []*os.File{file}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// snapshotIn takes the snapshot of the fixture's interface in ns through a
// process started in it (the one the change was planned through is dead).
func snapshotIn(t *testing.T, ns netns.NsHandle) trafficctl.Snapshot {
	t.Helper()
	pid, kill := nt.StartSleeper(t, ns)
	defer kill()
	c, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	links, err := c.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Type() == "veth" {
			return take(t, trafficctl.Target{PID: pid, Interface: l.Attrs().Name})
		}
	}
	t.Fatal("no veth left in the namespace")
	return trafficctl.Snapshot{}
}
