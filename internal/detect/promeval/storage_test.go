package promeval_test

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

func storageFixture(t *testing.T) *promeval.Storage {
	t.Helper()
	src := fixedSource{
		mkSeries(t, `DCGM_FI_DEV_GPU_TEMP{Hostname="n1",gpu="1"}`, "60 61 62 stale"),
		mkSeries(t, `DCGM_FI_DEV_GPU_TEMP{Hostname="n1",gpu="0"}`, "50 51 52 53"),
		mkSeries(t, `DCGM_FI_DEV_GPU_TEMP{Hostname="n2",gpu="0"}`, "_ _ _ _ 70"),
		mkSeries(t, `DCGM_FI_DEV_POWER_USAGE{Hostname="n1",gpu="0"}`, "300 301"),
	}
	return promeval.NewStorage(src, mkSeries(t, `node:temp:max{Hostname="n1"}`, "60 61 62 53"))
}

// TestStorageSelect checks matchers, the hinted time range and sorting.
func TestStorageSelect(t *testing.T) {
	t.Parallel()
	ms := func(t0ms int64, step int) int64 { return t0ms + int64(step)*15000 }
	base := t0.UnixMilli()
	cases := []struct {
		name       string
		matchers   []*labels.Matcher
		start, end int64
		want       []string // series labels, then sample count
	}{
		{
			name:     "by name, sorted by labels",
			matchers: []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "DCGM_FI_DEV_GPU_TEMP")},
			start:    base, end: ms(base, 10),
			want: []string{
				`{Hostname="n1", __name__="DCGM_FI_DEV_GPU_TEMP", gpu="0"} 4`,
				`{Hostname="n1", __name__="DCGM_FI_DEV_GPU_TEMP", gpu="1"} 4`,
				`{Hostname="n2", __name__="DCGM_FI_DEV_GPU_TEMP", gpu="0"} 1`,
			},
		},
		{
			name: "label matchers",
			matchers: []*labels.Matcher{
				labels.MustNewMatcher(labels.MatchEqual, "__name__", "DCGM_FI_DEV_GPU_TEMP"),
				labels.MustNewMatcher(labels.MatchNotEqual, "gpu", "1"),
				labels.MustNewMatcher(labels.MatchRegexp, "Hostname", "n.*"),
			},
			start: base, end: ms(base, 10),
			want: []string{
				`{Hostname="n1", __name__="DCGM_FI_DEV_GPU_TEMP", gpu="0"} 4`,
				`{Hostname="n2", __name__="DCGM_FI_DEV_GPU_TEMP", gpu="0"} 1`,
			},
		},
		{
			name: "a missing label matches the empty string",
			matchers: []*labels.Matcher{
				labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"),
				labels.MustNewMatcher(labels.MatchEqual, "gpu", ""),
			},
			start: base, end: ms(base, 10),
			want: []string{`{Hostname="n1", __name__="node:temp:max"} 4`},
		},
		{
			name:     "a regex on the name spans names and added series, sorted",
			matchers: []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "__name__", "DCGM_FI_DEV_POWER_USAGE|node:.*")},
			start:    base, end: ms(base, 10),
			want: []string{
				`{Hostname="n1", __name__="DCGM_FI_DEV_POWER_USAGE", gpu="0"} 2`,
				`{Hostname="n1", __name__="node:temp:max"} 4`,
			},
		},
		{
			// Samples are trimmed to the range; a series with none there
			// is left out.
			name:     "the hinted range trims samples and drops empty series",
			matchers: []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "DCGM_FI_DEV_GPU_TEMP")},
			start:    ms(base, 1), end: ms(base, 2),
			want: []string{
				`{Hostname="n1", __name__="DCGM_FI_DEV_GPU_TEMP", gpu="0"} 2`,
				`{Hostname="n1", __name__="DCGM_FI_DEV_GPU_TEMP", gpu="1"} 2`,
			},
		},
		{
			name:     "an unknown name selects nothing",
			matchers: []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "nope")},
			start:    base, end: ms(base, 10),
		},
	}
	// One storage for all cases, so not parallel: Storage is not safe for
	// concurrent use.
	st := storageFixture(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := st.Querier(math.MinInt64, math.MaxInt64)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			set := q.Select(context.Background(), true, &storage.SelectHints{Start: tc.start, End: tc.end}, tc.matchers...)
			var got []string
			for set.Next() {
				s := set.At()
				n := 0
				it := s.Iterator(nil)
				for it.Next() == chunkenc.ValFloat {
					if ts := it.AtT(); ts < tc.start || ts > tc.end {
						t.Errorf("%s: sample at %d outside [%d, %d]", s.Labels(), ts, tc.start, tc.end)
					}
					n++
				}
				got = append(got, s.Labels().String()+" "+itoa(n))
			}
			if set.Err() != nil {
				t.Fatal(set.Err())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestStorageIterator checks Seek and Next semantics and that staleness
// markers pass through unchanged.
func TestStorageIterator(t *testing.T) {
	t.Parallel()
	st := storageFixture(t)
	q, _ := st.Querier(math.MinInt64, math.MaxInt64)
	set := q.Select(context.Background(), false, nil,
		labels.MustNewMatcher(labels.MatchEqual, "__name__", "DCGM_FI_DEV_GPU_TEMP"),
		labels.MustNewMatcher(labels.MatchEqual, "gpu", "1"))
	if !set.Next() {
		t.Fatal("no series")
	}
	base := t0.UnixMilli()
	it := set.At().Iterator(nil)
	steps := []struct {
		op   string
		arg  int64
		want chunkenc.ValueType
		t    int64
		v    float64
	}{
		{"seek", base + 1, chunkenc.ValFloat, base + 15000, 61},
		{"seek", base, chunkenc.ValFloat, base + 15000, 61}, // never backwards
		{"next", 0, chunkenc.ValFloat, base + 30000, 62},
		{"next", 0, chunkenc.ValFloat, base + 45000, series.StaleNaN},
		{"next", 0, chunkenc.ValNone, 0, 0},
		{"seek", base, chunkenc.ValNone, 0, 0},
	}
	for i, s := range steps {
		var got chunkenc.ValueType
		if s.op == "seek" {
			got = it.Seek(s.arg)
		} else {
			got = it.Next()
		}
		if got != s.want {
			t.Fatalf("step %d %s: %v, want %v", i, s.op, got, s.want)
		}
		if got == chunkenc.ValNone {
			continue
		}
		ts, v := it.At()
		if ts != s.t || math.Float64bits(v) != math.Float64bits(s.v) || it.AtT() != ts {
			t.Errorf("step %d: at %d %v, want %d %v", i, ts, v, s.t, s.v)
		}
	}
	if set.Next() {
		t.Error("more than one series")
	}
}

func TestStorageLabels(t *testing.T) {
	t.Parallel()
	st := storageFixture(t)
	q, _ := st.Querier(math.MinInt64, math.MaxInt64)
	ctx := context.Background()
	cases := []struct {
		name     string
		label    string // "" lists names
		matchers []*labels.Matcher
		want     []string
	}{
		{"every label name", "", nil, []string{"Hostname", "__name__", "gpu"}},
		{"names of one metric", "", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "node:temp:max")}, []string{"Hostname", "__name__"}},
		{"values of a label", "Hostname", nil, []string{"n1", "n2"}},
		{"values under a matcher", "Hostname", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "gpu", "1")}, []string{"n1"}},
		{"metric names", "__name__", nil, []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "node:temp:max"}},
	}
	for _, tc := range cases {
		var got []string
		var err error
		if tc.label == "" {
			got, _, err = q.LabelNames(ctx, nil, tc.matchers...)
		} else {
			got, _, err = q.LabelValues(ctx, tc.label, nil, tc.matchers...)
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// TestStorageSeesAppends checks that each query reads the series as they
// are then: the twin appends between queries.
func TestStorageSeesAppends(t *testing.T) {
	t.Parallel()
	s := mkSeries(t, `up{job="a"}`, "1")
	st := promeval.NewStorage(fixedSource{s})
	count := func() int {
		q, _ := st.Querier(math.MinInt64, math.MaxInt64)
		set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "up"))
		n := 0
		for set.Next() {
			it := set.At().Iterator(nil)
			for it.Next() != chunkenc.ValNone {
				n++
			}
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("%d samples, want 1", n)
	}
	s.Samples = append(s.Samples, series.Sample{T: t0.UnixMilli() + 15000, V: 1})
	if n := count(); n != 2 {
		t.Fatalf("after an append: %d samples, want 2", n)
	}
	st.Add(mkSeries(t, `up{job="b"}`, "1 1 1"))
	if n := count(); n != 5 {
		t.Fatalf("after Add: %d samples, want 5", n)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
