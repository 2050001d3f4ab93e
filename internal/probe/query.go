package probe

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/series"
)

// Source is the part of the twin probes read. *twin.Twin implements it.
// Callers must not modify what Select and Logs return.
type Source interface {
	Now() time.Time
	Select(metric string) []*series.Series
	Logs() []series.LogLine
}

// LookbackDelta is how far back an instant selector looks for a sample, as
// in Prometheus (--query.lookback-delta): a series that stopped being
// scraped stays visible this long.
const LookbackDelta = 5 * time.Minute

// Point is one element of an instant vector.
type Point struct {
	Labels series.Labels
	V      float64
	// key caches Labels.String() when the point came straight from a
	// series; empty means compute it.
	key string
}

// Vector is an instant vector: at most one point per label set.
type Vector []Point

// Expr evaluates to an instant vector at a time. It is the small subset of
// PromQL the built-in detectors need; rule files go through the real PromQL
// engine instead.
type Expr func(t time.Time) Vector

// Selector returns the instant vector of a metric restricted to series whose
// labels equal every matcher, taking each series' newest sample within
// LookbackDelta.
func Selector(src Source, metric string, matchers map[string]string) Expr {
	return func(t time.Time) Vector {
		var out Vector
		for _, s := range src.Select(metric) {
			if !matches(s.Labels, matchers) {
				continue
			}
			if smp, ok := at(s.Samples, t, LookbackDelta); ok {
				out = append(out, Point{s.Labels, smp.V, s.LabelKey()})
			}
		}
		return out
	}
}

// Increase is PromQL's increase(metric[window]) without extrapolation: the
// growth of a counter over the window, counting resets as restarts from 0.
func Increase(src Source, metric string, matchers map[string]string, window time.Duration) Expr {
	return overTime(src, metric, matchers, window, 0, func(w []series.Sample) (float64, bool) {
		if len(w) < 2 {
			return 0, false
		}
		inc := 0.0
		for i := 1; i < len(w); i++ {
			d := w[i].V - w[i-1].V
			if d < 0 {
				d = w[i].V
			}
			inc += d
		}
		return inc, true
	})
}

// Baseline is the median of each series over [t-from, t-to]: what "normal"
// looked like before now, skipping the recent past so a fault in progress
// does not drag its own baseline down.
func Baseline(src Source, metric string, matchers map[string]string, from, to time.Duration) Expr {
	return overTime(src, metric, matchers, from, to, func(w []series.Sample) (float64, bool) {
		vs := make([]float64, len(w))
		for i, x := range w {
			vs[i] = x.V
		}
		return median(vs), len(w) > 0
	})
}

// Compare keeps the points of e for which `value OP v` holds (PromQL's
// filtering comparison).
func Compare(e Expr, op string, v float64) Expr {
	return func(t time.Time) Vector {
		var out Vector
		for _, p := range e(t) {
			if compare(p.V, op, v) {
				out = append(out, p)
			}
		}
		return out
	}
}

// CompareRatio keeps points of a whose value OP ratio × b's value on the same
// labels (a < 0.5 * b).
func CompareRatio(a Expr, op string, ratio float64, b Expr) Expr {
	return func(t time.Time) Vector {
		base := index(b(t), nil)
		var out Vector
		for _, p := range a(t) {
			if q, ok := base[p.keyOn(nil)]; ok && compare(p.V, op, ratio*q.V) {
				out = append(out, p)
			}
		}
		return out
	}
}

// And keeps points of a that have a point in b with the same values of the
// on labels (PromQL `a and on(on...) b`).
func And(a, b Expr, on ...string) Expr {
	return func(t time.Time) Vector {
		keep := index(b(t), on)
		var out Vector
		for _, p := range a(t) {
			if _, ok := keep[p.keyOn(on)]; ok {
				out = append(out, p)
			}
		}
		return out
	}
}

// Divide returns a / b for points with equal labels (PromQL `a / b`).
func Divide(a, b Expr) Expr {
	return func(t time.Time) Vector {
		den := index(b(t), nil)
		var out Vector
		for _, p := range a(t) {
			if q, ok := den[p.keyOn(nil)]; ok && q.V != 0 {
				out = append(out, Point{p.Labels, p.V / q.V, p.key})
			}
		}
		return out
	}
}

// Sum returns a + b for points with equal labels.
func Sum(a, b Expr) Expr {
	return func(t time.Time) Vector {
		other := index(b(t), nil)
		var out Vector
		for _, p := range a(t) {
			if q, ok := other[p.keyOn(nil)]; ok {
				out = append(out, Point{p.Labels, p.V + q.V, p.key})
			}
		}
		return out
	}
}

// CountBy counts the points of e per value of the by labels (PromQL
// `count by (by...) (e)`).
func CountBy(e Expr, by ...string) Expr {
	return aggregate(e, by, func(vs []float64) float64 { return float64(len(vs)) })
}

// MaxOverMedianBy returns, per group, the point with the largest value, with
// its value divided by the group's median: how far the worst member is from
// the typical one (a straggler rank).
func MaxOverMedianBy(e Expr, by ...string) Expr {
	return func(t time.Time) Vector {
		groups := map[string][]Point{}
		for _, p := range e(t) {
			k := groupKey(p.Labels, by)
			groups[k] = append(groups[k], p)
		}
		var out Vector
		for _, ps := range groups {
			vs := make([]float64, len(ps))
			for i, p := range ps {
				vs[i] = p.V
			}
			m := median(vs)
			if m <= 0 {
				continue
			}
			worst := slices.MaxFunc(ps, func(a, b Point) int { return cmp.Compare(a.V, b.V) })
			out = append(out, Point{worst.Labels, worst.V / m, worst.key})
		}
		sortVector(out)
		return out
	}
}

// MaxSeenCountBy counts, per group, the series of metric that were ever
// scraped up to t: the number a fleet expects to see (eight GPUs a node).
func MaxSeenCountBy(src Source, metric string, by ...string) Expr {
	return func(t time.Time) Vector {
		counts := map[string]*Point{}
		ms := t.UnixMilli()
		for _, s := range src.Select(metric) {
			if len(s.Samples) == 0 || s.Samples[0].T > ms {
				continue
			}
			k := groupKey(s.Labels, by)
			p := counts[k]
			if p == nil {
				p = &Point{Labels: keep(s.Labels, by)}
				counts[k] = p
			}
			p.V++
		}
		out := make(Vector, 0, len(counts))
		for _, p := range counts {
			out = append(out, *p)
		}
		sortVector(out)
		return out
	}
}

// For keeps the points of e that were present at every evaluation step over
// the last d, as an alert rule's `for:` clause does. Evaluation times are
// aligned to multiples of step, as a rule group's are.
func For(e Expr, d, step time.Duration) Expr {
	if d <= 0 {
		return e
	}
	return func(t time.Time) Vector {
		last := t.Truncate(step)
		cur := index(e(last), nil)
		// Walk back to the newest step at least d before last: Prometheus
		// fires at the first evaluation d or more after the alert became
		// active, so a d that is not a multiple of step rounds up.
		for at := last.Add(-step); len(cur) > 0; at = at.Add(-step) {
			prev := index(e(at), nil)
			for k := range cur {
				if _, ok := prev[k]; !ok {
					delete(cur, k)
				}
			}
			if !at.After(last.Add(-d)) {
				break
			}
		}
		out := make(Vector, 0, len(cur))
		for _, p := range cur {
			out = append(out, p)
		}
		sortVector(out)
		return out
	}
}

func aggregate(e Expr, by []string, f func([]float64) float64) Expr {
	return func(t time.Time) Vector {
		groups := map[string][]float64{}
		labels := map[string]series.Labels{}
		for _, p := range e(t) {
			k := groupKey(p.Labels, by)
			groups[k] = append(groups[k], p.V)
			if _, ok := labels[k]; !ok {
				labels[k] = keep(p.Labels, by)
			}
		}
		out := make(Vector, 0, len(groups))
		for k, vs := range groups {
			out = append(out, Point{Labels: labels[k], V: f(vs)})
		}
		sortVector(out)
		return out
	}
}

func compare(a float64, op string, b float64) bool {
	switch op {
	case ">":
		return a > b
	case "<":
		return a < b
	case ">=":
		return a >= b
	case "<=":
		return a <= b
	case "==":
		return a == b
	case "!=":
		return a != b
	}
	return false
}

func matches(ls series.Labels, m map[string]string) bool {
	for k, v := range m {
		if ls.Get(k) != v {
			return false
		}
	}
	return true
}

// at returns the newest sample at or before t and after t-lookback; a
// staleness marker there means the series is gone.
func at(s []series.Sample, t time.Time, lookback time.Duration) (series.Sample, bool) {
	ms := t.UnixMilli()
	i := sort.Search(len(s), func(i int) bool { return s[i].T > ms })
	if i == 0 || s[i-1].T <= ms-lookback.Milliseconds() || series.IsStale(s[i-1].V) {
		return series.Sample{}, false
	}
	return s[i-1], true
}

// window_ returns the samples with from < T <= to, without staleness
// markers (range functions ignore them, as PromQL's do).
func window_(s []series.Sample, from, to time.Time) []series.Sample {
	lo := sort.Search(len(s), func(i int) bool { return s[i].T > from.UnixMilli() })
	hi := sort.Search(len(s), func(i int) bool { return s[i].T > to.UnixMilli() })
	w := s[lo:hi]
	for i, x := range w {
		if series.IsStale(x.V) {
			// Rare: copy only when a marker is present.
			out := slices.Clone(w[:i])
			for _, y := range w[i:] {
				if !series.IsStale(y.V) {
					out = append(out, y)
				}
			}
			return out
		}
	}
	return w
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	c := slices.Clone(vs)
	slices.Sort(c)
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

// key identifies a label set, or only the on labels when on is non-empty.
func key(ls series.Labels, on []string) string {
	if len(on) == 0 {
		return ls.String()
	}
	return keep(ls, on).String()
}

// groupKey identifies an aggregation group: unlike key, no by labels means
// one group for everything, as PromQL's `count by () (e)` is.
func groupKey(ls series.Labels, by []string) string {
	return keep(ls, by).String()
}

func keep(ls series.Labels, names []string) series.Labels {
	var out series.Labels
	for _, l := range ls {
		if slices.Contains(names, l.Name) {
			out = append(out, l)
		}
	}
	return out
}

func index(v Vector, on []string) map[string]Point {
	m := make(map[string]Point, len(v))
	for _, p := range v {
		m[p.keyOn(on)] = p
	}
	return m
}

// keyOn is key(p.Labels, on), from the cache when it can be.
func (p Point) keyOn(on []string) string {
	if len(on) == 0 && p.key != "" {
		return p.key
	}
	return key(p.Labels, on)
}

func sortVector(v Vector) {
	slices.SortFunc(v, func(a, b Point) int { return cmp.Compare(a.keyOn(nil), b.keyOn(nil)) })
}

// Or is the union of a and b; where both have a label set, a's point wins.
func Or(a, b Expr) Expr {
	return func(t time.Time) Vector {
		out := a(t)
		seen := index(out, nil)
		for _, p := range b(t) {
			if _, ok := seen[p.keyOn(nil)]; !ok {
				out = append(out, p)
			}
		}
		sortVector(out)
		return out
	}
}

// Age turns timestamps in seconds into their age at evaluation time
// (PromQL `time() - e`).
func Age(e Expr) Expr {
	return func(t time.Time) Vector {
		v := e(t)
		out := make(Vector, len(v))
		now := float64(t.UnixMilli()) / 1000
		for i, p := range v {
			out[i] = Point{p.Labels, now - p.V, p.key}
		}
		return out
	}
}

// AvgOverTime is PromQL's avg_over_time(metric[window]): the mean of each
// series' samples in (t-window, t].
func AvgOverTime(src Source, metric string, matchers map[string]string, window time.Duration) Expr {
	return overTime(src, metric, matchers, window, 0, func(w []series.Sample) (float64, bool) {
		sum := 0.0
		for _, x := range w {
			sum += x.V
		}
		return sum / float64(len(w)), len(w) > 0
	})
}

// overTime applies a range function to each matching series' samples in
// (t-from, t-to]; reduce reports false to leave the series out.
func overTime(src Source, metric string, matchers map[string]string, from, to time.Duration, reduce func([]series.Sample) (float64, bool)) Expr {
	return func(t time.Time) Vector {
		var out Vector
		for _, s := range src.Select(metric) {
			if !matches(s.Labels, matchers) {
				continue
			}
			if v, ok := reduce(window_(s.Samples, t.Add(-from), t.Add(-to))); ok {
				out = append(out, Point{s.Labels, v, s.LabelKey()})
			}
		}
		return out
	}
}
