package localtarget

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
	"github.com/gpuchaos/gpuchaos/internal/node/xidwatch"
)

// chanSource delivers the records sent on its channel until ctx ends.
type chanSource struct{ recs chan kmsg.Record }

func (s chanSource) Run(ctx context.Context, fn func(kmsg.Record)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case r := <-s.recs:
			fn(r)
		}
	}
}

func (chanSource) Lost() uint64 { return 0 }

// steppingClock steps one second per call, so that events are ordered and
// a probe made between two events tells them apart.
type steppingClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func TestXIDProbe(t *testing.T) {
	t.Parallel()
	src := chanSource{recs: make(chan kmsg.Record, 8)}
	src.recs <- kmsg.Record{Priority: 3, Seq: 100, Flags: "-", Message: xid.FormatLine("0000:18:00", 79, -1, "", "")}
	clock := &steppingClock{}
	inventory := func(pci string) (int, string, bool) {
		switch pci {
		case "0000:18:00":
			return 0, "GPU-aaaa", true
		case "0000:2a:00":
			return 1, "GPU-bbbb", true
		}
		return 0, "", false
	}
	w, err := xidwatch.Start(context.Background(), xidwatch.Options{Source: src, Resolve: inventory, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	testutil.Eventually(t, 10*time.Second, "one event", func() bool { return len(w.Events()) == 1 })

	p := newXIDProbe(w, "xid-79", "node-a", func(ev xidwatch.Event) bool { return ev.Code == 79 })
	ctx := context.Background()
	obs, err := p.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if obs.Holds {
		t.Fatal("probe holds for an XID read before it was made")
	}
	src.recs <- kmsg.Record{Seq: 5, Message: xid.FormatLine("0000:2a:00", 13, -1, "", "")}
	src.recs <- kmsg.Record{Seq: 6, Message: xid.FormatLine("0000:2a:00", 79, -1, "", "")}
	testutil.Eventually(t, 10*time.Second, "three events", func() bool { return len(w.Events()) == 3 })
	obs, err = p.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !obs.Holds || obs.Value != 79 || len(obs.Subjects) != 1 {
		t.Fatalf("Observe = %+v, want holds with code 79 and one subject", obs)
	}
	if s := obs.Subjects[0]; s.Node != "node-a" || s.GPU != "1" || s.UUID != "GPU-bbbb" || s.PCI != "0000:2a:00" {
		t.Errorf("subject = %+v", s)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Observe(cctx); err == nil {
		t.Error("Observe with a cancelled context returned no error")
	}
}
