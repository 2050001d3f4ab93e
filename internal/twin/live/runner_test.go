package live

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/common/expfmt"
	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/fault/twinfault"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
	"github.com/gpuchaos/gpuchaos/internal/node/exposition"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newRunner(t *testing.T, opts Options) *Runner {
	t.Helper()
	r, err := New(t.Context(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// start runs r.Start until the test ends and waits for it to return.
func start(t *testing.T, r *Runner) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	testutil.Eventually(t, 10*time.Second, "the runner to start", r.Running)
}

// scrape fetches /metrics from h and parses it.
func scrape(t *testing.T, h http.Handler) map[string]*expFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != exposition.ContentType {
		t.Errorf("Content-Type %q, want %q", ct, exposition.ContentType)
	}
	fams, _, err := parseExposition(rec.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// gpuOf finds one GPU in the runner's inventory.
func gpuOf(t *testing.T, r *Runner, node string, i int) inventory.Ref {
	t.Helper()
	for _, n := range r.Inventory().Nodes {
		for _, g := range n.GPUs {
			if n.Name == node && g.Index == i {
				return inventory.Ref{Kind: catalog.ScopeGPU, Node: node, GPU: i, UUID: g.UUID, PCI: g.PCI}
			}
		}
	}
	t.Fatalf("no GPU %s/%d", node, i)
	return inventory.Ref{}
}

// injector plays a catalogue fault through the runner, as the live engine
// target does.
func injector(t *testing.T, r *Runner, id string) (*twinfault.Injector, catalog.Values) {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("fault %s not in the catalogue", id)
	}
	v, err := f.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	return twinfault.New(f, r), v
}

func hasGPU(f *expFamily, node string, gpu int) bool {
	if f == nil {
		return false
	}
	for _, s := range f.samples {
		if s.labels["Hostname"] == node && s.labels["gpu"] == strconv.Itoa(gpu) {
			return true
		}
	}
	return false
}

func TestMetricsPage(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{Warmup: 2 * time.Minute})
	fams := scrape(t, r)

	// Every series the twin has is on the page with its newest value.
	var metrics int
	r.WithTwin(func(tw *twin.Twin) {
		seen := map[string]bool{}
		for _, s := range tw.Series() {
			if n := len(s.Samples); n == 0 || series.IsStale(s.Samples[n-1].V) {
				// Gone from its exporter's page (a pod's waiting reason
				// while it runs, a taint not set): not on the page either.
				continue
			}
			if !seen[s.Metric] {
				seen[s.Metric] = true
				metrics++
			}
			f := fams[s.Metric]
			if f == nil {
				t.Errorf("%s missing from the page", s.Metric)
				continue
			}
			want := s.Samples[len(s.Samples)-1].V
			found := false
			for _, smp := range f.samples {
				if mapsEqual(smp.labels, labelMap(s.Labels)) {
					found = true
					if smp.value != want {
						t.Errorf("%s%s = %v on the page, newest sample %v", s.Metric, s.LabelKey(), smp.value, want)
					}
				}
			}
			if !found {
				t.Errorf("%s%s missing from the page", s.Metric, s.LabelKey())
			}
		}
	})
	if len(fams) != metrics {
		t.Errorf("%d metrics on the page, the twin has %d", len(fams), metrics)
	}
	for _, tc := range []struct{ metric, typ string }{
		{"DCGM_FI_DEV_GPU_TEMP", "gauge"},
		{"DCGM_FI_DEV_XID_ERRORS", "gauge"},
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter"},
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter"},
		{"gpuchaos_job_restarts_total", "counter"},
		{"kube_node_status_allocatable", "gauge"},
	} {
		if f := fams[tc.metric]; f == nil || f.typ != tc.typ || f.help == "" {
			t.Errorf("%s: family %+v, want type %s with help", tc.metric, f, tc.typ)
		}
	}
	if n := len(fams["DCGM_FI_DEV_GPU_TEMP"].samples); n != 16 {
		t.Errorf("%d GPU temperatures, want 16", n)
	}
}

// TestOffBus checks that a GPU off the bus disappears from the page, as
// from dcgm-exporter's, and comes back after recovery.
func TestOffBus(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{Warmup: time.Minute})
	ref := gpuOf(t, r, "gpu-node-0", 3)
	inj, v := injector(t, r, "hardware.fallen-off-bus")
	advance := func(d time.Duration) {
		r.WithTwin(func(tw *twin.Twin) {
			if err := tw.Sleep(t.Context(), d); err != nil {
				t.Fatal(err)
			}
		})
	}
	if err := inj.Inject(t.Context(), "k", ref, v); err != nil {
		t.Fatal(err)
	}
	advance(2 * time.Second)
	fams := scrape(t, r)
	for name, f := range fams {
		if hasGPU(f, "gpu-node-0", 3) {
			t.Errorf("%s still shows the GPU off the bus", name)
		}
	}
	if f := fams["DCGM_FI_DEV_GPU_TEMP"]; len(f.samples) != 15 || !hasGPU(f, "gpu-node-0", 4) {
		t.Errorf("%d GPU temperatures while one GPU is off the bus, want the other 15", len(f.samples))
	}
	if err := inj.Recover(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	advance(2 * time.Second)
	if !hasGPU(scrape(t, r)["DCGM_FI_DEV_GPU_TEMP"], "gpu-node-0", 3) {
		t.Error("GPU not back on the page after recovery")
	}
}

func labelMap(ls series.Labels) map[string]string {
	m := map[string]string{}
	for _, l := range ls {
		m[l.Name] = l.Value
	}
	return m
}

// FuzzLabelRoundTrip checks that any label value survives escaping and the
// text format's rules for reading it back.
func FuzzLabelRoundTrip(f *testing.F) {
	for _, s := range []string{"", "H200", `a"b`, `a\b`, "a\nb", `\\n"`, "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var b exposition.Builder
		b.Family("m", "h", exposition.Gauge)
		b.AddKV(1, "l", v)
		var page strings.Builder
		if _, err := expfmt.MetricFamilyToText(&page, b.Families()[0]); err != nil {
			t.Fatal(err)
		}
		fams, _, err := parseExposition(strings.NewReader(page.String()))
		if err != nil {
			t.Fatalf("value %q: %v\n%s", v, err, page.String())
		}
		if got := fams["m"].samples[0].labels["l"]; got != v {
			t.Fatalf("value %q read back as %q", v, got)
		}
	})
}

func TestStart(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{Speed: 20, Tick: 10 * time.Millisecond})
	h := httptest.NewRecorder()
	r.ServeHTTP(h, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if h.Code != http.StatusServiceUnavailable {
		t.Errorf("/healthz before Start: %d, want 503", h.Code)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	testutil.Eventually(t, 10*time.Second, "Start", r.Running)
	if err := r.Start(ctx); err == nil {
		t.Error("a second Start while running succeeded")
	}
	h = httptest.NewRecorder()
	r.ServeHTTP(h, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if h.Code != http.StatusOK || h.Body.String() != "ok\n" {
		t.Errorf("/healthz while running: %d %q", h.Code, h.Body)
	}
	// Holding the lock for six ticks makes Start miss some: at least two,
	// and more only on a machine too busy to run it for longer. Its pace
	// is TestStartKeepsPace's.
	time.Sleep(150 * time.Millisecond)
	r.WithTwin(func(*twin.Twin) { time.Sleep(60 * time.Millisecond) })
	time.Sleep(150 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start returned %v after cancel, want nil", err)
	}
	if r.Running() {
		t.Error("Running after Start returned")
	}
	if n := r.MissedTicks(); n < 2 {
		t.Errorf("%d missed ticks counted after blocking the runner for six ticks, want at least 2", n)
	}
}

// TestStartKeepsPace runs the runner in a synctest bubble, whose clock
// moves only when every goroutine in it waits, so the machine's load
// cannot slow it: the twin advances exactly speed times the wall time
// from New to the last tick, and no tick is missed.
func TestStartKeepsPace(t *testing.T) {
	t.Parallel()
	const speed, every = 20, 10 * time.Millisecond
	for _, run := range []time.Duration{every / 2, 305 * time.Millisecond, 10*time.Second + 5*time.Millisecond} {
		t.Run(run.String(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				w0 := time.Now()
				r := newRunner(t, Options{Speed: speed, Tick: every})
				v0 := r.Now()
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- r.Start(ctx) }()
				time.Sleep(run)
				now := time.Now().UnixNano()
				last := time.Unix(0, now-now%int64(every)) // the last tick, on the grid
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("Start returned %v after cancel, want nil", err)
				}
				want := time.Duration(speed * max(last.Sub(w0), 0))
				if got := r.Now().Sub(v0); got != want {
					t.Errorf("the twin advanced %s in %s of wall time at speed %d, want %s", got, run, speed, want)
				}
				if n := r.MissedTicks(); n != 0 {
					t.Errorf("%d missed ticks, want none", n)
				}
			})
		})
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	const keep = 5 * time.Second
	r := newRunner(t, Options{Warmup: time.Minute, Retention: keep, Speed: 50, Tick: 10 * time.Millisecond})
	oldest := func() time.Duration {
		var age time.Duration
		r.WithTwin(func(tw *twin.Twin) {
			for _, s := range tw.Series() {
				if len(s.Samples) > 1 {
					age = max(age, tw.Now().Sub(s.Samples[0].Time()))
				}
			}
		})
		return age
	}
	if age := oldest(); age > keep {
		t.Errorf("after the warm-up the oldest sample is %s old, want at most %s", age, keep)
	}
	start(t, r)
	v0 := r.Now()
	testutil.Eventually(t, 10*time.Second, "20s of virtual time", func() bool { return r.Now().Sub(v0) > 20*time.Second })
	// Trims come every tenth of the retention; one tick (0.5 s virtual)
	// may pass on top.
	if age, limit := oldest(), keep+keep/trimFraction+time.Second; age > limit {
		t.Errorf("running, the oldest sample is %s old, want at most %s", age, limit)
	}
}

// TestConcurrent scrapes, injects, recovers and reads the twin from several
// goroutines while Start advances it; run with -race.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{Warmup: time.Minute, Speed: 10, Tick: 5 * time.Millisecond})
	start(t, r)
	srv := httptest.NewServer(r)
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()

	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 4 {
		wg.Go(func() {
			for range 15 {
				resp, err := client.Get(srv.URL + "/metrics")
				if err != nil {
					errs <- err
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					errs <- err
					return
				}
				if _, _, err := parseExposition(strings.NewReader(string(body))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	inj, v := injector(t, r, "hardware.fallen-off-bus")
	var refs []inventory.Ref
	for i := range 4 {
		refs = append(refs, gpuOf(t, r, "gpu-node-1", i))
	}
	wg.Go(func() {
		for i, ref := range refs {
			key := "off-" + strconv.Itoa(i)
			if err := inj.Inject(context.Background(), key, ref, v); err != nil {
				errs <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
			if err := inj.Recover(context.Background(), key); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Go(func() {
		for range 50 {
			_ = r.Now()
			_ = r.Inventory()
			r.WithTwin(func(tw *twin.Twin) { _ = len(tw.Select("DCGM_FI_DEV_GPU_TEMP")) + len(tw.Logs()) })
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	r.WithTwin(func(tw *twin.Twin) {
		if a := tw.Active(); len(a) != 0 {
			t.Errorf("still applied after every recovery: %v", a)
		}
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		opts Options
		want string
		is   error
	}{
		{"negative speed", t.Context(), Options{Speed: -1}, "speed must be a positive number", nil},
		{"NaN speed", t.Context(), Options{Speed: math.NaN()}, "speed must be a positive number", nil},
		{"negative tick", t.Context(), Options{Tick: -time.Second}, "tick must not be negative", nil},
		{"negative warm-up", t.Context(), Options{Warmup: -time.Second}, "warm-up: must not be negative", nil},
		{"speed past the limit", t.Context(), Options{Speed: 1e30}, "speed must be at most 3600, got 1e+30", nil},
		{"speed just past the limit", t.Context(), Options{Speed: MaxSpeed + 0.5}, "speed must be at most 3600", nil},
		{"warm-up past the limit", t.Context(), Options{Warmup: 10000 * time.Hour}, "warm-up: at most 24h0m0s, got 10000h0m0s", nil},
		{"invalid cluster", t.Context(), Options{Twin: twin.Options{Spec: twin.ClusterSpec{Nodes: twin.NodesSpec{Model: "Z9000"}}}}, "Z9000", nil},
		{"warm-up cancelled", cancelled, Options{Warmup: time.Hour}, "warm up for 1h0m0s", context.Canceled},
		{"start and warm-up", t.Context(), Options{Twin: twin.Options{Start: time.Now().Add(-time.Hour)}, Warmup: time.Minute},
			"and a warm-up (1m0s) both say how long to run before now; give one", nil},
		{"start in the future", t.Context(), Options{Twin: twin.Options{Start: time.Now().Add(time.Hour)}}, "is in the future", nil},
		{"start too long ago", t.Context(), Options{Twin: twin.Options{Start: time.Now().Add(-25 * time.Hour)}}, "warm-up from the start time: at most 24h0m0s", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.ctx, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("New: %v, want it to wrap %v", err, tc.is)
			}
		})
	}
	t.Run("start", func(t *testing.T) {
		// A start off the second: the twin keeps its phase, and reads
		// the wall clock once warm.
		start := time.Now().Add(-3 * time.Minute).Truncate(time.Second).Add(123 * time.Millisecond)
		before := time.Now()
		r, err := New(t.Context(), Options{Twin: twin.Options{Start: start}})
		if err != nil {
			t.Fatal(err)
		}
		if now := r.Now(); now.Before(before) {
			t.Errorf("twin time %s after the warm-up, before the wall clock's %s when New was called", now, before)
		}
		r.WithTwin(func(tw *twin.Twin) {
			for _, smp := range tw.Select("DCGM_FI_DEV_GPU_TEMP")[0].Samples {
				if d := smp.Time().Sub(start); d%DefaultScrapeInterval != 0 {
					t.Fatalf("sample at %s, %s after the start: off its scrape grid", smp.Time().Format(time.RFC3339Nano), d)
				}
			}
		})
	})
	t.Run("defaults", func(t *testing.T) {
		before := time.Now()
		r, err := New(t.Context(), Options{Warmup: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// The twin's clock reads the wall clock after the warm-up.
		if now := r.Now(); now.Before(before.Add(-time.Second)) || now.After(time.Now()) {
			t.Errorf("twin time %s after the warm-up, wall clock %s", now, before)
		}
		r.WithTwin(func(tw *twin.Twin) {
			s := tw.Select("DCGM_FI_DEV_GPU_TEMP")[0].Samples
			if d := s[len(s)-1].Time().Sub(s[len(s)-2].Time()); d != DefaultScrapeInterval {
				t.Errorf("samples %s apart, want %s", d, DefaultScrapeInterval)
			}
		})
	})
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	tests := []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/metrics", http.StatusOK},
		{http.MethodHead, "/metrics", http.StatusOK},
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
		{http.MethodGet, "/", http.StatusNotFound},
		{http.MethodGet, "/metrics/x", http.StatusNotFound},
	}
	for _, tc := range tests {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, rec.Code, tc.code)
		}
	}
}

// TestAdvanceIsBounded: however far behind the wall clock the twin falls
// (a big cluster at top speed, a stalled host), one advance simulates at
// most the catch-up limit and gives the rest up, so the lock is never held
// for ever longer catch-ups and the anchor arithmetic cannot overflow.
func TestAdvanceIsBounded(t *testing.T) {
	t.Parallel()
	const tick = 100 * time.Millisecond
	tests := []struct {
		name    string
		speed   float64
		stall   time.Duration // wall time since the last advance
		advance time.Duration // virtual time the advance should simulate
		slipped time.Duration // virtual time it should give up
	}{
		{"a stall within the limit is caught up", 10, 500 * time.Millisecond, 5 * time.Second, 0},
		{"a stall past the limit slips", 10, 3 * time.Second, 10 * time.Second, 20 * time.Second},
		{"an hour's stall at top speed", MaxSpeed, time.Hour, time.Hour, 3599 * time.Hour},
		{"a century's stall at top speed", MaxSpeed, 100 * 365 * 24 * time.Hour, time.Hour, 1 << 62},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRunner(t, Options{Speed: tc.speed, Tick: tick})
			v0, wall := r.Now(), r.wall0.Add(tc.stall)
			if err := r.advance(t.Context(), wall); err != nil {
				t.Fatal(err)
			}
			if got := r.Now().Sub(v0); got != tc.advance {
				t.Errorf("advanced %s after a %s stall at speed %g, want %s", got, tc.stall, tc.speed, tc.advance)
			}
			if got := r.Slipped(); got != tc.slipped {
				t.Errorf("slipped %s, want %s", got, tc.slipped)
			}
			// The next tick is a tick's worth again: the anchor moved.
			v1 := r.Now()
			if err := r.advance(t.Context(), wall.Add(tick)); err != nil {
				t.Fatal(err)
			}
			if got, want := r.Now().Sub(v1), time.Duration(float64(tick)*tc.speed); got != want {
				t.Errorf("the tick after advanced %s, want %s", got, want)
			}
			if got := r.Slipped(); got != tc.slipped {
				t.Errorf("slipped %s after the next tick, want still %s", got, tc.slipped)
			}
		})
	}
}
