// Package xidbench measures how fast XID lines written to the kernel log
// are seen, by an XID watcher of its own or on a running agent's /metrics
// page, and whether a burst loses any (gpuchaos xid bench). It is apart
// from xidwatch because reading /metrics links the scrape store, and the
// node agent, which links the watcher, must not link that.
package xidbench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe/scrape"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
	"github.com/gpuchaos/gpuchaos/internal/node/tick"
	"github.com/gpuchaos/gpuchaos/internal/node/xidwatch"
)

// Options configure Run. Zero values take the defaults in brackets.
type Options struct {
	// PCI is the bus id the lines name (required), in any form
	// xid.NormalizePCI reads.
	PCI string
	// Code is the XID written [13: an application error, which implies
	// no reset to anything that acts on it].
	Code int
	// Injections is how many single lines are timed [200], one every
	// Interval [10ms].
	Injections int
	Interval   time.Duration
	// Burst is how many lines are written over BurstOver [1000 over 1s].
	Burst     int
	BurstOver time.Duration
	// Level is the syslog level the lines are written at [3, KERN_ERR,
	// the driver's]. Levels below the console log level (usually 4) are
	// also printed on the console, synchronously: on a serial console
	// that costs milliseconds per line, for the driver's lines too.
	Level int
	// Kmsg is where the watcher reads; Writer where lines are written
	// [both /dev/kmsg].
	Kmsg   kmsg.Options
	Writer kmsg.Writer
	// Sink, when set, is called with each event inside the timed path, as
	// the agent's exporter would be (RecordXID). Not used with Metrics.
	Sink func(xidwatch.Event)
	// Metrics, when set, is the /metrics URL of a running gpuchaos agent:
	// instead of its own watcher, Run then times each line until the
	// agent's gpuchaos_xid_events_total{code} has counted it, polling the
	// page back to back — what a scrape would see, through the agent's
	// own watcher, recorder and HTTP server. The bench's code should be
	// one nothing else logs meanwhile; the agent counts every line.
	Metrics string
	// Client fetches Metrics; nil means a client with a 2 s timeout.
	Client *http.Client
}

// Result is what Run measured.
type Result struct {
	// Observer says where the lines were looked for: "watcher" (Run's
	// own) or the agent's metrics URL.
	Observer   string `json:"observer"`
	Level      int    `json:"level"`
	Injections int    `json:"injections"`
	Seen       int    `json:"seen"`
	// Latencies from just before the write to the moment the line was
	// seen: the watcher's callback (after Sink returned), or the end of
	// the first /metrics response that counted it.
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
	// Burst: lines written, lines seen, and how long writing them took.
	Burst      int           `json:"burst"`
	BurstSeen  int           `json:"burst_seen"`
	BurstWrite time.Duration `json:"burst_write_ns"`
	// Lost is the kernel log records Run's watcher lost over the whole
	// run (always 0 with Metrics: the agent's losses show as lines not
	// seen).
	Lost uint64 `json:"lost"`
	// Polls is how many /metrics pages were fetched (Metrics only).
	Polls int `json:"polls,omitempty"`
}

// benchPID is the first pid the bench lines name; each line names its own,
// so that each is recognised by a field a real line has rather than by a
// marker no driver would print.
const benchPID = 4000000

// observer tells Run how many of its lines have been seen where it
// looks.
type observer interface {
	// waitSeen blocks until at least n lines were seen or deadline
	// passed, and returns the count and when it was observed.
	waitSeen(ctx context.Context, n int, deadline time.Time) (int, time.Time, error)
}

// Run measures how fast XID lines written to the kernel log are seen —
// by a watcher of its own, or on a running agent's /metrics — and whether
// a burst loses any. It writes real XID lines, so it needs root and should
// name code 13 on a machine others use.
func Run(ctx context.Context, o Options) (res Result, err error) {
	if o.Code == 0 {
		o.Code = 13
	}
	if o.Level == 0 {
		o.Level = kmsg.LevelErr
	}
	if o.Injections <= 0 {
		o.Injections = 200
	}
	if o.Interval <= 0 {
		o.Interval = 10 * time.Millisecond
	}
	if o.Burst <= 0 {
		o.Burst = 1000
	}
	if o.BurstOver <= 0 {
		o.BurstOver = time.Second
	}
	pci, ok := xid.NormalizePCI(o.PCI)
	if !ok {
		return Result{}, fmt.Errorf("xid bench: %q is not a PCI bus id", o.PCI)
	}
	res = Result{Level: o.Level, Injections: o.Injections, Burst: o.Burst}
	var obs observer
	if o.Metrics != "" {
		m, err := newMetricsObserver(ctx, o.Metrics, o.Client, o.Code)
		if err != nil {
			return res, err
		}
		defer func() { res.Polls = m.polls }()
		obs, res.Observer = m, o.Metrics
	} else {
		w, err := startWatcherObserver(ctx, o, pci)
		if err != nil {
			return res, err
		}
		defer w.w.Stop()
		defer func() { res.Lost = w.w.Lost() }()
		obs, res.Observer = w, "watcher"
	}

	line := func(i int) string { return xid.FormatLine(pci, o.Code, benchPID+i, "python3", "") }
	lat := make([]time.Duration, 0, o.Injections)
	seen := 0
	for i := range o.Injections {
		t0 := time.Now()
		if err := o.Writer.Write(o.Level, line(i)); err != nil {
			return res, fmt.Errorf("xid bench: %w", err)
		}
		n, at, err := obs.waitSeen(ctx, seen+1, t0.Add(time.Second))
		if err != nil {
			return res, err
		}
		if n > seen {
			// A line seen late (after the deadline) is counted when it
			// shows, but not timed.
			if n == seen+1 && at.Sub(t0) < time.Second {
				lat = append(lat, at.Sub(t0))
			}
			seen = n
		}
		if err := tick.Sleep(ctx, o.Interval); err != nil {
			return res, err
		}
	}
	res.Seen = len(lat)
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		res.P50 = lat[(n-1)*50/100]
		res.P99 = lat[(n-1)*99/100]
		res.Max = lat[n-1]
	}

	// The burst is judged against every line seen after the singles, so
	// a single line that arrived later than its second still counts once.
	before, _, err := obs.waitSeen(ctx, o.Injections, time.Now())
	if err != nil {
		return res, err
	}
	start := time.Now()
	for j := range o.Burst {
		// Pace the burst evenly over BurstOver.
		if d := time.Until(start.Add(o.BurstOver * time.Duration(j) / time.Duration(o.Burst))); d > 0 {
			if err := tick.Sleep(ctx, d); err != nil {
				return res, err
			}
		}
		if err := o.Writer.Write(o.Level, line(o.Injections+j)); err != nil {
			return res, fmt.Errorf("xid bench: burst line %d: %w", j, err)
		}
	}
	res.BurstWrite = time.Since(start)
	n, _, err := obs.waitSeen(ctx, before+o.Burst, time.Now().Add(2*time.Second))
	if err != nil {
		return res, err
	}
	res.BurstSeen = n - before
	return res, nil
}

// watcherObserver counts the bench's lines through a watcher of its own,
// each line once (by the pid it names).
type watcherObserver struct {
	w *xidwatch.Watcher

	mu     sync.Mutex
	seen   map[int]bool
	lastAt time.Time
	notify chan struct{}
}

func startWatcherObserver(ctx context.Context, o Options, pci string) (*watcherObserver, error) {
	total := o.Injections + o.Burst
	wo := &watcherObserver{seen: make(map[int]bool, total), notify: make(chan struct{}, 1)}
	w, err := xidwatch.Start(ctx, xidwatch.Options{Kmsg: o.Kmsg, OnXID: func(ev xidwatch.Event) {
		if ev.PCI != pci || ev.Code != o.Code || ev.PID == nil {
			return
		}
		i := *ev.PID - benchPID
		if i < 0 || i >= total {
			return
		}
		if o.Sink != nil {
			o.Sink(ev)
		}
		now := time.Now()
		wo.mu.Lock()
		if !wo.seen[i] {
			wo.seen[i], wo.lastAt = true, now
		}
		wo.mu.Unlock()
		select {
		case wo.notify <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		return nil, err
	}
	wo.w = w
	return wo, nil
}

func (wo *watcherObserver) waitSeen(ctx context.Context, n int, deadline time.Time) (int, time.Time, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		wo.mu.Lock()
		got, at := len(wo.seen), wo.lastAt
		wo.mu.Unlock()
		if got >= n {
			return got, at, nil
		}
		select {
		case <-wo.notify:
		case <-timer.C:
			return got, at, nil
		case <-ctx.Done():
			return got, at, ctx.Err()
		}
	}
}

// metricsObserver counts the bench's lines on an agent's /metrics: the
// rise of gpuchaos_xid_events_total for the bench's code since it was
// made.
type metricsObserver struct {
	url    string
	client *http.Client
	code   string
	base   float64
	polls  int
}

func newMetricsObserver(ctx context.Context, url string, client *http.Client, code int) (*metricsObserver, error) {
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	m := &metricsObserver{url: url, client: client, code: strconv.Itoa(code)}
	v, err := m.count(ctx)
	if err != nil {
		return nil, err
	}
	m.base = v
	return m, nil
}

// count fetches the page once and sums the bench code's XID counters.
func (m *metricsObserver) count(ctx context.Context) (float64, error) {
	fams, err := scrape.Fetch(ctx, m.client, m.url)
	if err != nil {
		return 0, fmt.Errorf("xid bench: fetch %w", err)
	}
	m.polls++
	return sumXIDEvents(fams, m.code), nil
}

func (m *metricsObserver) waitSeen(ctx context.Context, n int, deadline time.Time) (int, time.Time, error) {
	for {
		v, err := m.count(ctx)
		if err != nil {
			return 0, time.Time{}, err
		}
		at := time.Now()
		got := int(v - m.base)
		if got >= n || !at.Before(deadline) {
			return got, at, nil
		}
	}
}

// sumXIDEvents returns the sum of gpuchaos_xid_events_total over every
// series of a page whose code label is code.
func sumXIDEvents(fams map[string]*dto.MetricFamily, code string) float64 {
	sum := 0.0
	for _, m := range fams["gpuchaos_xid_events_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "code" && l.GetValue() == code {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
