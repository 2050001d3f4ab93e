package probe_test

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// fakeSource is a hand-built Source: the real path through the twin is
// tested in the engine and coverage packages; here the inputs must be exact.
type fakeSource struct {
	now    time.Time
	series []*series.Series
	logs   []series.LogLine
}

func (f *fakeSource) Now() time.Time { return f.now }

func (f *fakeSource) Select(metric string) []*series.Series {
	var out []*series.Series
	for _, s := range f.series {
		if s.Metric == metric {
			out = append(out, s)
		}
	}
	return out
}

func (f *fakeSource) Logs() []series.LogLine { return f.logs }

// t0 is aligned to every evaluation step the tests use (a whole day since
// the zero time, which is what time.Truncate aligns to).
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// scrape is the scrape interval of hand-built series.
const scrape = 15 * time.Second

// lbl builds labels from name, value pairs, sorted by name as the twin keeps
// them.
func lbl(kv ...string) series.Labels {
	var ls series.Labels
	for i := 0; i+1 < len(kv); i += 2 {
		ls = append(ls, series.Label{Name: kv[i], Value: kv[i+1]})
	}
	slices.SortFunc(ls, func(a, b series.Label) int { return strings.Compare(a.Name, b.Name) })
	return ls
}

func smp(t time.Time, v float64) series.Sample { return series.Sample{T: t.UnixMilli(), V: v} }

func ser(metric string, ls series.Labels, samples ...series.Sample) *series.Series {
	return &series.Series{Metric: metric, Labels: ls, Samples: samples}
}

// history builds a series scraped every 15s over the 40 minutes before now
// (inclusive). v gets how long before now each sample is; a NaN means no
// sample then (the exporter lost the series).
func history(metric string, ls series.Labels, now time.Time, v func(ago time.Duration) float64) *series.Series {
	s := ser(metric, ls)
	for ago := 40 * time.Minute; ago >= 0; ago -= scrape {
		x := v(ago)
		if math.IsNaN(x) {
			continue
		}
		s.Samples = append(s.Samples, smp(now.Add(-ago), x))
	}
	return s
}

// constant is a value that never changes.
func constant(v float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return v }
}

// recent is a value that changed from before to during d ago and stayed.
func recent(d time.Duration, during, before float64) func(time.Duration) float64 {
	return func(ago time.Duration) float64 {
		if ago <= d {
			return during
		}
		return before
	}
}

// goneFor is a series that stopped being scraped d ago.
func goneFor(d time.Duration, v float64) func(time.Duration) float64 {
	return func(ago time.Duration) float64 {
		if ago < d {
			return math.NaN()
		}
		return v
	}
}

// counter grows by per each scrape.
func counter(per float64) func(time.Duration) float64 {
	return func(ago time.Duration) float64 { return float64((40*time.Minute-ago)/scrape) * per }
}
