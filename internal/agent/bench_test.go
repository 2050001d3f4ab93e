package agent

import (
	"context"
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
// beyond the HTTP server: the page for 8 GPUs.
func BenchmarkExposition(b *testing.B) {
	a := benchAgent(b)
	b.ReportAllocs()
	var n int
	for b.Loop() {
		n = len(a.exposition())
	}
	b.ReportMetric(float64(n), "page-bytes")
}

// BenchmarkCollect is one sampling pass over 8 GPUs of the twin: the
// agent's own bookkeeping plus the twin source (NVML's cost is the
// driver's, measured on the GPU machine by scripts/agent-cost.sh).
func BenchmarkCollect(b *testing.B) {
	a := benchAgent(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		a.Collect(ctx)
	}
}
