//go:build cgo

package exporter

import (
	"context"
	"testing"
)

// BenchmarkSecondNVML is one second of the agent's life at the default
// interval with a scraper polling every second: one sampling pass over the
// eight GPUs of go-nvml's DGX H200 mock, then one GET /metrics through the
// handler. Its core-share (ns/op over 1e9) is the share of one core the
// agent needs at 1 s sampling, less the driver's own time inside NVML,
// which the mock does not spend (scripts/agent-cost measures that on a
// GPU machine). No heap figure: the mock logs every call it answers, so
// its heap grows with b.N; BenchmarkSecond reports the agent's.
func BenchmarkSecondNVML(b *testing.B) {
	_, _, src := mockH200(b)
	a, err := New(context.Background(), Options{Source: src, SourceName: "nvml", Hostname: "h200-node"})
	if err != nil {
		b.Fatal(err)
	}
	benchSecond(b, a, false)
}
