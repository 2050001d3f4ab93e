package promeval

import (
	"context"
	"slices"
	"sort"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/model/series"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// Source is what the evaluator reads series from. *twin.Twin implements it.
//
// Series must return the series in a stable order and must not reuse a
// *series.Series for a different metric or label set: the storage caches each
// series' labels by pointer. Samples of a series may grow between calls
// (the twin appends as it scrapes); they are never rewritten.
type Source interface {
	Series() []*series.Series
}

// Storage is a storage.Queryable over a Source's series plus series added
// with Add (the results of recording rules). Each series gets its metric
// name as the __name__ label; staleness markers are passed through, so the
// PromQL engine treats a vanished series exactly as Prometheus does.
//
// A Querier reads each series' sample slice once, when Select returns it,
// so samples appended afterwards are not seen by that query. Storage is not
// safe for concurrent use with Add or with its Source being written.
type Storage struct {
	src Source
	// base indexes the Source's series; rebuilt only when the set of
	// series changes, which for the twin is never after it is built.
	base     []*series.Series
	baseIdx  map[string][]memSeries
	names    []string // sorted metric names of base and extra
	extraIdx map[string][]memSeries
	lcache   map[*series.Series]labels.Labels
	// pinned skips re-reading the Source's list of series while an
	// evaluation runs: the Source does not change then, and copying the
	// twin's list for every query of every rule was a tenth of what a
	// coverage run allocated.
	pinned bool
}

// memSeries is one series as the storage serves it: its labels with
// __name__, where its samples come from, and which rule recorded it.
type memSeries struct {
	s    *series.Series
	lset labels.Labels
	// owner is the recording rule that writes the series (its index in the
	// evaluation), or -1 for source series and series added with Add.
	owner int
}

// NewStorage returns a Storage over src (which may be nil) and extra.
func NewStorage(src Source, extra ...*series.Series) *Storage {
	st := &Storage{src: src, extraIdx: map[string][]memSeries{}, lcache: map[*series.Series]labels.Labels{}}
	for _, s := range extra {
		st.add(s, -1)
	}
	return st
}

// Add makes more series visible to later queries. The series must not
// repeat the metric and labels of a series already present.
func (st *Storage) Add(list ...*series.Series) {
	for _, s := range list {
		st.add(s, -1)
	}
}

func (st *Storage) add(s *series.Series, owner int) {
	ms := memSeries{s: s, lset: st.labelsOf(s), owner: owner}
	list := st.extraIdx[s.Metric]
	i, _ := slices.BinarySearchFunc(list, ms.lset, func(e memSeries, l labels.Labels) int { return labels.Compare(e.lset, l) })
	st.extraIdx[s.Metric] = slices.Insert(list, i, ms)
	st.names = nil
}

// labelsOf converts a series' labels to Prometheus labels with __name__,
// once per series.
func (st *Storage) labelsOf(s *series.Series) labels.Labels {
	if l, ok := st.lcache[s]; ok {
		return l
	}
	b := labels.NewScratchBuilder(len(s.Labels) + 1)
	b.Add(model.MetricNameLabel, s.Metric)
	for _, l := range s.Labels {
		b.Add(l.Name, l.Value)
	}
	// Upper-case label names (Hostname, UUID) sort before __name__.
	b.Sort()
	l := b.Labels()
	st.lcache[s] = l
	return l
}

// refresh re-reads the Source's list of series and reindexes it when it
// changed.
func (st *Storage) refresh() {
	if st.src == nil || st.pinned && st.baseIdx != nil {
		if st.names == nil {
			st.rebuildNames()
		}
		return
	}
	cur := st.src.Series()
	if st.baseIdx != nil && len(cur) == len(st.base) && (len(cur) == 0 || cur[0] == st.base[0] && cur[len(cur)-1] == st.base[len(cur)-1]) {
		if st.names == nil {
			st.rebuildNames()
		}
		return
	}
	st.base = cur
	st.baseIdx = make(map[string][]memSeries)
	for _, s := range cur {
		st.baseIdx[s.Metric] = append(st.baseIdx[s.Metric], memSeries{s: s, lset: st.labelsOf(s), owner: -1})
	}
	for _, list := range st.baseIdx {
		slices.SortFunc(list, func(a, b memSeries) int { return labels.Compare(a.lset, b.lset) })
	}
	st.rebuildNames()
}

func (st *Storage) rebuildNames() {
	st.names = st.names[:0]
	for n := range st.baseIdx {
		st.names = append(st.names, n)
	}
	for n := range st.extraIdx {
		if _, dup := st.baseIdx[n]; !dup {
			st.names = append(st.names, n)
		}
	}
	sort.Strings(st.names)
}

// Querier returns a querier over every series, all visible as stored.
func (st *Storage) Querier(mint, maxt int64) (storage.Querier, error) {
	st.refresh()
	return &querier{st: st, mint: mint, maxt: maxt}, nil
}

// view returns a Queryable through which a rule sees recorded series with
// shift applied to their timestamps (see evaluator.shift).
func (st *Storage) view(shift func(owner int) int64) storage.Queryable {
	return storage.QueryableFunc(func(mint, maxt int64) (storage.Querier, error) {
		st.refresh()
		return &querier{st: st, mint: mint, maxt: maxt, shift: shift}, nil
	})
}

type querier struct {
	st         *Storage
	mint, maxt int64
	// shift, when set, moves the samples of recorded series later by the
	// returned number of milliseconds.
	shift func(owner int) int64
}

// candidates returns the series whose metric name the matchers allow.
func (q *querier) candidates(ms []*labels.Matcher, visit func(memSeries)) {
	var nameM []*labels.Matcher
	for _, m := range ms {
		if m.Name == model.MetricNameLabel {
			nameM = append(nameM, m)
		}
	}
	byName := func(n string) {
		for _, s := range q.st.baseIdx[n] {
			visit(s)
		}
		for _, s := range q.st.extraIdx[n] {
			visit(s)
		}
	}
	if len(nameM) == 1 && nameM[0].Type == labels.MatchEqual {
		byName(nameM[0].Value)
		return
	}
	for _, n := range q.st.names {
		if matchAll(nameM, n) {
			byName(n)
		}
	}
}

func matchAll(ms []*labels.Matcher, v string) bool {
	for _, m := range ms {
		if !m.Matches(v) {
			return false
		}
	}
	return true
}

func matchesLabels(ms []*labels.Matcher, l labels.Labels) bool {
	for _, m := range ms {
		if m.Name != model.MetricNameLabel && !m.Matches(l.Get(m.Name)) {
			return false
		}
	}
	return true
}

// Select returns the series matching every matcher that have samples in
// the hinted time range (the querier's range without hints), with their
// samples trimmed to it.
func (q *querier) Select(_ context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	mint, maxt := q.mint, q.maxt
	if hints != nil {
		mint, maxt = hints.Start, hints.End
	}
	var out []storage.Series
	q.candidates(ms, func(s memSeries) {
		if !matchesLabels(ms, s.lset) {
			return
		}
		var shift int64
		if s.owner >= 0 && q.shift != nil {
			shift = q.shift(s.owner)
		}
		// Read the slice header once: the source may append later.
		smp := s.s.Samples
		lo := sort.Search(len(smp), func(i int) bool { return smp[i].T+shift >= mint })
		hi := lo + sort.Search(len(smp)-lo, func(i int) bool { return smp[lo+i].T+shift > maxt })
		if lo == hi {
			return
		}
		smp = smp[lo:hi]
		if shift != 0 {
			// Only recorded series seen from another group are shifted;
			// they are few, so a shifted copy is cheap.
			moved := make([]series.Sample, len(smp))
			for i, x := range smp {
				moved[i] = series.Sample{T: x.T + shift, V: x.V}
			}
			smp = moved
		}
		out = append(out, &storedSeries{lset: s.lset, samples: smp})
	})
	// Each name's list is sorted; only a selector spanning names (a regex
	// on __name__, or base and recorded series sharing a name) needs more.
	if cmp := func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) }; sortSeries && !slices.IsSortedFunc(out, cmp) {
		slices.SortStableFunc(out, cmp)
	}
	return &seriesSet{list: out, i: -1}
}

// LabelValues returns the sorted values of name among series matching ms.
func (q *querier) LabelValues(_ context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]struct{}{}
	q.candidates(ms, func(s memSeries) {
		if v := s.lset.Get(name); v != "" && matchesLabels(ms, s.lset) {
			seen[v] = struct{}{}
		}
	})
	return limit(sortedKeys(seen), hints), nil, nil
}

// LabelNames returns the sorted label names of series matching ms.
func (q *querier) LabelNames(_ context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]struct{}{}
	q.candidates(ms, func(s memSeries) {
		if matchesLabels(ms, s.lset) {
			s.lset.Range(func(l labels.Label) { seen[l.Name] = struct{}{} })
		}
	})
	return limit(sortedKeys(seen), hints), nil, nil
}

// Close releases nothing: the querier holds no resources.
func (q *querier) Close() error { return nil }

func sortedKeys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, strings.Compare)
	return out
}

func limit(vs []string, hints *storage.LabelHints) []string {
	if hints != nil && hints.Limit > 0 && len(vs) > hints.Limit {
		return vs[:hints.Limit]
	}
	return vs
}

type seriesSet struct {
	list []storage.Series
	i    int
}

func (s *seriesSet) Next() bool                        { s.i++; return s.i < len(s.list) }
func (s *seriesSet) At() storage.Series                { return s.list[s.i] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

type storedSeries struct {
	lset    labels.Labels
	samples []series.Sample
}

func (s *storedSeries) Labels() labels.Labels { return s.lset }

// Iterator returns an iterator over the series' samples. It reuses
// Prometheus' list iterator (binary-search Seek) over the samples in place:
// a sample is handed out as a pointer into the slice, so iterating
// allocates nothing per sample.
func (s *storedSeries) Iterator(reuse chunkenc.Iterator) chunkenc.Iterator {
	if it, ok := reuse.(interface{ Reset(storage.Samples) }); ok {
		it.Reset(sampleList(s.samples))
		return reuse
	}
	return storage.NewListSeriesIterator(sampleList(s.samples))
}

// sampleList adapts twin samples to storage.Samples.
type sampleList []series.Sample

func (l sampleList) Get(i int) chunks.Sample { return sampleRef{&l[i]} }
func (l sampleList) Len() int                { return len(l) }

// sampleRef is a float sample seen through chunks.Sample. It holds one
// pointer, so storing it in an interface does not allocate.
type sampleRef struct{ p *series.Sample }

func (s sampleRef) T() int64                      { return s.p.T }
func (s sampleRef) ST() int64                     { return 0 }
func (s sampleRef) F() float64                    { return s.p.V }
func (s sampleRef) H() *histogram.Histogram       { return nil }
func (s sampleRef) FH() *histogram.FloatHistogram { return nil }
func (s sampleRef) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s sampleRef) Copy() chunks.Sample           { c := *s.p; return sampleRef{&c} }
