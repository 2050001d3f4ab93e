package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/series"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DefaultRetention is how much history a Store keeps: the longest window
// the built-in detectors look back over, with room to spare.
const DefaultRetention = 30 * time.Minute

// Options configure New. Zero values take the documented defaults.
type Options struct {
	// URL is the exporter's page, e.g. http://127.0.0.1:9400/metrics.
	URL string
	// More are further pages scraped with it (a training job's ranks,
	// its supervisor). Every series gets the label instance=HOST:PORT of
	// its page, as Prometheus adds, so that pages serving the same series
	// (one job series per rank) stay apart.
	More []string
	// Client fetches it; nil means a client with a 5 s timeout.
	Client *http.Client
	// Timeout bounds one scrape of every page, as Prometheus'
	// scrape_timeout does: a page that has not answered by then (a
	// stopped process accepts the connection and never replies) goes
	// stale for that scrape. 0 means 5 s.
	Timeout time.Duration
	// Retention is how long samples are kept; 0 means DefaultRetention.
	Retention time.Duration
	// MinInterval is the least time between two fetches: a Scrape sooner
	// than that after the last is skipped, so several probes observing in
	// the same round cost one fetch. 0 means 500 ms.
	MinInterval time.Duration
	// Now reads the clock; nil means time.Now. Tests set it.
	Now func() time.Time
}

// Store is the history of one exporter page. It implements probe.Source:
// call Now, Select and Logs only inside With (or when nothing scrapes
// concurrently), since Scrape appends to the series they return; Select's
// result must not be modified. Scrape and With are safe for concurrent
// use.
type Store struct {
	opts Options

	// scraping serialises scrapes (a background loop and observations
	// may both ask), so samples are appended in time order.
	scraping sync.Mutex

	mu sync.Mutex
	// series holds each page's series, by instance and then by metric
	// name + label key, so a scrape walks only its own page's.
	series   map[string]map[string]*series.Series
	byMetric map[string][]*series.Series
	urls     []string
	last     time.Time
	lastErr  error
	scrapes  int
}

// New returns an empty store over opts.URL.
func New(opts Options) (*Store, error) {
	if opts.URL == "" {
		return nil, fmt.Errorf("scrape: no exporter url")
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = 500 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	for _, u := range opts.More {
		if u == "" {
			return nil, fmt.Errorf("scrape: an empty exporter url")
		}
	}
	return &Store{opts: opts, series: map[string]map[string]*series.Series{}, byMetric: map[string][]*series.Series{},
		urls: append([]string{opts.URL}, opts.More...)}, nil
}

// URL returns the first page the store reads.
func (s *Store) URL() string { return s.opts.URL }

// URLs returns every page the store reads.
func (s *Store) URLs() []string { return slices.Clone(s.urls) }

// Scrapes returns how many pages were stored.
func (s *Store) Scrapes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scrapes
}

// Scrape fetches the page and appends a sample to every series on it,
// unless the last fetch was less than MinInterval ago (then it returns
// that fetch's error). Series that were on the last page and are not on
// this one get a staleness marker; so do all of them when the fetch fails,
// as Prometheus marks a target that stopped answering.
func (s *Store) Scrape(ctx context.Context) error {
	s.scraping.Lock()
	defer s.scraping.Unlock()
	now := s.opts.Now()
	s.mu.Lock()
	if !s.last.IsZero() && now.Sub(s.last) < s.opts.MinInterval {
		err := s.lastErr
		s.mu.Unlock()
		return err
	}
	s.last = now
	s.mu.Unlock()

	// The pages are fetched together, outside the lock, so one that
	// hangs costs the scrape one timeout, not one per page; one that
	// fails leaves its series stale and the others are still stored.
	timeout := s.opts.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pages := make([]map[string]*dto.MetricFamily, len(s.urls))
	fails := make([]error, len(s.urls))
	var wg sync.WaitGroup
	for i, u := range s.urls {
		wg.Go(func() { pages[i], fails[i] = s.fetch(fctx, u) })
	}
	wg.Wait()
	var errs []error
	for _, e := range fails {
		if e != nil {
			errs = append(errs, e)
		}
	}
	err := errors.Join(errs...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
	for i, u := range s.urls {
		s.add(now, instanceOf(u), pages[i]) // nil on error: that page's series go stale
	}
	if len(errs) == len(pages) {
		return err
	}
	s.scrapes++
	return err
}

// instanceOf is the host:port of a page's URL, Prometheus' instance label.
func instanceOf(u string) string {
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		return p.Host
	}
	return u
}

// With runs fn with the store locked, so that probes evaluated in fn see
// the series as one scrape left them.
func (s *Store) With(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
}

func (s *Store) fetch(ctx context.Context, u string) (map[string]*dto.MetricFamily, error) {
	fams, err := Fetch(ctx, s.opts.Client, u)
	if err != nil {
		return nil, fmt.Errorf("scrape %w", err)
	}
	return fams, nil
}

// Fetch gets one exposition page and parses it. Errors name the URL.
func Fetch(ctx context.Context, client *http.Client, u string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", u, resp.Status)
	}
	// A page that never ends (a broken exporter, a wrong URL serving a
	// stream) must not fill memory: stop past the limit and say so.
	body := &limitedBody{r: resp.Body, left: MaxPageBytes + 1}
	fams, err := Parse(body)
	if body.over {
		return nil, fmt.Errorf("%s: page larger than the limit of %d MiB", u, MaxPageBytes>>20)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return fams, nil
}

// MaxPageBytes bounds one scraped page. dcgm-exporter's page for eight
// GPUs with every counter is about 200 KiB; a node agent's with several
// jobs' ranks stays well under a MiB.
const MaxPageBytes = 64 << 20

// limitedBody reads at most left bytes and then fails, noting it, so the
// parser stops instead of reading on.
type limitedBody struct {
	r    io.Reader
	left int64
	over bool
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		l.over = true
		return 0, errPageTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

var errPageTooLarge = errors.New("page too large")

// Parse reads a text exposition.
func Parse(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// add stores one page of instance taken at now. Guarded by mu.
func (s *Store) add(now time.Time, instance string, fams map[string]*dto.MetricFamily) {
	t := now.UnixMilli()
	page := s.series[instance]
	if page == nil {
		page = map[string]*series.Series{}
		s.series[instance] = page
	}
	seen := make(map[*series.Series]bool, len(page))
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			v, ok := value(fam.GetType(), m)
			if !ok {
				continue // histograms and summaries: no built-in probe reads them
			}
			ls := labels(m, instance)
			key := name + ls.String()
			ser := page[key]
			if ser == nil {
				ser = &series.Series{Metric: name, Labels: ls}
				page[key] = ser
				s.byMetric[name] = append(s.byMetric[name], ser)
			}
			ser.Samples = append(ser.Samples, series.Sample{T: t, V: v})
			seen[ser] = true
		}
	}
	cut := now.Add(-s.opts.Retention).UnixMilli()
	for key, ser := range page {
		if !seen[ser] {
			if n := len(ser.Samples); n > 0 && !series.IsStale(ser.Samples[n-1].V) {
				ser.Samples = append(ser.Samples, series.Sample{T: t, V: series.StaleNaN})
			}
		}
		i := sort.Search(len(ser.Samples), func(i int) bool { return ser.Samples[i].T >= cut })
		ser.Samples = slices.Delete(ser.Samples, 0, i)
		if len(ser.Samples) == 0 {
			delete(page, key)
			s.byMetric[ser.Metric] = slices.DeleteFunc(s.byMetric[ser.Metric], func(x *series.Series) bool { return x == ser })
		}
	}
}

func value(t dto.MetricType, m *dto.Metric) (float64, bool) {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue(), true
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue(), true
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), true
	}
	return math.NaN(), false
}

// labels returns m's labels and instance (unless the page sets its own,
// as Prometheus' honor_labels keeps it) sorted by name, as twin series
// keep them.
func labels(m *dto.Metric, instance string) series.Labels {
	ls := make(series.Labels, 0, len(m.GetLabel())+1)
	own := false
	for _, l := range m.GetLabel() {
		ls = append(ls, series.Label{Name: l.GetName(), Value: l.GetValue()})
		own = own || l.GetName() == "instance"
	}
	if !own {
		ls = append(ls, series.Label{Name: "instance", Value: instance})
	}
	slices.SortFunc(ls, func(a, b series.Label) int { return strings.Compare(a.Name, b.Name) })
	return ls
}

// Now returns the store's clock.
func (s *Store) Now() time.Time { return s.opts.Now() }

// Select returns the series of metric, shared: call it inside With.
func (s *Store) Select(metric string) []*series.Series { return s.byMetric[metric] }

// Logs returns nothing: kernel log lines are the local target's own
// business, not the exporter's.
func (s *Store) Logs() []series.LogLine { return nil }
