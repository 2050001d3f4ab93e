package colltrace

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// job describes a synthetic run: ranks entering ncclAllReduce in step,
// each rank's entry offset from the collective's start given by delay.
type job struct {
	ranks  int
	calls  int
	period time.Duration
	// delay is rank r's lag entering collective k; nil means none.
	delay func(r, k int) time.Duration
	// stop is, per rank, how many calls it makes (0 means all).
	stop map[int]int
	// skip is, per rank, how many of its first calls tracing missed.
	skip map[int]int
	// count is the count argument of collective k; nil means 1024.
	count func(k int) uint64
}

const t0 = 1000 * time.Second

// feed adds the job's events to tr in time order and returns the time of
// the newest.
func (j job) feed(tr *Tracker) time.Duration {
	var evs []Event
	for k := range j.calls {
		for r := range j.ranks {
			if n, ok := j.stop[r]; ok && k >= n || k < j.skip[r] {
				continue
			}
			at := t0 + time.Duration(k)*j.period
			if j.delay != nil {
				at += j.delay(r, k)
			}
			c := uint64(1024)
			if j.count != nil {
				c = j.count(k)
			}
			evs = append(evs, Event{PID: 100 + r, Symbol: "ncclAllReduce", Time: at, Count: c})
		}
	}
	slices.SortStableFunc(evs, func(a, b Event) int { return int(a.Time - b.Time) })
	for _, e := range evs {
		tr.Add(e)
	}
	return evs[len(evs)-1].Time
}

// jitter returns a deterministic lag of up to max for rank r, call k.
func jitter(seed uint64, maxLag time.Duration) func(r, k int) time.Duration {
	return func(r, k int) time.Duration {
		rng := rand.New(rand.NewPCG(seed, uint64(r)<<32|uint64(k)))
		return time.Duration(rng.Int64N(int64(maxLag)))
	}
}

func TestTrackerVerdicts(t *testing.T) {
	t.Parallel()
	late := func(who int, by time.Duration, base func(r, k int) time.Duration) func(r, k int) time.Duration {
		return func(r, k int) time.Duration {
			d := base(r, k)
			if r == who {
				d += by
			}
			return d
		}
	}
	tests := []struct {
		name string
		job  job
		// after is how long after the newest event the report is asked for.
		after time.Duration
		// want lists the findings as "kind pid", hung first.
		want  []string
		check func(t *testing.T, r Report)
	}{
		{
			name: "balanced ranks",
			job:  job{ranks: 4, calls: 80, period: 40 * time.Millisecond, delay: jitter(1, 500*time.Microsecond)},
			check: func(t *testing.T, r Report) {
				if r.Collectives != 64 {
					t.Errorf("window holds %d collectives, want 64", r.Collectives)
				}
				if r.MaxSpread >= 500*time.Microsecond {
					t.Errorf("max spread %v, want under the 0.5 ms jitter", r.MaxSpread)
				}
			},
		},
		{
			name: "one rank late by 20ms",
			job:  job{ranks: 4, calls: 80, period: 40 * time.Millisecond, delay: late(2, 20*time.Millisecond, jitter(2, 500*time.Microsecond))},
			want: []string{"straggler 102"},
			check: func(t *testing.T, r Report) {
				rr := r.Ranks[2]
				if rr.MedianLag < 19500*time.Microsecond || rr.MedianLag > 20500*time.Microsecond || rr.LastShare != 1 {
					t.Errorf("rank 2: median lag %v, last share %.2f; want 20ms ± 0.5ms, 1.00", rr.MedianLag, rr.LastShare)
				}
				if r.Ranks[0].MedianLag > 500*time.Microsecond {
					t.Errorf("rank 0 median lag %v, want under the jitter", r.Ranks[0].MedianLag)
				}
			},
		},
		{
			name:  "one rank stops while the others go on",
			job:   job{ranks: 3, calls: 60, period: 40 * time.Millisecond, stop: map[int]int{1: 40}},
			after: 10 * time.Second,
			want:  []string{"hung 101"},
			check: func(t *testing.T, r Report) {
				rr := r.Ranks[1]
				// Collective 40 began 19 periods before the newest event.
				if wantFor := 10*time.Second + 19*40*time.Millisecond; rr.Behind != 20 || rr.BehindFor != wantFor {
					t.Errorf("rank 1 behind %d calls for %v, want 20 for %v", rr.Behind, rr.BehindFor, wantFor)
				}
				if r.Ranks[0].Behind != 0 || r.Ranks[0].Hung {
					t.Errorf("rank 0 behind %d, hung %v", r.Ranks[0].Behind, r.Ranks[0].Hung)
				}
			},
		},
		{
			name:  "one rank stops and the others block in the next collective",
			job:   job{ranks: 3, calls: 41, period: 40 * time.Millisecond, stop: map[int]int{0: 40}},
			after: 11 * time.Second,
			want:  []string{"hung 100"},
		},
		{
			name:  "a rank behind for less than the timeout is in flight, not hung",
			job:   job{ranks: 3, calls: 41, period: 40 * time.Millisecond, stop: map[int]int{0: 40}},
			after: 9 * time.Second,
			check: func(t *testing.T, r Report) {
				if r.Ranks[0].Behind != 1 || r.Ranks[0].BehindFor != 9*time.Second {
					t.Errorf("rank 0 behind %d for %v, want 1 for 9s", r.Ranks[0].Behind, r.Ranks[0].BehindFor)
				}
			},
		},
		{
			name: "always last but below the lag threshold is jitter",
			job:  job{ranks: 2, calls: 50, period: 40 * time.Millisecond, delay: late(1, 2*time.Millisecond, jitter(3, 200*time.Microsecond))},
			check: func(t *testing.T, r Report) {
				if rr := r.Ranks[1]; rr.LastShare != 1 || rr.MedianLag < 1800*time.Microsecond || rr.MedianLag > 2200*time.Microsecond {
					t.Errorf("rank 1 last share %.2f, median lag %v; want 1.00 and about 2ms", rr.LastShare, rr.MedianLag)
				}
			},
		},
		{
			name: "the newest collective is not yet entered by every rank",
			// Rank 2 is 30 ms late only on the newest, which it has not
			// entered yet: it is neither hung nor counted.
			job:   job{ranks: 3, calls: 30, period: 40 * time.Millisecond, stop: map[int]int{2: 29}},
			after: 3 * time.Millisecond,
			check: func(t *testing.T, r Report) {
				if r.Collectives != 29 || r.Recent[len(r.Recent)-1].Index != 28 {
					t.Errorf("window holds %d collectives, newest %d; want 29, newest 28", r.Collectives, r.Recent[len(r.Recent)-1].Index)
				}
				if r.Ranks[2].Behind != 1 {
					t.Errorf("rank 2 behind %d, want 1", r.Ranks[2].Behind)
				}
			},
		},
		{
			name: "tracing began mid-collective, lined up by counts",
			// Tracing missed rank 0's first call: the stand-in's first
			// traced call is collective 1 on rank 0 but 0 on rank 1.
			job: job{ranks: 2, calls: 40, period: 40 * time.Millisecond, skip: map[int]int{0: 1},
				delay: late(1, 20*time.Millisecond, jitter(4, 300*time.Microsecond)),
				count: func(k int) uint64 { return uint64(1000 + k%11) }},
			want: []string{"straggler 101"},
			check: func(t *testing.T, r Report) {
				if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "pid 101's calls lined up shifted by -1") {
					t.Errorf("notes %q, want one saying pid 101 was shifted by -1", r.Notes)
				}
				if r.Collectives != 39 {
					t.Errorf("window holds %d collectives, want 39", r.Collectives)
				}
			},
		},
		{
			name: "counts repeating within the shift range: the smallest fitting shift",
			// Counts with period 3 fit shifts -1, 2 and -4; -1 is taken.
			job: job{ranks: 2, calls: 40, period: 40 * time.Millisecond, skip: map[int]int{0: 1},
				count: func(k int) uint64 { return uint64(1000 + k%3) }},
			check: func(t *testing.T, r Report) {
				if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "shifted by -1") || !strings.Contains(r.Notes[0], "shifts 2, -4 fit too") {
					t.Errorf("notes %q, want one saying -1 was taken over 2 and -4", r.Notes)
				}
			},
		},
		{
			name: "counts alternating: shifts -1 and 1 tie, nothing is shifted",
			job: job{ranks: 2, calls: 40, period: 40 * time.Millisecond, skip: map[int]int{0: 1},
				count: func(k int) uint64 { return uint64(1000 + k%2) }},
			// Unshifted, rank 0's calls pair with the next collective: it
			// looks a period late, and the note says the pairing is unsure.
			want: []string{"straggler 100"},
			check: func(t *testing.T, r Report) {
				if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "under shifts -1, 1, -3, 3 alike") {
					t.Errorf("notes %q, want one naming the tied shifts", r.Notes)
				}
			},
		},
		{
			name: "a straggler that recovered before the window is not named",
			job: job{ranks: 2, calls: 200, period: 40 * time.Millisecond, delay: func(r, k int) time.Duration {
				if r == 1 && k < 100 {
					return 20 * time.Millisecond
				}
				return jitter(5, 300*time.Microsecond)(r, k)
			}},
		},
		{
			name: "too few collectives to judge",
			job:  job{ranks: 2, calls: 5, period: 40 * time.Millisecond, delay: late(1, 20*time.Millisecond, jitter(6, 100*time.Microsecond))},
			check: func(t *testing.T, r Report) {
				if r.Ranks[1].MedianLag < 20*time.Millisecond {
					t.Errorf("rank 1 median lag %v, want ≥ 20ms even when not judged", r.Ranks[1].MedianLag)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := NewTracker(AnalysisOptions{})
			newest := tt.job.feed(tr)
			r := tr.Report(newest + tt.after)
			var got []string
			for _, f := range r.Findings {
				got = append(got, string(f.Kind)+" "+itoa(f.Rank.PID))
				if f.Detail == "" || !strings.Contains(f.Detail, f.Rank.Label) {
					t.Errorf("finding detail %q does not name %s", f.Detail, f.Rank.Label)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("findings %q, want %q", got, tt.want)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

func TestTrackerKnownRankThatNeverCalls(t *testing.T) {
	t.Parallel()
	tr := NewTracker(AnalysisOptions{HangTimeout: time.Second})
	tr.AddRank(RankFromEnv(7, map[string]string{"RANK": "3"}))
	tr.Add(Event{PID: 8, Symbol: "ncclAllGather", Time: t0})
	tr.Add(Event{PID: 8, Symbol: "ncclAllGather", Time: t0 + time.Millisecond})
	for _, tc := range []struct {
		after time.Duration
		hung  bool
	}{{500 * time.Millisecond, false}, {1500 * time.Millisecond, true}} {
		r := tr.Report(t0 + tc.after)
		if hung := len(r.Findings) == 1 && r.Findings[0].Rank.Label == "rank 3" && r.Findings[0].Kind == KindHung; hung != tc.hung {
			t.Errorf("after %v: findings %+v, want rank 3 hung: %v", tc.after, r.Findings, tc.hung)
		}
	}
}

func TestTrackerTrimsOldCalls(t *testing.T) {
	t.Parallel()
	tr := NewTracker(AnalysisOptions{Window: 16})
	j := job{ranks: 2, calls: 5000, period: time.Millisecond, delay: func(r, k int) time.Duration { return time.Duration(r) * 100 * time.Microsecond }}
	newest := j.feed(tr)
	c := tr.ranks[100].syms["ncclAllReduce"]
	if len(c.recent) > 2*(2*16+2*4+16) {
		t.Errorf("holds %d recent calls, want the tail bounded", len(c.recent))
	}
	r := tr.Report(newest)
	if r.Collectives != 16 || r.Recent[len(r.Recent)-1].Index != 4999 || r.Ranks[1].Calls != 5000 {
		t.Errorf("report after trimming: %d collectives, newest %d, %d calls; want 16, 4999, 5000",
			r.Collectives, r.Recent[len(r.Recent)-1].Index, r.Ranks[1].Calls)
	}
}

func itoa(n int) string { return PIDRank(n).Label[len("pid "):] }
