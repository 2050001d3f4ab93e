package series

import (
	"math"
	"strings"
	"time"
)

// staleNaNBits is Prometheus' staleness marker (value.StaleNaNBits): the
// sample a scraper writes when a series it scraped before is gone, so
// queries stop seeing the series at once instead of after the 5m lookback.
const staleNaNBits = 0x7ff0000000000002

// StaleNaN is the staleness marker value.
var StaleNaN = math.Float64frombits(staleNaNBits)

// IsStale reports whether v is a staleness marker.
func IsStale(v float64) bool { return math.Float64bits(v) == staleNaNBits }

// Label is one name=value pair of a series.
type Label struct {
	Name, Value string
}

// Labels are sorted by name; Get returns "" for a missing label.
type Labels []Label

// Get returns the value of the named label, or "".
func (ls Labels) Get(name string) string {
	for _, l := range ls {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// String renders the labels in Prometheus text form: {a="1",b="2"}.
func (ls Labels) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range ls {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.Name)
		b.WriteString(`="`)
		b.WriteString(l.Value)
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// Sample is one scraped value. T is milliseconds since the Unix epoch, as in
// Prometheus, so the PromQL engine reads series directly.
type Sample struct {
	T int64
	V float64
}

// Time returns the sample's time.
func (s Sample) Time() time.Time { return time.UnixMilli(s.T).UTC() }

// Series is one time series as a scraper would have stored it: the metric
// name, its labels (without __name__) and every sample so far, in time
// order. When its source disappears (a GPU off the bus, a workload that is
// down) the series gets one StaleNaN sample, as Prometheus writes, and no
// more until the source is back.
type Series struct {
	Metric  string
	Labels  Labels
	Samples []Sample

	// labelKey caches Labels.String(): probes key every evaluation by it.
	labelKey string
}

// New returns a series with its label key computed once: probes key every
// evaluation by it.
func New(metric string, ls Labels) *Series {
	return &Series{Metric: metric, Labels: ls, labelKey: ls.String()}
}

// LabelKey returns Labels.String(), computed once for series made by New.
func (s *Series) LabelKey() string {
	if s.labelKey == "" {
		return s.Labels.String()
	}
	return s.labelKey
}

// Append adds a sample at ts (milliseconds since the epoch).
func (s *Series) Append(ts int64, v float64) {
	s.Samples = append(s.Samples, Sample{T: ts, V: v})
}

// MarkStale writes a staleness marker at ts unless the series is already
// stale or has never been scraped, as a scraper does for a series that
// left its page.
func (s *Series) MarkStale(ts int64) {
	if n := len(s.Samples); n > 0 && !IsStale(s.Samples[n-1].V) {
		s.Append(ts, StaleNaN)
	}
}

// LogLine is one kernel log record of a node, as dmesg would show it.
type LogLine struct {
	Time time.Time
	Node string
	// Priority is the syslog level (3 = err, 4 = warning, 6 = info).
	Priority int
	Text     string
}
