package scrape

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// exporter serves a page the test changes, and counts fetches.
type exporter struct {
	mu      sync.Mutex
	page    string
	status  int
	fetches atomic.Int64
}

func (e *exporter) set(status int, page string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status, e.page = status, page
}

func (e *exporter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	e.fetches.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	w.WriteHeader(e.status)
	_, _ = w.Write([]byte(e.page))
}

// clock is a settable time for the store.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newStore(t *testing.T, e *exporter) (*Store, *clock) {
	t.Helper()
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	c := &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	s, err := New(Options{URL: srv.URL + "/metrics", Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

const gpuLabels = `gpu="0",UUID="GPU-a",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H200",Hostname="node-a"`

func page(lines ...string) string {
	return strings.Join(lines, "\n") + "\n"
}

// observeAt moves the clock to step evaluation intervals (15 s, the
// detectors' rule interval) after the start, scrapes through the probe and
// returns the observation.
func observeAt(t *testing.T, p probe.Probe, c *clock, start time.Time, step int) probe.Observation {
	t.Helper()
	c.t = start.Add(time.Duration(step) * probe.EvalInterval)
	obs, err := p.Observe(context.Background())
	if err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	return obs
}

func TestProbesOverScrapedPages(t *testing.T) {
	t.Parallel()
	fb := func(v string) string {
		return page("# TYPE DCGM_FI_DEV_FB_USED gauge", "DCGM_FI_DEV_FB_USED{"+gpuLabels+"} "+v)
	}
	xid := func(v string) string {
		return page("# TYPE DCGM_FI_DEV_XID_ERRORS gauge", "DCGM_FI_DEV_XID_ERRORS{"+gpuLabels+"} "+v)
	}
	cases := []struct {
		name  string
		spec  v1alpha1.ProbeSpec
		pages []string // one per evaluation interval
		holds []bool   // after each page
	}{
		{
			name:  "threshold with for holds once every step of the window is over",
			spec:  v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: "DCGM_FI_DEV_FB_USED", Op: ">", Value: 100, For: v1alpha1.Duration{Duration: 2 * probe.EvalInterval}}},
			pages: []string{fb("10"), fb("500"), fb("500"), fb("500"), fb("10")},
			holds: []bool{false, false, false, true, false},
		},
		{
			name:  "threshold label matchers pick the GPU",
			spec:  v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: "DCGM_FI_DEV_FB_USED", Labels: map[string]string{"gpu": "1"}, Op: ">", Value: 100}},
			pages: []string{fb("500")},
			holds: []bool{false},
		},
		{
			name:  "built-in detector reads the page",
			spec:  v1alpha1.ProbeSpec{Detector: "dcgm-xid-errors"},
			pages: []string{xid("0"), xid("79"), xid("79")},
			holds: []bool{false, true, true},
		},
		{
			name:  "a series that leaves the page is absent at once, through its staleness marker",
			spec:  v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: "DCGM_FI_DEV_FB_USED", Absent: true}},
			pages: []string{fb("10"), page("# TYPE other gauge", "other 1"), fb("10")},
			holds: []bool{false, true, false},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := &exporter{}
			s, c := newStore(t, e)
			p, err := probe.FromSpec("p", tc.spec, s)
			if err != nil {
				t.Fatal(err)
			}
			sp := Probe(p, s)
			start := c.t
			for i, pg := range tc.pages {
				e.set(http.StatusOK, pg)
				if got := observeAt(t, sp, c, start, i).Holds; got != tc.holds[i] {
					t.Errorf("after page %d: holds %v, want %v", i, got, tc.holds[i])
				}
			}
		})
	}
}

func TestDetectorNamesTheGPU(t *testing.T) {
	t.Parallel()
	e := &exporter{}
	e.set(http.StatusOK, page("DCGM_FI_DEV_XID_ERRORS{"+gpuLabels+"} 48"))
	s, c := newStore(t, e)
	p, err := probe.FromSpec("xid", v1alpha1.ProbeSpec{Detector: "dcgm-xid-errors"}, s)
	if err != nil {
		t.Fatal(err)
	}
	obs := observeAt(t, Probe(p, s), c, c.t, 0)
	if !obs.Holds || len(obs.Subjects) != 1 {
		t.Fatalf("observation %+v: want one subject", obs)
	}
	if sub := obs.Subjects[0]; sub.Node != "node-a" || sub.GPU != "0" || sub.UUID != "GPU-a" {
		t.Errorf("subject %+v, want node-a gpu 0 GPU-a", sub)
	}
}

func TestFailedScrapes(t *testing.T) {
	t.Parallel()
	e := &exporter{}
	e.set(http.StatusServiceUnavailable, "down\n")
	s, c := newStore(t, e)
	absent, err := probe.FromSpec("gone", v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: "DCGM_FI_DEV_FB_USED", Absent: true}}, s)
	if err != nil {
		t.Fatal(err)
	}
	p := Probe(absent, s)
	start := c.t
	// Never scraped: the failure is the answer, naming the page.
	if _, err := p.Observe(context.Background()); err == nil || !strings.Contains(err.Error(), s.URL()) {
		t.Fatalf("observe before any good scrape: err %v, want one naming %s", err, s.URL())
	}
	e.set(http.StatusOK, page("DCGM_FI_DEV_FB_USED{"+gpuLabels+"} 5"))
	if observeAt(t, p, c, start, 1).Holds {
		t.Fatal("series on the page read as absent")
	}
	// The exporter stops answering: no error, the series go stale.
	e.set(http.StatusInternalServerError, "oops\n")
	if !observeAt(t, p, c, start, 2).Holds {
		t.Error("series of an exporter that stopped answering still read as present")
	}
}

func TestScrapeRateAndRetention(t *testing.T) {
	t.Parallel()
	e := &exporter{}
	e.set(http.StatusOK, page("up_metric 1"))
	s, c := newStore(t, e)
	ctx := context.Background()
	for range 3 {
		if err := s.Scrape(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.fetches.Load(); n != 1 {
		t.Errorf("three scrapes at one instant fetched %d times, want 1", n)
	}
	for i := range 40 {
		c.t = c.t.Add(time.Minute)
		if err := s.Scrape(ctx); err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
	}
	var n int
	s.With(func() { n = len(s.Select("up_metric")[0].Samples) })
	// The store's clock is the test's, so the count is exact: the samples
	// of the last DefaultRetention, both ends included.
	if want := int(DefaultRetention/time.Minute) + 1; n != want {
		t.Errorf("kept %d samples of one a minute, want the last %v's, both ends included (%d)", n, DefaultRetention, want)
	}
	e.set(http.StatusOK, page("other 1"))
	for range 32 {
		c.t = c.t.Add(time.Minute)
		if err := s.Scrape(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.With(func() {
		if got := s.Select("up_metric"); len(got) != 0 {
			t.Errorf("a series gone for longer than the retention is still kept: %d samples", len(got[0].Samples))
		}
	})
}

// FuzzStorePages stores arbitrary pages: whatever the parser accepts must
// land without panicking, and every stored series must stay in time order.
func FuzzStorePages(f *testing.F) {
	f.Add(page("# TYPE DCGM_FI_DEV_FB_USED gauge", "DCGM_FI_DEV_FB_USED{"+gpuLabels+"} 5"), "x 1\n")
	f.Add("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n", "")
	f.Add("a{b=\"c\"} NaN\na{b=\"d\"} +Inf\n", "a{b=\"c\"} 1\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		s, err := New(Options{URL: "http://unused"})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Unix(1e9, 0)
		for i, pg := range []string{a, b, a} {
			fams, err := Parse(strings.NewReader(pg))
			if err != nil {
				fams = nil
			}
			s.add(t0.Add(time.Duration(i)*time.Second), "fuzz:1", fams)
		}
		for _, list := range s.byMetric {
			for _, ser := range list {
				for i := 1; i < len(ser.Samples); i++ {
					if ser.Samples[i].T < ser.Samples[i-1].T {
						t.Fatalf("series %s out of order", ser.Metric)
					}
				}
			}
		}
	})
}

// TestSeveralPages scrapes two pages serving the same series, as two ranks
// of a job do: each keeps its own series by its instance label, and a page
// that stops answering leaves only its own series stale.
func TestSeveralPages(t *testing.T) {
	t.Parallel()
	a, b := &exporter{}, &exporter{}
	step := func(v string) string { return page(`gpuchaos_job_step_total{job="train"} ` + v) }
	a.set(http.StatusOK, step("10"))
	b.set(http.StatusOK, step("12"))
	sa, sb := httptest.NewServer(a), httptest.NewServer(b)
	t.Cleanup(sa.Close)
	t.Cleanup(sb.Close)
	c := &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	s, err := New(Options{URL: sa.URL + "/metrics", More: []string{sb.URL + "/metrics"}, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Scrape(ctx); err != nil {
		t.Fatal(err)
	}
	instances := func() map[string]float64 {
		out := map[string]float64{}
		s.With(func() {
			for _, ser := range s.Select("gpuchaos_job_step_total") {
				out[ser.Labels.Get("instance")] = ser.Samples[len(ser.Samples)-1].V
			}
		})
		return out
	}
	got := instances()
	ia, ib := instanceOf(sa.URL+"/metrics"), instanceOf(sb.URL+"/metrics")
	if len(got) != 2 || got[ia] != 10 || got[ib] != 12 {
		t.Fatalf("series by instance = %v, want %s=10 and %s=12", got, ia, ib)
	}
	b.set(http.StatusServiceUnavailable, "down\n")
	c.t = c.t.Add(time.Second)
	if err := s.Scrape(ctx); err == nil || !strings.Contains(err.Error(), sb.URL) {
		t.Errorf("scrape with one page down: err %v, want one naming %s", err, sb.URL)
	}
	got = instances()
	if got[ia] != 10 {
		t.Errorf("the answering page's series = %v, want 10", got[ia])
	}
	if v := got[ib]; !series.IsStale(v) {
		t.Errorf("the silent page's series = %v, want a staleness marker", v)
	}
	if _, err := New(Options{URL: sa.URL, More: []string{""}}); err == nil {
		t.Error("an empty extra url was accepted")
	}
}

// TestHungPage: a page that accepts the connection and never answers (the
// metrics thread of a SIGSTOPped rank) costs one scrape its timeout, goes
// stale, and does not keep the other pages from being stored.
func TestHungPage(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	ok := &exporter{page: "gpuchaos_job_step_total{job=\"j\"} 7\n", status: http.StatusOK}
	okSrv := httptest.NewServer(ok)
	defer okSrv.Close()
	for _, order := range [][]string{{hung.URL, okSrv.URL}, {okSrv.URL, hung.URL}} {
		s, err := New(Options{URL: order[0], More: order[1:], Timeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = s.Scrape(context.Background())
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), hung.URL) {
			t.Errorf("scrape error %v, want one naming the hung page", err)
		}
		// Ended by the timeout: not before it, and well within a limit no
		// load reaches.
		if took < 200*time.Millisecond || took > 10*time.Second {
			t.Errorf("scrape took %s with a 200ms timeout", took)
		}
		var got []float64
		s.With(func() {
			for _, se := range s.Select("gpuchaos_job_step_total") {
				for _, x := range se.Samples {
					got = append(got, x.V)
				}
			}
		})
		if len(got) != 1 || got[0] != 7 {
			t.Errorf("pages %v: stored %v, want the answering page's 7", order, got)
		}
	}
}

// TestEndlessPage: a page that never ends is refused once it passes the
// limit, naming the page and the limit, instead of filling memory.
func TestEndlessPage(t *testing.T) {
	t.Parallel()
	line := []byte("# a comment the parser skips\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for r.Context().Err() == nil {
			if _, err := w.Write(bytes.Repeat(line, 4096)); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	_, err := Fetch(context.Background(), srv.Client(), srv.URL)
	if err == nil || !strings.Contains(err.Error(), srv.URL) || !strings.Contains(err.Error(), "larger than the limit of 64 MiB") {
		t.Fatalf("fetch of an endless page: %v, want the limit named", err)
	}
}
