package xidwatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// chanSource delivers the records sent on its channel, then waits for ctx.
type chanSource struct {
	recs chan kmsg.Record
	lost uint64
	err  error // returned after recs is closed, when set
}

func (s *chanSource) Run(ctx context.Context, fn func(kmsg.Record)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case r, ok := <-s.recs:
			if !ok {
				if s.err != nil {
					return s.err
				}
				<-ctx.Done()
				return nil
			}
			fn(r)
		}
	}
}

func (s *chanSource) Lost() uint64 { return s.lost }

func source(lines ...string) *chanSource {
	s := &chanSource{recs: make(chan kmsg.Record, len(lines)+8)}
	for i, l := range lines {
		s.recs <- kmsg.Record{Priority: 3, Seq: uint64(100 + i), Time: time.Duration(i) * time.Second, Flags: "-", Message: l}
	}
	return s
}

// inventory resolves two GPUs, as an NVML inventory would.
func inventory(pci string) (int, string, bool) {
	switch pci {
	case "0000:18:00":
		return 0, "GPU-aaaa", true
	case "0000:2a:00":
		return 1, "GPU-bbbb", true
	}
	return 0, "", false
}

// fixedClock steps one second per call, so that events are ordered and a
// probe made between two events tells them apart.
type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fixedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func TestWatcherEvents(t *testing.T) {
	t.Parallel()
	lines := []string{
		"EXT4-fs (vda): mounted filesystem",
		xid.FormatLine("00000000:18:00.0", 13, 1234, "python3", ""),
		xid.FormatLine("0000:99:00", 79, -1, "", ""),
		"nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress",
		xid.FormatLine("0000:2a:00", 48, -1, "", ""),
		xid.FormatLine("0000:18:00", 31, 99, "trainer", ""),
	}
	src := source(lines...)
	src.lost = 7
	var mu sync.Mutex
	var got []Event
	w, err := Start(context.Background(), Options{Source: src, Resolve: inventory, Now: (&fixedClock{}).Now, OnXID: func(ev Event) {
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	testutil.Eventually(t, 10*time.Second, "four events", func() bool { return len(w.Events()) == 4 })

	type brief struct {
		GPU    int
		UUID   string
		PCI    string
		Code   int
		Action xid.Action
		Seq    uint64
	}
	want := []brief{
		{0, "GPU-aaaa", "0000:18:00", 13, xid.ActionRestartApp, 101},
		{-1, "", "0000:99:00", 79, xid.ActionReboot, 102},
		{1, "GPU-bbbb", "0000:2a:00", 48, xid.ActionResetGPU, 104},
		{0, "GPU-aaaa", "0000:18:00", 31, xid.ActionRestartApp, 105},
	}
	mu.Lock()
	var b []brief
	for _, ev := range got {
		b = append(b, brief{ev.GPU, ev.UUID, ev.PCI, ev.Code, ev.Action, ev.Seq})
	}
	mu.Unlock()
	if !reflect.DeepEqual(b, want) {
		t.Errorf("OnXID events\n got %+v\nwant %+v", b, want)
	}
	if got[0].PID == nil || *got[0].PID != 1234 || got[0].Line != lines[1] {
		t.Errorf("first event pid/line = %v %q", got[0].PID, got[0].Line)
	}
	if c := w.Counts(); !reflect.DeepEqual(c, map[int]uint64{13: 1, 79: 1, 48: 1, 31: 1}) {
		t.Errorf("Counts() = %v", c)
	}
	if ev, ok := w.Last(0); !ok || ev.Code != 31 {
		t.Errorf("Last(0) = %d %v, want the later XID 31", ev.Code, ok)
	}
	if ev, ok := w.Last(1); !ok || ev.Code != 48 {
		t.Errorf("Last(1) = %d %v, want 48", ev.Code, ok)
	}
	if _, ok := w.Last(2); ok {
		t.Error("Last(2) found an XID for a GPU that had none")
	}
	if ev, ok := w.LastByPCI("0000:99:00"); !ok || ev.Code != 79 {
		t.Errorf("LastByPCI of the unresolved GPU = %d %v, want 79", ev.Code, ok)
	}
	if w.Lost() != 7 {
		t.Errorf("Lost() = %d, want the source's 7", w.Lost())
	}
}

func TestHistoryIsBounded(t *testing.T) {
	t.Parallel()
	var lines []string
	for i := range 10 {
		lines = append(lines, xid.FormatLine("0000:18:00", 13, i, "p", ""))
	}
	w, err := Start(context.Background(), Options{Source: source(lines...), History: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	testutil.Eventually(t, 10*time.Second, "ten XID 13 counted", func() bool { return w.Counts()[13] == 10 })
	evs := w.Events()
	if len(evs) != 3 || *evs[0].PID != 7 || *evs[2].PID != 9 {
		t.Fatalf("history holds %d events starting at pid %d, want the last 3 (7-9)", len(evs), *evs[0].PID)
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	src := source()
	w, err := Start(context.Background(), Options{Source: src, Resolve: inventory})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	res := make(chan Event, 1)
	errc := make(chan error, 1)
	go func() {
		ev, err := w.Wait(context.Background(), func(ev Event) bool { return ev.Code == 79 })
		errc <- err
		res <- ev
	}()
	testutil.Eventually(t, 10*time.Second, "one waiter", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.waiters) == 1
	})
	src.recs <- kmsg.Record{Seq: 1, Message: xid.FormatLine("0000:18:00", 13, -1, "", "")}
	src.recs <- kmsg.Record{Seq: 2, Message: xid.FormatLine("0000:2a:00", 79, -1, "", "")}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if ev := <-res; ev.Code != 79 || ev.GPU != 1 {
		t.Errorf("Wait returned code %d on GPU %d, want 79 on 1", ev.Code, ev.GPU)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := w.Wait(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with nothing coming = %v, want the deadline", err)
	}
}

func TestWaitEndsWithTheWatcher(t *testing.T) {
	t.Parallel()
	src := source()
	src.err = errors.New("device gone")
	close(src.recs)
	w, err := Start(context.Background(), Options{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Wait(context.Background(), nil); err == nil {
		t.Fatal("Wait on a failed watcher returned no error")
	}
	if err := w.Stop(); err == nil || !errors.Is(err, src.err) {
		t.Fatalf("Stop = %v, want the source's error", err)
	}
}

// TestRealKmsg writes an XID 13 line to the real kernel log and sees it
// come back through the watcher, resolved to its GPU. CI runs as root,
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
	proc := "gc" + hex.EncodeToString(tag) // 10 bytes, under the kernel's 15
	w, err := Start(context.Background(), Options{Resolve: inventory})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	res := make(chan Event, 1)
	errc := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		ev, err := w.Wait(ctx, func(ev Event) bool { return ev.Process != nil && *ev.Process == proc })
		errc <- err
		res <- ev
	}()
	testutil.Eventually(t, 10*time.Second, "one waiter", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.waiters) == 1
	})
	if err := kmsg.Write(kmsg.LevelErr, xid.FormatLine("00000000:18:00.0", 13, 4242, proc, "")); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("the written XID did not reach the watcher: %v", err)
	}
	ev := <-res
	if ev.GPU != 0 || ev.UUID != "GPU-aaaa" || ev.Code != 13 || ev.PID == nil || *ev.PID != 4242 {
		t.Errorf("event = %+v", ev)
	}
	if w.Lost() != 0 {
		t.Errorf("lost %d records", w.Lost())
	}
}
