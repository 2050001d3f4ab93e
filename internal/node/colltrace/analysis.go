package colltrace

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// AnalysisOptions set the verdict thresholds. Zero values take the
// documented defaults.
type AnalysisOptions struct {
	// Window is how many of the newest complete collectives (every rank
	// entered them) the straggler verdict reads; default 64.
	Window int
	// MinCollectives is how many complete collectives the window must hold
	// before anyone is called a straggler; default 8.
	MinCollectives int
	// LastShare is the share of the window's collectives a rank must
	// enter last to be a straggler; default 0.5.
	LastShare float64
	// LagThreshold is the median lag behind the first rank to enter above
	// which a rank that is often last is a straggler; default 5ms. Below
	// it, being last is scheduling jitter.
	LagThreshold time.Duration
	// HangTimeout is how long a rank may stay behind the others (they
	// entered a collective it has not) before it is called hung; default
	// 10s, well inside PyTorch's 10-minute NCCL watchdog.
	HangTimeout time.Duration
	// MaxShift is how many calls one rank's trace may be shifted against
	// another's when lining them up by their count arguments; default 4.
	MaxShift int
}

func (o AnalysisOptions) withDefaults() AnalysisOptions {
	if o.Window <= 0 {
		o.Window = 64
	}
	if o.MinCollectives <= 0 {
		o.MinCollectives = 8
	}
	if o.LastShare <= 0 {
		o.LastShare = 0.5
	}
	if o.LagThreshold <= 0 {
		o.LagThreshold = 5 * time.Millisecond
	}
	if o.HangTimeout <= 0 {
		o.HangTimeout = 10 * time.Second
	}
	if o.MaxShift <= 0 {
		o.MaxShift = 4
	}
	return o
}

// headLen is how many of each rank's first calls of a symbol are kept for
// lining ranks up; they are never dropped.
const headLen = 32

// Rank is one traced process and the rank it runs, when its environment
// says.
type Rank struct {
	PID int `json:"pid"`
	// Rank and LocalRank are the process's RANK and LOCAL_RANK environment
	// variables, -1 when unset.
	Rank      int `json:"rank"`
	LocalRank int `json:"local_rank"`
	// Label names the process in reports: "rank 1", "local_rank 1" or
	// "pid 1234".
	Label string `json:"label"`
}

// PIDRank returns the Rank of a process whose environment is unknown.
func PIDRank(pid int) Rank {
	return Rank{PID: pid, Rank: -1, LocalRank: -1, Label: "pid " + strconv.Itoa(pid)}
}

// String returns the label with the pid when the label does not carry it.
func (r Rank) String() string {
	if r.Rank < 0 && r.LocalRank < 0 {
		return r.Label
	}
	return r.Label + " (pid " + strconv.Itoa(r.PID) + ")"
}

// sortKey orders ranks by rank, then local rank, then pid.
func (r Rank) compare(o Rank) int {
	return cmp.Or(cmp.Compare(r.Rank, o.Rank), cmp.Compare(r.LocalRank, o.LocalRank), cmp.Compare(r.PID, o.PID))
}

// Tracker collects entry events and judges them. It is safe for
// concurrent use: the tracer's reader adds while probes ask for reports.
type Tracker struct {
	opts AnalysisOptions

	mu    sync.Mutex
	ranks map[int]*rankState
}

type rankState struct {
	rank Rank
	syms map[string]*calls
}

// calls is one rank's history of one symbol: its first calls, kept for
// alignment, and a bounded tail of its newest.
type calls struct {
	head   []entry
	recent []entry
	first  int // call number of recent[0]
	n      int // calls seen
}

type entry struct {
	t     time.Duration
	count uint64
}

// at returns the j-th call (0-based), if still held.
func (c *calls) at(j int) (entry, bool) {
	switch {
	case j < 0 || j >= c.n:
		return entry{}, false
	case j < len(c.head):
		return c.head[j], true
	case j >= c.first:
		return c.recent[j-c.first], true
	}
	return entry{}, false
}

// oldest returns the oldest call still held at or after call j.
func (c *calls) oldest(j int) (entry, bool) {
	if e, ok := c.at(j); ok {
		return e, true
	}
	if j < c.first && len(c.recent) > 0 {
		return c.recent[0], true
	}
	return entry{}, false
}

// NewTracker returns an empty tracker.
func NewTracker(opts AnalysisOptions) *Tracker {
	return &Tracker{opts: opts.withDefaults(), ranks: map[int]*rankState{}}
}

// AddRank registers a process, so that it counts as a rank even before
// (or without ever) calling a traced function, and sets its label.
func (t *Tracker) AddRank(r Rank) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if rs, ok := t.ranks[r.PID]; ok {
		rs.rank = r
		return
	}
	t.ranks[r.PID] = &rankState{rank: r, syms: map[string]*calls{}}
}

// Add records one entry event. A process not registered with AddRank
// becomes a rank labelled by its pid.
func (t *Tracker) Add(e Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rs, ok := t.ranks[e.PID]
	if !ok {
		rs = &rankState{rank: PIDRank(e.PID), syms: map[string]*calls{}}
		t.ranks[e.PID] = rs
	}
	c, ok := rs.syms[e.Symbol]
	if !ok {
		c = &calls{}
		rs.syms[e.Symbol] = c
	}
	en := entry{t: e.Time, count: e.Count}
	if c.n < headLen {
		c.head = append(c.head, en)
		c.first = c.n + 1
	} else {
		c.recent = append(c.recent, en)
		// Keep enough of the tail for a full window on one symbol plus
		// the shift; trim in halves so appends stay amortised O(1).
		if keep := 2*t.opts.Window + 2*t.opts.MaxShift + 16; len(c.recent) > 2*keep {
			drop := len(c.recent) - keep
			c.recent = append(c.recent[:0], c.recent[drop:]...)
			c.first += drop
		}
	}
	c.n++
}

// Report is the tracker's verdict at one moment.
type Report struct {
	// Ranks holds every traced process, ordered by rank, local rank, pid.
	Ranks []RankReport `json:"ranks"`
	// Collectives is how many complete collectives the window holds.
	Collectives  int           `json:"collectives"`
	MedianSpread time.Duration `json:"median_spread_ns"`
	MaxSpread    time.Duration `json:"max_spread_ns"`
	// Recent lists the newest complete collectives, newest last (at most
	// ten).
	Recent []Collective `json:"recent,omitempty"`
	// Findings are the stragglers and hung ranks, hung first.
	Findings []Finding `json:"findings"`
	// Notes say what may make the figures wrong: ranks lined up by a
	// shift, traces that could not be lined up, lost events.
	Notes []string `json:"notes,omitempty"`
	// Lost counts events the kernel could not put in the ring buffer.
	Lost uint64 `json:"lost"`
}

// RankReport holds one rank's figures.
type RankReport struct {
	Rank
	// Calls counts traced calls of every symbol.
	Calls int `json:"calls"`
	// Last is how many of the window's collectives this rank entered last.
	Last      int     `json:"last"`
	LastShare float64 `json:"last_share"`
	// MedianLag and MaxLag are the rank's entry time behind the first rank
	// to enter, over the window's collectives.
	MedianLag time.Duration `json:"median_lag_ns"`
	MaxLag    time.Duration `json:"max_lag_ns"`
	// Behind is how many calls of one symbol the rank is behind the rank
	// furthest ahead (the largest over symbols), and BehindFor how long
	// since another rank entered the first of them.
	Behind    int           `json:"behind"`
	BehindFor time.Duration `json:"behind_for_ns"`
	Straggler bool          `json:"straggler"`
	Hung      bool          `json:"hung"`
}

// Collective is one collective every rank entered.
type Collective struct {
	Symbol string `json:"symbol"`
	// Index is the collective's number among the calls of its symbol since
	// tracing began (on the rank the others are lined up against).
	Index  int           `json:"index"`
	Count  uint64        `json:"count"`
	First  time.Duration `json:"first_ns"`
	Spread time.Duration `json:"spread_ns"`
	// LastRank labels the rank that entered last.
	LastRank string `json:"last_rank"`
}

// Kind tells a straggler from a hung rank.
type Kind string

// The kinds of finding.
const (
	KindStraggler Kind = "straggler"
	KindHung      Kind = "hung"
)

// Finding names one rank that holds the job back.
type Finding struct {
	Kind Kind `json:"kind"`
	Rank Rank `json:"rank"`
	// Value is the median lag (straggler) or the time behind (hung).
	Value  time.Duration `json:"value_ns"`
	Detail string        `json:"detail"`
}

// Report judges the events so far at time now (CLOCK_MONOTONIC, the
// events' clock).
func (t *Tracker) Report(now time.Duration) Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.opts
	rs := make([]*rankState, 0, len(t.ranks))
	for _, r := range t.ranks {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *rankState) int { return a.rank.compare(b.rank) })
	out := Report{Ranks: make([]RankReport, len(rs)), Findings: []Finding{}}
	for i, r := range rs {
		out.Ranks[i].Rank = r.rank
		for _, c := range r.syms {
			out.Ranks[i].Calls += c.n
		}
	}
	var all []collective
	for _, sym := range symbolsOf(rs) {
		off := t.offsets(sym, rs, &out.Notes)
		all = append(all, t.complete(sym, rs, off)...)
		t.behind(sym, rs, off, now, out.Ranks)
	}
	slices.SortFunc(all, func(a, b collective) int { return cmp.Compare(a.first, b.first) })
	if len(all) > o.Window {
		all = all[len(all)-o.Window:]
	}
	out.Collectives = len(all)
	lags := make([][]time.Duration, len(rs))
	spreads := make([]time.Duration, 0, len(all))
	for _, c := range all {
		last := 0
		for i, at := range c.at {
			lags[i] = append(lags[i], at-c.first)
			if at > c.at[last] {
				last = i
			}
		}
		out.Ranks[last].Last++
		spread := c.at[last] - c.first
		spreads = append(spreads, spread)
		out.MaxSpread = max(out.MaxSpread, spread)
	}
	out.MedianSpread = median(spreads)
	for _, c := range all[max(0, len(all)-10):] {
		last := slices.Index(c.at, slices.Max(c.at))
		out.Recent = append(out.Recent, Collective{
			Symbol: c.symbol, Index: c.index, Count: c.count, First: c.first,
			Spread: c.at[last] - c.first, LastRank: rs[last].rank.Label,
		})
	}
	var hung, slow []Finding
	for i := range out.Ranks {
		rr := &out.Ranks[i]
		if len(all) > 0 {
			rr.LastShare = float64(rr.Last) / float64(len(all))
			rr.MedianLag = median(lags[i])
			rr.MaxLag = slices.Max(lags[i])
		}
		if rr.Behind > 0 && rr.BehindFor >= o.HangTimeout {
			rr.Hung = true
			hung = append(hung, Finding{Kind: KindHung, Rank: rr.Rank, Value: rr.BehindFor, Detail: fmt.Sprintf(
				"%s is %d calls behind the rank furthest ahead and has not caught up for %s (timeout %s)",
				rr.Rank, rr.Behind, roundDur(rr.BehindFor), o.HangTimeout)})
		}
		if len(all) >= o.MinCollectives && len(rs) > 1 && rr.LastShare >= o.LastShare && rr.MedianLag >= o.LagThreshold {
			rr.Straggler = true
			slow = append(slow, Finding{Kind: KindStraggler, Rank: rr.Rank, Value: rr.MedianLag, Detail: fmt.Sprintf(
				"%s entered last in %d of %d collectives, median lag %s behind the first rank (threshold %s)",
				rr.Rank, rr.Last, len(all), roundDur(rr.MedianLag), o.LagThreshold)})
		}
	}
	out.Findings = append(append(out.Findings, hung...), slow...)
	return out
}

// collective is one complete collective's entry times, indexed like the
// sorted ranks.
type collective struct {
	symbol string
	index  int
	count  uint64
	first  time.Duration
	at     []time.Duration
}

// symbolsOf lists the symbols any rank called, sorted.
func symbolsOf(rs []*rankState) []string {
	var out []string
	for _, r := range rs {
		for s := range r.syms {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return out
}

// offsets lines up the ranks' calls of sym: rank i's j-th call is
// collective j+off[i]. The reference is the first rank (in report order)
// that called sym. Without evidence a rank is not shifted: every rank's
// first traced call is taken to be the same collective, which holds when
// tracing started before the job or between collectives. When it started
// while some ranks had entered a collective and others had not, the count
// arguments show it: the shift under which the ranks' counts agree is
// taken, if there is only one.
func (t *Tracker) offsets(sym string, rs []*rankState, notes *[]string) []int {
	off := make([]int, len(rs))
	ref := -1
	for i, r := range rs {
		if c := r.syms[sym]; c != nil {
			ref = i
			break
		}
	}
	if ref < 0 {
		return off
	}
	rh := rs[ref].syms[sym].head
	for i, r := range rs {
		c := r.syms[sym]
		if i == ref || c == nil {
			continue
		}
		var fits []int
		enough := false
		for o := -t.opts.MaxShift; o <= t.opts.MaxShift; o++ {
			overlap, match := 0, 0
			for j, e := range c.head {
				if k := j + o; k >= 0 && k < len(rh) {
					overlap++
					if e.count == rh[k].count {
						match++
					}
				}
			}
			// Judge a shift only on a stretch long enough for varying
			// counts to tell shifts apart.
			if overlap >= min(8, len(rh), len(c.head)) && overlap > 0 {
				enough = true
				if match == overlap {
					fits = append(fits, o)
				}
			}
		}
		// Tracing starts within one collective of the truth, so of the
		// shifts that fit, the smallest is the likeliest.
		slices.SortStableFunc(fits, func(a, b int) int { return cmp.Compare(abs(a), abs(b)) })
		switch {
		case len(fits) > 0 && fits[0] == 0:
		case len(fits) == 1 || len(fits) > 1 && abs(fits[1]) > abs(fits[0]):
			off[i] = fits[0]
			also := ""
			if len(fits) > 1 {
				also = fmt.Sprintf(" (shifts %s fit too; the smallest is taken)", joinInts(fits[1:]))
			}
			*notes = append(*notes, fmt.Sprintf("%s: %s's calls lined up shifted by %d against %s's, where their counts agree: tracing began mid-collective%s",
				sym, r.rank.Label, fits[0], rs[ref].rank.Label, also))
		case len(fits) > 1:
			*notes = append(*notes, fmt.Sprintf("%s: %s's counts agree with %s's under shifts %s alike; left unshifted, so the pairing of their calls may be off",
				sym, r.rank.Label, rs[ref].rank.Label, joinInts(fits)))
		case enough:
			*notes = append(*notes, fmt.Sprintf("%s: %s's counts agree with %s's under no shift up to %d; the ranks may be in different communicators or events were lost",
				sym, r.rank.Label, rs[ref].rank.Label, t.opts.MaxShift))
		}
	}
	return off
}

// complete returns sym's newest complete collectives, at most a window.
func (t *Tracker) complete(sym string, rs []*rankState, off []int) []collective {
	start, end := 0, -1
	for i, r := range rs {
		c := r.syms[sym]
		n := 0
		if c != nil {
			n = c.n
		}
		start = max(start, off[i])
		if next := off[i] + n; end < 0 || next < end {
			end = next
		}
	}
	var out []collective
	for k := end - 1; k >= start && len(out) < t.opts.Window; k-- {
		col := collective{symbol: sym, index: k, at: make([]time.Duration, len(rs))}
		for i, r := range rs {
			e, ok := r.syms[sym].at(k - off[i])
			if !ok {
				// Older calls were trimmed on some rank.
				return out
			}
			col.at[i] = e.t
			if i == 0 || e.t < col.first {
				col.first = e.t
			}
			col.count = e.count
		}
		out = append(out, col)
	}
	return out
}

// behind sets, for each rank behind another on sym, how many calls and for
// how long: since the first other rank entered the collective it has not.
func (t *Tracker) behind(sym string, rs []*rankState, off []int, now time.Duration, out []RankReport) {
	next := make([]int, len(rs))
	top := 0
	for i, r := range rs {
		next[i] = off[i]
		if c := r.syms[sym]; c != nil {
			next[i] += c.n
		}
		top = max(top, next[i])
	}
	for i := range rs {
		if next[i] >= top {
			continue
		}
		var since time.Duration = -1
		for q, r := range rs {
			if next[q] <= next[i] {
				continue
			}
			c := r.syms[sym]
			if c == nil {
				continue
			}
			if e, ok := c.oldest(next[i] - off[q]); ok && (since < 0 || e.t < since) {
				since = e.t
			}
		}
		if since < 0 {
			continue
		}
		out[i].Behind = max(out[i].Behind, top-next[i])
		out[i].BehindFor = max(out[i].BehindFor, now-since)
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func joinInts(n []int) string {
	s := make([]string, len(n))
	for i, x := range n {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// roundDur rounds d for reading: to 0.1 ms below a second, 10 ms above.
func roundDur(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(10 * time.Millisecond)
}
