package exporter

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/twin"
	"github.com/gpuchaos/gpuchaos/internal/twin/twingpu"
)

// benchAgent returns an agent over one 8-GPU node of a warmed-up twin,
// with one pass collected.
func benchAgent(b *testing.B) *Agent {
	b.Helper()
	tw, err := twin.New(twin.Options{Seed: 11, ScrapeInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	if err := tw.Sleep(context.Background(), time.Minute); err != nil {
		b.Fatal(err)
	}
	src, err := twingpu.New(twingpu.Locked(tw), "gpu-node-0")
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(context.Background(), Options{Source: src, SourceName: "twin", Hostname: "gpu-node-0"})
	if err != nil {
		b.Fatal(err)
	}
	a.Collect(context.Background())
	return a
}

// BenchmarkExposition is what one scrape of /metrics costs the agent
// beyond the HTTP server: the page for 8 GPUs, built and written in the
// text format.
func BenchmarkExposition(b *testing.B) {
	a := benchAgent(b)
	b.ReportAllocs()
	var n int
	for b.Loop() {
		n = len(render(b, a))
	}
	b.ReportMetric(float64(n), "page-bytes")
}

// BenchmarkCollect is one sampling pass over 8 GPUs of the twin: the
// agent's own bookkeeping plus the twin source (NVML's cost is the
// driver's, measured on the GPU machine by scripts/agent-cost).
func BenchmarkCollect(b *testing.B) {
	a := benchAgent(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		a.Collect(ctx)
	}
}

// BenchmarkScrape is one GET /metrics through the agent's handler, page
// for 8 GPUs of the twin, without the network.
func BenchmarkScrape(b *testing.B) {
	a := benchAgent(b)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	w := &discard{}
	b.ReportAllocs()
	for b.Loop() {
		a.ServeHTTP(w, req)
	}
	b.ReportMetric(float64(w.n)/float64(b.N), "page-bytes")
}

// BenchmarkSecond is BenchmarkSecondNVML over 8 GPUs of the twin: one
// sampling pass and one scrape. live-heap-MiB is the heap reachable after
// the loop and a collection, the twin's included (an upper bound on the
// agent's own).
func BenchmarkSecond(b *testing.B) {
	benchSecond(b, benchAgent(b), true)
}

// benchSecond times one Collect and one GET /metrics per op and reports
// core-share, the share of one core that costs at one op a second.
func benchSecond(b *testing.B, a *Agent, heap bool) {
	ctx := context.Background()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	a.Collect(ctx)
	b.ReportAllocs()
	for b.Loop() {
		a.Collect(ctx)
		a.ServeHTTP(&discard{}, req)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e9, "core-share")
	if heap {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "live-heap-MiB")
	}
}

// discard is a ResponseWriter that counts and drops the body, so a
// benchmark measures the handler, not a recorder's buffer.
type discard struct {
	h http.Header
	n int
}

func (d *discard) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}

func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

func (d *discard) WriteHeader(int) {}
