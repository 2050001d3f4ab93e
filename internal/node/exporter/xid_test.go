package exporter

import (
	"context"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
	"github.com/gpuchaos/gpuchaos/internal/node/xidwatch"
	"github.com/gpuchaos/gpuchaos/internal/node/xidwatch/xidbench"
)

// TestXIDToMetricsReal is the whole path an operator's scrape sees, on the
// real kernel log: XID lines written to /dev/kmsg, read by a watcher,
// recorded by the agent and counted on its /metrics page over HTTP. The
// GPU the lines name is the twin's GPU 0, so the count also carries its
// index and UUID.
func TestXIDToMetricsReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: writing /dev/kmsg needs root")
	}
	if _, err := os.Stat(kmsg.DefaultPath); err != nil {
		t.Skipf("no kernel log device: %v", err)
	}
	_, src := twinSource(t)
	a := newAgent(t, Options{Source: src, Hostname: "gpu-node-0"})
	dev := a.Devices()[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.Collect(ctx) // the GPUs' own series, DCGM_FI_DEV_XID_ERRORS among them
	w, err := xidwatch.Start(ctx, xidwatch.Options{
		Resolve: func(string) (int, string, bool) { return dev.Index, dev.UUID, true },
		OnXID:   func(ev xidwatch.Event) { a.RecordXID(ev.GPU, ev.Code) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	srv := httptest.NewServer(a)
	defer srv.Close()

	// Code 94 (contained ECC error) so that lines of the watcher-only
	// tests, which use 13, never count here.
	res, err := xidbench.Run(ctx, xidbench.Options{
		PCI: dev.PCI, Code: 94, Injections: 20, Interval: time.Millisecond,
		Burst: 200, BurstOver: 100 * time.Millisecond, Metrics: srv.URL + "/metrics",
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Seen != 20 || res.BurstSeen != 200 {
		t.Fatalf("bench %+v: lines missing from /metrics", res)
	}
	if res.P50 <= 0 || res.P99 < res.P50 || res.Max < res.P99 {
		t.Errorf("percentiles out of order: %+v", res)
	}
	fams := scrape(t, a)
	m, ok := find(fams, "gpuchaos_xid_events_total", map[string]string{"gpu": "0", "UUID": dev.UUID, "code": "94"})
	if !ok {
		t.Fatal("no gpuchaos_xid_events_total for gpu 0 code 94")
	}
	if got := value(m); got != 220 {
		t.Errorf("gpu 0 code 94 counted %v, want 220", got)
	}
	if x, ok := find(fams, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "0"}); !ok {
		t.Error("no DCGM_FI_DEV_XID_ERRORS for gpu 0")
	} else if got := value(x); got != 94 {
		t.Errorf("DCGM_FI_DEV_XID_ERRORS of gpu 0 = %v, want 94", got)
	}
	t.Logf("kmsg → /metrics: p50 %v p99 %v max %v over %d polls; burst %d/%d", res.P50, res.P99, res.Max, res.Polls, res.BurstSeen, res.Burst)
}
