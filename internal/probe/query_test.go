package probe_test

import (
	"slices"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/probe"
	"github.com/gpuchaos/gpuchaos/internal/series"
)

// check evaluates e at t and compares the rendered vector with want.
func check(t *testing.T, e probe.Expr, at time.Time, want []string) {
	t.Helper()
	got := render(e(at))
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Errorf("at %s: got %q, want %q", at.Format(time.TimeOnly), got, want)
	}
}

func TestSelector(t *testing.T) {
	t.Parallel()
	a := lbl("Hostname", "n1", "gpu", "0")
	b := lbl("Hostname", "n1", "gpu", "1")
	src := &fakeSource{series: []*series.Series{
		ser("m", a, smp(t0, 1), smp(t0.Add(15*time.Second), 2), smp(t0.Add(30*time.Second), 3)),
		ser("m", b, smp(t0, 10)),
		ser("other", a, smp(t0, 99)),
	}}
	tests := []struct {
		name     string
		matchers map[string]string
		at       time.Time
		want     []string
	}{
		{"newest sample at or before t", nil, t0.Add(20 * time.Second), []string{`{Hostname="n1",gpu="0"}=2`, `{Hostname="n1",gpu="1"}=10`}},
		{"sample exactly at t counts", nil, t0.Add(30 * time.Second), []string{`{Hostname="n1",gpu="0"}=3`, `{Hostname="n1",gpu="1"}=10`}},
		{"nothing before the first sample", nil, t0.Add(-time.Millisecond), nil},
		{"stale series visible within the lookback", nil, t0.Add(5*time.Minute - time.Millisecond), []string{`{Hostname="n1",gpu="0"}=3`, `{Hostname="n1",gpu="1"}=10`}},
		// Prometheus' lookback window is left-open: a sample exactly
		// LookbackDelta old is gone.
		{"sample exactly one lookback old is stale", nil, t0.Add(probe.LookbackDelta), []string{`{Hostname="n1",gpu="0"}=3`}},
		{"every series stale after the lookback", nil, t0.Add(30*time.Second + probe.LookbackDelta), nil},
		{"matcher selects by label", map[string]string{"gpu": "1"}, t0.Add(time.Minute), []string{`{Hostname="n1",gpu="1"}=10`}},
		{"all matchers must hold", map[string]string{"gpu": "1", "Hostname": "n2"}, t0.Add(time.Minute), nil},
		// As in PromQL, {label=""} matches series without the label.
		{"empty matcher value matches a missing label", map[string]string{"rank": ""}, t0.Add(time.Minute), []string{`{Hostname="n1",gpu="0"}=3`, `{Hostname="n1",gpu="1"}=10`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check(t, probe.Selector(src, "m", tt.matchers), tt.at, tt.want)
		})
	}
}

func TestIncrease(t *testing.T) {
	t.Parallel()
	ls := lbl("gpu", "0")
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name     string
		samples  []series.Sample
		matchers map[string]string
		window   time.Duration
		at       time.Time
		want     []string
	}{
		{
			name:    "growth over the window",
			samples: []series.Sample{smp(at(0), 0), smp(at(15*time.Second), 10), smp(at(30*time.Second), 20), smp(at(45*time.Second), 30)},
			window:  time.Minute, at: at(45 * time.Second),
			want: []string{`{gpu="0"}=30`},
		},
		{
			name:    "window is left-open",
			samples: []series.Sample{smp(at(0), 0), smp(at(15*time.Second), 10), smp(at(30*time.Second), 20), smp(at(45*time.Second), 30)},
			window:  45 * time.Second, at: at(45 * time.Second),
			want: []string{`{gpu="0"}=20`},
		},
		{
			name:    "samples after t are ignored",
			samples: []series.Sample{smp(at(0), 0), smp(at(15*time.Second), 10), smp(at(30*time.Second), 500)},
			window:  time.Minute, at: at(20 * time.Second),
			want: []string{`{gpu="0"}=10`},
		},
		{
			name:    "reset counts as a restart from zero",
			samples: []series.Sample{smp(at(0), 5), smp(at(15*time.Second), 8), smp(at(30*time.Second), 2), smp(at(45*time.Second), 4)},
			window:  time.Minute, at: at(45 * time.Second),
			want: []string{`{gpu="0"}=7`}, // 3, then 2 from zero, then 2
		},
		{
			// PromQL's increase() extrapolates to the window's edges
			// (20 over 30s of a 1m window would read about 40); this
			// one deliberately reports only the growth it saw.
			name:    "no extrapolation to the window edges, unlike PromQL",
			samples: []series.Sample{smp(at(15*time.Second), 10), smp(at(30*time.Second), 20), smp(at(45*time.Second), 30)},
			window:  time.Minute, at: at(45 * time.Second),
			want: []string{`{gpu="0"}=20`},
		},
		{
			name:    "one sample in the window gives no point",
			samples: []series.Sample{smp(at(0), 0), smp(at(15*time.Second), 10)},
			window:  10 * time.Second, at: at(15 * time.Second),
			want: nil,
		},
		{
			name:    "no sample in the window gives no point",
			samples: []series.Sample{smp(at(0), 0), smp(at(15*time.Second), 10)},
			window:  time.Minute, at: at(10 * time.Minute),
			want: nil,
		},
		{
			name:    "flat counter increases by zero",
			samples: []series.Sample{smp(at(0), 7), smp(at(15*time.Second), 7)},
			window:  time.Minute, at: at(15 * time.Second),
			want: []string{`{gpu="0"}=0`},
		},
		{
			name:     "matchers restrict the series",
			samples:  []series.Sample{smp(at(0), 0), smp(at(15*time.Second), 10)},
			matchers: map[string]string{"gpu": "1"},
			window:   time.Minute, at: at(15 * time.Second),
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := &fakeSource{series: []*series.Series{ser("c", ls, tt.samples...)}}
			check(t, probe.Increase(src, "c", tt.matchers, tt.window), tt.at, tt.want)
		})
	}
}

func TestAvgOverTime(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	src := &fakeSource{series: []*series.Series{
		ser("m", lbl("job", "a"), smp(at(0), 100), smp(at(15*time.Second), 1), smp(at(30*time.Second), 2), smp(at(45*time.Second), 6)),
		ser("m", lbl("job", "b"), smp(at(-time.Hour), 5)),
	}}
	tests := []struct {
		name     string
		matchers map[string]string
		window   time.Duration
		at       time.Time
		want     []string
	}{
		// (t-window, t]: the sample at t0 is on the open edge.
		{"mean over a left-open window", nil, 45 * time.Second, at(45 * time.Second), []string{`{job="a"}=3`}},
		{"samples after t are ignored", nil, 30 * time.Second, at(30 * time.Second), []string{`{job="a"}=1.5`}},
		{"one sample is its own mean", nil, 10 * time.Second, at(45 * time.Second), []string{`{job="a"}=6`}},
		{"empty window gives no point", nil, time.Minute, at(10 * time.Minute), nil},
		{"matchers restrict the series", map[string]string{"job": "b"}, 2 * time.Hour, at(0), []string{`{job="b"}=5`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check(t, probe.AvgOverTime(src, "m", tt.matchers, tt.window), tt.at, tt.want)
		})
	}
}

func TestBaseline(t *testing.T) {
	t.Parallel()
	ls := lbl("gpu", "0")
	m := func(d time.Duration) time.Time { return t0.Add(-d) } // d before t0
	tests := []struct {
		name    string
		samples []series.Sample
		want    []string
	}{
		{"median of an odd count", []series.Sample{smp(m(25*time.Minute), 1), smp(m(20*time.Minute), 5), smp(m(15*time.Minute), 3)}, []string{`{gpu="0"}=3`}},
		{"median of an even count is the mean of the middle two", []series.Sample{smp(m(25*time.Minute), 1), smp(m(20*time.Minute), 10), smp(m(15*time.Minute), 2), smp(m(12*time.Minute), 3)}, []string{`{gpu="0"}=2.5`}},
		{"recent past is skipped", []series.Sample{smp(m(20*time.Minute), 100), smp(m(5*time.Minute), 1), smp(m(0), 1)}, []string{`{gpu="0"}=100`}},
		{"older than from is skipped", []series.Sample{smp(m(31*time.Minute), 1), smp(m(20*time.Minute), 100)}, []string{`{gpu="0"}=100`}},
		// The window is (t-from, t-to], like a range selector with offset.
		{"window edges", []series.Sample{smp(m(30*time.Minute), 1), smp(m(10*time.Minute), 100)}, []string{`{gpu="0"}=100`}},
		{"empty window gives no point", []series.Sample{smp(m(5*time.Minute), 1)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := &fakeSource{series: []*series.Series{ser("m", ls, tt.samples...)}}
			check(t, probe.Baseline(src, "m", nil, 30*time.Minute, 10*time.Minute), t0, tt.want)
		})
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	in := fixed(pt(1, "gpu", "1"), pt(2, "gpu", "2"), pt(3, "gpu", "3"))
	tests := []struct {
		op   string
		want []string
	}{
		{">", []string{`{gpu="3"}=3`}},
		{"<", []string{`{gpu="1"}=1`}},
		{">=", []string{`{gpu="2"}=2`, `{gpu="3"}=3`}},
		{"<=", []string{`{gpu="1"}=1`, `{gpu="2"}=2`}},
		{"==", []string{`{gpu="2"}=2`}},
		{"!=", []string{`{gpu="1"}=1`, `{gpu="3"}=3`}},
		// Validation rejects other operators before they get here; an
		// unknown one must keep nothing rather than everything.
		{"=<", nil},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			t.Parallel()
			check(t, probe.Compare(in, tt.op, 2), t0, tt.want)
		})
	}
}

func TestCompareRatio(t *testing.T) {
	t.Parallel()
	a := fixed(pt(40, "gpu", "0"), pt(90, "gpu", "1"), pt(10, "gpu", "2"), pt(50, "gpu", "3"))
	b := fixed(pt(100, "gpu", "0"), pt(100, "gpu", "1"), pt(100, "gpu", "3"), pt(1, "gpu", "9"))
	tests := []struct {
		name  string
		op    string
		ratio float64
		want  []string
	}{
		// gpu 2 has no baseline and never matches; gpu 3 sits exactly on
		// the ratio.
		{"below half", "<", 0.5, []string{`{gpu="0"}=40`}},
		{"at or below half", "<=", 0.5, []string{`{gpu="0"}=40`, `{gpu="3"}=50`}},
		{"above 0.8", ">", 0.8, []string{`{gpu="1"}=90`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check(t, probe.CompareRatio(a, tt.op, tt.ratio, b), t0, tt.want)
		})
	}
}

func TestAnd(t *testing.T) {
	t.Parallel()
	a := fixed(pt(1, "Hostname", "n1", "gpu", "0", "UUID", "U0"), pt(2, "Hostname", "n1", "gpu", "1", "UUID", "U1"), pt(3, "Hostname", "n2", "gpu", "0", "UUID", "U2"))
	b := fixed(pt(95, "Hostname", "n1", "gpu", "0", "other", "x"), pt(95, "Hostname", "n2", "gpu", "0", "other", "y"))
	tests := []struct {
		name string
		on   []string
		want []string
	}{
		{"on labels match across metrics", []string{"Hostname", "gpu"}, []string{`{Hostname="n1",UUID="U0",gpu="0"}=1`, `{Hostname="n2",UUID="U2",gpu="0"}=3`}},
		{"on fewer labels matches more", []string{"gpu"}, []string{`{Hostname="n1",UUID="U0",gpu="0"}=1`, `{Hostname="n2",UUID="U2",gpu="0"}=3`}},
		{"on a node label keeps every GPU of matched nodes", []string{"Hostname"}, []string{`{Hostname="n1",UUID="U0",gpu="0"}=1`, `{Hostname="n1",UUID="U1",gpu="1"}=2`, `{Hostname="n2",UUID="U2",gpu="0"}=3`}},
		{"without on the full label sets must be equal", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check(t, probe.And(a, b, tt.on...), t0, tt.want)
		})
	}
	t.Run("keeps values of the left side", func(t *testing.T) {
		t.Parallel()
		check(t, probe.And(fixed(pt(7, "job", "j")), fixed(pt(1, "job", "j"))), t0, []string{`{job="j"}=7`})
	})
	t.Run("empty right side keeps nothing", func(t *testing.T) {
		t.Parallel()
		check(t, probe.And(a, fixed(), "gpu"), t0, nil)
	})
}

func TestDivideAndSum(t *testing.T) {
	t.Parallel()
	a := fixed(pt(6, "gpu", "0"), pt(3, "gpu", "1"), pt(5, "gpu", "2"))
	b := fixed(pt(3, "gpu", "0"), pt(0, "gpu", "1"), pt(1, "gpu", "9"))
	tests := []struct {
		name string
		e    probe.Expr
		want []string
	}{
		// PromQL would return +Inf for 3/0; dropping the point keeps a
		// missing denominator from firing a "> x" rule.
		{"divide matches labels and drops a zero divisor, unlike PromQL", probe.Divide(a, b), []string{`{gpu="0"}=2`}},
		{"sum matches labels", probe.Sum(a, b), []string{`{gpu="0"}=9`, `{gpu="1"}=3`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check(t, tt.e, t0, tt.want)
		})
	}
}

func TestOr(t *testing.T) {
	t.Parallel()
	a := fixed(pt(1, "gpu", "3"), pt(1, "gpu", "1"))
	b := fixed(pt(2, "gpu", "1"), pt(2, "gpu", "0"))
	got := probe.Or(a, b)(t0)
	want := []string{`{gpu="0"}=2`, `{gpu="1"}=1`, `{gpu="3"}=1`}
	var seq []string
	for _, p := range got {
		seq = append(seq, p.Labels.String())
	}
	if !slices.Equal(render(got), want) {
		t.Errorf("Or = %q, want %q (left wins on equal labels)", render(got), want)
	}
	if !slices.IsSorted(seq) {
		t.Errorf("Or is not sorted by labels: %q", seq)
	}
	check(t, probe.Or(fixed(), b), t0, []string{`{gpu="0"}=2`, `{gpu="1"}=2`})
}

func TestAge(t *testing.T) {
	t.Parallel()
	now := t0.Add(1500 * time.Millisecond)
	stamp := float64(t0.Add(-10*time.Minute).Unix()) + 0.5
	check(t, probe.Age(fixed(pt(stamp, "job", "j"))), now, []string{`{job="j"}=601`})
	check(t, probe.Age(fixed()), now, nil)
}

func TestCountBy(t *testing.T) {
	t.Parallel()
	in := fixed(pt(50, "Hostname", "n1", "gpu", "0"), pt(60, "Hostname", "n1", "gpu", "1"), pt(70, "Hostname", "n2", "gpu", "0"))
	check(t, probe.CountBy(in, "Hostname"), t0, []string{`{Hostname="n1"}=2`, `{Hostname="n2"}=1`})
	check(t, probe.CountBy(in), t0, []string{`{}=3`})
	check(t, probe.CountBy(fixed(), "Hostname"), t0, nil)
}

func TestMaxOverMedianBy(t *testing.T) {
	t.Parallel()
	rank := func(v float64, job, r string) probe.Point { return pt(v, "job", job, "rank", r) }
	tests := []struct {
		name string
		in   []probe.Point
		want []string
	}{
		{
			name: "worst rank over the median, with its own labels",
			in:   []probe.Point{rank(1, "a", "0"), rank(1, "a", "1"), rank(1.5, "a", "2"), rank(1, "a", "3")},
			want: []string{`{job="a",rank="2"}=1.5`},
		},
		{
			name: "groups are separate",
			in:   []probe.Point{rank(2, "a", "0"), rank(2, "a", "1"), rank(2, "a", "2"), rank(1, "b", "0"), rank(3, "b", "1"), rank(1, "b", "2")},
			want: []string{`{job="a",rank="0"}=1`, `{job="b",rank="1"}=3`},
		},
		{
			name: "even group uses the mean of the middle two",
			in:   []probe.Point{rank(1, "a", "0"), rank(3, "a", "1")},
			want: []string{`{job="a",rank="1"}=1.5`},
		},
		{
			name: "group with a median of zero is skipped",
			in:   []probe.Point{rank(0, "a", "0"), rank(0, "a", "1"), rank(5, "a", "2")},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check(t, probe.MaxOverMedianBy(fixed(tt.in...), "job"), t0, tt.want)
		})
	}
	t.Run("no by labels is one group", func(t *testing.T) {
		t.Parallel()
		in := fixed(rank(1, "a", "0"), rank(1, "b", "0"), rank(4, "c", "0"))
		check(t, probe.MaxOverMedianBy(in), t0, []string{`{job="c",rank="0"}=4`})
	})
}

func TestMaxSeenCountBy(t *testing.T) {
	t.Parallel()
	src := &fakeSource{series: []*series.Series{
		ser("m", lbl("Hostname", "n1", "gpu", "0"), smp(t0, 1), smp(t0.Add(time.Hour), 1)),
		// Vanished long ago: still counted, it is what the node had.
		ser("m", lbl("Hostname", "n1", "gpu", "1"), smp(t0.Add(-time.Hour), 1)),
		// First scraped after t: not yet counted.
		ser("m", lbl("Hostname", "n1", "gpu", "2"), smp(t0.Add(time.Minute), 1)),
		ser("m", lbl("Hostname", "n2", "gpu", "0"), smp(t0, 1)),
		// Never scraped.
		ser("m", lbl("Hostname", "n3", "gpu", "0")),
	}}
	check(t, probe.MaxSeenCountBy(src, "m", "Hostname"), t0, []string{`{Hostname="n1"}=2`, `{Hostname="n2"}=1`})
	check(t, probe.MaxSeenCountBy(src, "m", "Hostname"), t0.Add(time.Minute), []string{`{Hostname="n1"}=3`, `{Hostname="n2"}=1`})
	check(t, probe.MaxSeenCountBy(src, "m"), t0, []string{`{}=3`})
}

// TestFor pins the `for:` semantics: a point must be present at every
// evaluation step, aligned to multiples of step, from d before the last
// aligned step through it, which is when Prometheus moves an alert from
// pending to firing.
func TestFor(t *testing.T) {
	t.Parallel()
	const step = 15 * time.Second
	start := t0.Add(10 * time.Minute) // first scrape where the condition holds
	// cond is a series scraped every step from t0: 0 before start, 1 from
	// start on, except 0 at the times in gaps.
	cond := func(offset time.Duration, gaps ...time.Duration) *fakeSource {
		s := ser("cond", lbl("gpu", "0"))
		for at := t0.Add(offset); at.Before(t0.Add(time.Hour)); at = at.Add(step) {
			v := 0.0
			if !at.Before(start.Add(offset)) && !slices.Contains(gaps, at.Sub(start)) {
				v = 1
			}
			s.Samples = append(s.Samples, smp(at, v))
		}
		return &fakeSource{series: []*series.Series{s}}
	}
	fires := []string{`{gpu="0"}=1`}
	tests := []struct {
		name string
		src  *fakeSource
		d    time.Duration
		at   time.Duration // after start
		want []string
	}{
		{"true for exactly d passes", cond(0), time.Minute, time.Minute, fires},
		{"one step short of d fails", cond(0), time.Minute, 45 * time.Second, nil},
		{"unaligned time is truncated to the step", cond(0), time.Minute, time.Minute + 14*time.Second, fires},
		{"unaligned time just short of d fails", cond(0), time.Minute, 59 * time.Second, nil},
		{"one missed step fails", cond(0, 30*time.Second), time.Minute, 90 * time.Second, nil},
		{"missed step older than d no longer matters", cond(0, 30*time.Second), time.Minute, 105 * time.Second, fires},
		{"missed last step fails", cond(0, 2*time.Minute), time.Minute, 2 * time.Minute, nil},
		// Scrapes 5s after each step: the condition becomes visible at
		// the step after start+5s, and the clock runs from there.
		{"steps align to multiples of step, not to the data", cond(5 * time.Second), time.Minute, 74 * time.Second, nil},
		{"aligned step after the data passes", cond(5 * time.Second), time.Minute, 75 * time.Second, fires},
		// Prometheus fires a pending alert at the first evaluation at
		// least d after it became active: with d shorter than step that
		// is the second evaluation, not the first.
		{"d shorter than step still needs two evaluations", cond(0), 10 * time.Second, 0, nil},
		{"d shorter than step passes at the next step", cond(0), 10 * time.Second, step, fires},
		{"d between steps rounds up to a whole step", cond(0), 20 * time.Second, step, nil},
		{"d between steps passes after two steps", cond(0), 20 * time.Second, 2 * step, fires},
		{"zero d is the condition itself", cond(0), 0, 0, fires},
		{"never true never passes", cond(0), time.Minute, -time.Minute, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := probe.Compare(probe.Selector(tt.src, "cond", nil), ">", 0)
			check(t, probe.For(e, tt.d, step), start.Add(tt.at), tt.want)
		})
	}
	t.Run("series are judged separately", func(t *testing.T) {
		t.Parallel()
		in := func(at time.Time) probe.Vector {
			v := probe.Vector{pt(1, "gpu", "0")}
			if !at.Equal(t0.Add(-30 * time.Second)) {
				v = append(v, pt(1, "gpu", "1"))
			}
			return v
		}
		check(t, probe.For(in, time.Minute, step), t0, []string{`{gpu="0"}=1`})
	})
}
