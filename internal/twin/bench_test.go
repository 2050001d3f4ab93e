package twin

import (
	"context"
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
