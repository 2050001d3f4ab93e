package twin

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// BenchmarkTwinHour is one simulated hour of the demo cluster with 30 s
// scrapes: the unit of work the demo repeats for every experiment.
func BenchmarkTwinHour(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		tw, err := New(Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := tw.Sleep(context.Background(), time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWarmupMemory measures the heap a default twin holds after 1 h and
// after 24 h of warm-up (memory follows the evaluation window, not the
// warm-up; 24 h must hold at most 1.2× what 1 h holds). Run it with
//
//	go test ./internal/twin -run '^$' -bench WarmupMemory -benchtime 1x
//
// heap-*-B is HeapInuse and live-*-B HeapAlloc after a GC, each less what
// the heap held before the twin was built.
func BenchmarkWarmupMemory(b *testing.B) {
	measure := func(warmup time.Duration) (inuse, live float64) {
		b.Helper()
		i0, l0 := heapAfterGC()
		tw, err := New(Options{Spec: Default()})
		if err != nil {
			b.Fatal(err)
		}
		if err := tw.Sleep(context.Background(), warmup); err != nil {
			b.Fatal(err)
		}
		i1, l1 := heapAfterGC()
		runtime.KeepAlive(tw)
		return i1 - i0, l1 - l0
	}
	var in1, live1, in24, live24 float64
	for b.Loop() {
		in1, live1 = measure(time.Hour)
		in24, live24 = measure(24 * time.Hour)
	}
	b.ReportMetric(in1, "heap-1h-B")
	b.ReportMetric(in24, "heap-24h-B")
	b.ReportMetric(in24/in1, "heap-24h/1h")
	b.ReportMetric(live1, "live-1h-B")
	b.ReportMetric(live24, "live-24h-B")
	b.ReportMetric(live24/live1, "live-24h/1h")
}

// heapAfterGC returns HeapInuse and HeapAlloc after a full collection.
func heapAfterGC() (inuse, alloc float64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse), float64(m.HeapAlloc)
}
