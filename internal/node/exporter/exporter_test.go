package exporter

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/twin"
	"github.com/gpuchaos/gpuchaos/internal/twin/twingpu"
)

// twinSource returns a source over one node of a fresh twin, with the
// access the test also uses to read the twin's own series.
func twinSource(t *testing.T) (twingpu.Access, gpu.Source) {
	t.Helper()
	tw, err := twin.New(twin.Options{Seed: 11, ScrapeInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Sleep(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	access := twingpu.Locked(tw)
	src, err := twingpu.New(access, "gpu-node-0")
	if err != nil {
		t.Fatal(err)
	}
	return access, src
}

func TestExpositionOnTwin(t *testing.T) {
	t.Parallel()
	access, src := twinSource(t)
	a := newAgent(t, Options{Source: src, SourceName: "twin", Hostname: "gpu-node-0"})
	a.Collect(context.Background())
	fams := scrape(t, a)
	checked := 0
	access(func(tw *twin.Twin) {
		for _, m := range gpuMetrics {
			for _, se := range tw.Select(m.name) {
				if se.Labels.Get("Hostname") != "gpu-node-0" {
					continue
				}
				// The twin's own labels are dcgm-exporter's: the agent's
				// series must carry exactly the same set and value.
				want := map[string]string{}
				for _, l := range se.Labels {
					want[l.Name] = l.Value
				}
				got, ok := find(fams, m.name, want)
				if !ok {
					t.Errorf("%s%s missing from the page", m.name, se.Labels)
					continue
				}
				if len(got.GetLabel()) != len(dcgmLabels) || joined(labelNames(got)) != joined(dcgmLabels) {
					t.Errorf("%s labels %v, want %v", m.name, labelNames(got), dcgmLabels)
				}
				if v := se.Samples[len(se.Samples)-1].V; value(got) != v {
					t.Errorf("%s%s = %v, twin has %v", m.name, se.Labels, value(got), v)
				}
				checked++
			}
		}
	})
	if checked != len(gpuMetrics)*8 {
		t.Errorf("checked %d series, want %d", checked, len(gpuMetrics)*8)
	}
}

func TestEventsOnThePage(t *testing.T) {
	t.Parallel()
	_, src := twinSource(t)
	a := newAgent(t, Options{Source: src, Hostname: "gpu-node-0"})
	a.Collect(context.Background())
	uuid3 := a.Devices()[3].UUID

	a.RecordXID(3, 79)
	a.RecordXID(3, 48)
	a.RecordXID(3, 48)
	a.RecordXID(42, 13) // a GPU the agent does not know: still counted
	a.RecordBurn(1, "bf16", 781.5, 0)
	a.RecordBurn(1, "bf16", 790.25, 2)
	a.RecordBurn(1, "tf32", 380, 1)
	a.RecordInjection("hardware.xid")
	a.RecordInjection("hardware.xid")
	a.SetFault("exhaustion.vram", 2, true)
	a.SetFault("network.loss", -1, true)
	a.SetFault("exhaustion.sm-burn", 1, true)
	a.SetFault("exhaustion.sm-burn", 1, false)
	fams := scrape(t, a)

	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
		absent bool
	}{
		{"last xid is DCGM's field", "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "3", "UUID": uuid3}, 48, false},
		{"no xid is 0", "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "2"}, 0, false},
		{"xid 48 counted twice", "gpuchaos_xid_events_total", map[string]string{"gpu": "3", "UUID": uuid3, "code": "48"}, 2, false},
		{"xid 79 counted once", "gpuchaos_xid_events_total", map[string]string{"gpu": "3", "code": "79"}, 1, false},
		{"unknown gpu counted", "gpuchaos_xid_events_total", map[string]string{"gpu": "42", "UUID": "", "code": "13"}, 1, false},
		{"burn tflops is the last", "gpuchaos_burn_tflops", map[string]string{"gpu": "1", "dtype": "bf16"}, 790.25, false},
		{"burn tflops per dtype", "gpuchaos_burn_tflops", map[string]string{"gpu": "1", "dtype": "tf32"}, 380, false},
		{"burn errors add up", "gpuchaos_burn_errors_total", map[string]string{"gpu": "1"}, 3, false},
		{"injections", "gpuchaos_injections_total", map[string]string{"fault": "hardware.xid"}, 2, false},
		{"active fault on a gpu", "gpuchaos_active_faults", map[string]string{"fault": "exhaustion.vram", "gpu": "2"}, 1, false},
		{"active fault on the node", "gpuchaos_active_faults", map[string]string{"fault": "network.loss", "gpu": ""}, 1, false},
		{"recovered fault gone", "gpuchaos_active_faults", map[string]string{"fault": "exhaustion.sm-burn"}, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := find(fams, tc.metric, tc.labels)
			if tc.absent {
				if ok {
					t.Errorf("%s%v present, want absent", tc.metric, tc.labels)
				}
				return
			}
			if !ok {
				t.Fatalf("%s%v missing", tc.metric, tc.labels)
			}
			if value(m) != tc.want {
				t.Errorf("%s%v = %v, want %v", tc.metric, tc.labels, value(m), tc.want)
			}
		})
	}
	if typ := fams["gpuchaos_xid_events_total"].GetType().String(); typ != "COUNTER" {
		t.Errorf("gpuchaos_xid_events_total is a %s, want COUNTER", typ)
	}
}

func TestStartSamplesAndStops(t *testing.T) {
	t.Parallel()
	_, src := twinSource(t)
	a := newAgent(t, Options{Source: src, Hostname: "n", Interval: 20 * time.Millisecond})
	srv := httptest.NewServer(a)
	defer srv.Close()
	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("/healthz"); c != http.StatusServiceUnavailable {
		t.Errorf("healthz before Start: %d, want 503", c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for !a.Running() || !strings.Contains(string(render(t, a)), "DCGM_FI_DEV_GPU_TEMP{") {
		if time.Now().After(deadline) {
			t.Fatal("no sample within 5s of Start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c := get("/healthz"); c != http.StatusOK {
		t.Errorf("healthz while running: %d, want 200", c)
	}
	if err := a.Start(ctx); err == nil {
		t.Error("second Start succeeded")
	}
	time.Sleep(60 * time.Millisecond) // a few ticks
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after cancel")
	}
	if c := get("/nope"); c != http.StatusNotFound {
		t.Errorf("/nope: %d, want 404", c)
	}
	resp, err := http.Post(srv.URL+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", resp.StatusCode)
	}
}

// stuckSource blocks every Sample for longer than the interval, so ticks
// are missed.
type stuckSource struct{ gpu.Source }

func (s stuckSource) Sample(ctx context.Context, i int) (gpu.Sample, error) {
	select {
	case <-time.After(35 * time.Millisecond):
	case <-ctx.Done():
		return gpu.Sample{}, ctx.Err()
	}
	return s.Source.Sample(ctx, i)
}

func TestMissedTicksAreCounted(t *testing.T) {
	t.Parallel()
	_, src := twinSource(t)
	// Eight GPUs at 35 ms each take 280 ms against a 50 ms interval.
	a := newAgent(t, Options{Source: stuckSource{src}, Hostname: "n", Interval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if a.MissedTicks() == 0 {
		t.Error("no missed ticks counted though every pass overran several intervals")
	}
	m, ok := find(parse(t, render(t, a)), "gpuchaos_agent_missed_ticks_total", nil)
	if !ok || value(m) != float64(a.MissedTicks()) {
		t.Errorf("gpuchaos_agent_missed_ticks_total does not show %d", a.MissedTicks())
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	_, src := twinSource(t)
	tests := []struct {
		name string
		opts Options
	}{
		{"no source", Options{}},
		{"negative interval", Options{Source: src, Interval: -time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(context.Background(), tc.opts); err == nil {
				t.Error("New succeeded")
			}
		})
	}
	_, closed := twinSource(t)
	_ = closed.Close()
	if _, err := New(context.Background(), Options{Source: closed}); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("closed source: %v, want ErrClosed", err)
	}
}

// FuzzLabelValues checks that any label value (a hostname, a model name,
// a fault id from a user's file) given to the agent leaves a page
// Prometheus' parser reads back to the same value.
func FuzzLabelValues(f *testing.F) {
	for _, s := range []string{"gpu-node-0", `quo"te`, `back\slash`, "new\nline", "ünïcode", ""} {
		f.Add(s, 1.5)
	}
	f.Fuzz(func(t *testing.T, v string, x float64) {
		// The text format carries UTF-8: an invalid byte becomes U+FFFD,
		// so every input is checked rather than skipped.
		v = strings.ToValidUTF8(v, "\uFFFD")
		// An empty Hostname would mean this machine's.
		a := newAgent(t, Options{Source: &placedSource{nodes: []int{0}}, Hostname: "n", Version: v, SourceName: v})
		a.RecordBurn(0, v, x, 0)
		fams := parse(t, render(t, a))
		if m, ok := find(fams, "gpuchaos_agent_info", map[string]string{"source": v, "version": v}); !ok {
			t.Errorf("no gpuchaos_agent_info with source and version %q", v)
		} else if value(m) != 1 {
			t.Errorf("gpuchaos_agent_info = %v", value(m))
		}
		m, ok := find(fams, "gpuchaos_burn_tflops", map[string]string{"gpu": "0", "dtype": v})
		if !ok {
			t.Fatalf("label read back other than %q", v)
		}
		if got := value(m); got != x && !(math.IsNaN(x) && math.IsNaN(got)) {
			t.Errorf("value read back as %v, want %v", got, x)
		}
	})
}
