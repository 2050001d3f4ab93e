package twin

import (
	"slices"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// snapshot copies every series' samples, keyed by metric and labels.
func snapshot(tw *Twin) map[string][]series.Sample {
	out := map[string][]series.Sample{}
	for _, s := range tw.Series() {
		out[s.Metric+s.LabelKey()] = slices.Clone(s.Samples)
	}
	return out
}

func TestTrim(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// cut is where to trim, relative to the twin's time.
		cut time.Duration
	}{
		{"window of two minutes", -2 * time.Minute},
		{"cut between two scrapes", -90*time.Second - 500*time.Millisecond},
		{"cut before the start keeps everything", -time.Hour},
		{"cut in the future keeps the newest sample", time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t, Options{Spec: oneNode(), ScrapeInterval: time.Second})
			sleep(t, tw, 5*time.Minute)
			// GPU 3 leaves the bus four minutes before the cut of the
			// first case: its series end in a staleness marker written
			// long before the window.
			apply(t, tw, "xid79", gpuRef(tw, "gpu-node-0", 3), catalog.Effect{Kind: catalog.EffectXID, Code: 79})
			sleep(t, tw, 5*time.Minute)
			before := snapshot(tw)
			cut := tw.Now().Add(tc.cut)
			tw.Trim(cut)
			for _, s := range tw.Series() {
				key := s.Metric + s.LabelKey()
				all := before[key]
				var want []series.Sample
				for _, smp := range all {
					if smp.T >= cut.UnixMilli() {
						want = append(want, smp)
					}
				}
				if len(want) == 0 && len(all) > 0 {
					want = all[len(all)-1:]
				}
				if !slices.EqualFunc(s.Samples, want, sameSample) {
					t.Fatalf("%s: after Trim(%s) %d samples from %v, want %d from %v",
						key, cut.Format(time.TimeOnly), len(s.Samples), firstTime(s.Samples), len(want), firstTime(want))
				}
			}
			stale := gpuSeries(tw, "DCGM_FI_DEV_GPU_TEMP", "gpu-node-0", 3)
			if n := len(stale.Samples); n == 0 || !series.IsStale(stale.Samples[n-1].V) {
				t.Errorf("off-bus GPU's series lost its staleness marker: %v", stale.Samples)
			}
		})
	}
}

// TestTrimKeepsRunning checks that a twin trimmed as it runs scrapes the
// same values as one that keeps everything: trimming only forgets.
func TestTrimKeepsRunning(t *testing.T) {
	t.Parallel()
	opts := Options{Spec: oneNode(), ScrapeInterval: time.Second, Seed: 7}
	trimmed, full := newTwin(t, opts), newTwin(t, opts)
	for range 12 {
		sleep(t, trimmed, 30*time.Second)
		sleep(t, full, 30*time.Second)
		trimmed.Trim(trimmed.Now().Add(-time.Minute))
	}
	cut := full.Now().Add(-time.Minute).UnixMilli()
	for i, s := range trimmed.Series() {
		f := full.Series()[i]
		var want []series.Sample
		for _, smp := range f.Samples {
			if smp.T >= cut {
				want = append(want, smp)
			}
		}
		if !slices.EqualFunc(s.Samples, want, sameSample) {
			t.Fatalf("%s%s: trimmed twin has %d samples, the untrimmed one %d in the same window",
				s.Metric, s.LabelKey(), len(s.Samples), len(want))
		}
		if c := cap(s.Samples); c > 4*len(s.Samples) {
			t.Errorf("%s: capacity %d for %d samples: trimming does not bound memory", s.Metric, c, len(s.Samples))
		}
	}
}

// sameSample compares samples bit for bit, so staleness markers (NaN)
// compare equal.
func sameSample(a, b series.Sample) bool {
	return a.T == b.T && (a.V == b.V || series.IsStale(a.V) && series.IsStale(b.V))
}

func firstTime(s []series.Sample) string {
	if len(s) == 0 {
		return "nothing"
	}
	return s[0].Time().Format(time.TimeOnly)
}
