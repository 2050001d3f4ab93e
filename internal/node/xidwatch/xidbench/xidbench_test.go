package xidbench

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
	"github.com/gpuchaos/gpuchaos/internal/node/xidwatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunReal runs a short latency bench on the real kernel log.
func TestRunReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: writing /dev/kmsg needs root")
	}
	if _, err := os.Stat(kmsg.DefaultPath); err != nil {
		t.Skipf("no kernel log device: %v", err)
	}
	var sunk sync.Map
	res, err := Run(context.Background(), Options{
		PCI: "0000:fe:00", Injections: 20, Interval: time.Millisecond, Burst: 100, BurstOver: 50 * time.Millisecond,
		Sink: func(ev xidwatch.Event) { sunk.Store(*ev.PID, true) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Seen != 20 || res.BurstSeen != 100 || res.Lost != 0 {
		t.Fatalf("bench %+v: lines missing", res)
	}
	if res.P50 <= 0 || res.P99 < res.P50 || res.Max < res.P99 {
		t.Errorf("percentiles out of order: %+v", res)
	}
	n := 0
	sunk.Range(func(any, any) bool { n++; return true })
	if n != 120 {
		t.Errorf("sink saw %d events, want 120", n)
	}
	t.Logf("p50 %v p99 %v max %v burst %d/%d lost %d", res.P50, res.P99, res.Max, res.BurstSeen, res.Burst, res.Lost)
}
