package promapi

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// captured maps each query of testdata/README.md to its file and status.
var captured = map[string]struct {
	file   string
	status int
}{
	`ALERTS{alertname="GpuMissing",alertstate="firing"}`:  {"alerts-firing.json", 200},
	`ALERTS{alertname="GpuXidError",alertstate="firing"}`: {"alerts-none.json", 200},
	`DCGM_FI_DEV_GPU_TEMP{Hostname="gpu-node-0"}`:         {"gpu-temp-node-0.json", 200},
	`count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)`:          {"gpu-count.json", 200},
	`gpuchaos_job_up`:       {"job-up.json", 200},
	`scalar(count(up))`:     {"scalar.json", 200},
	`vector(0) / 0`:         {"nan.json", 200},
	`up[3s]`:                {"matrix.json", 200},
	`"gpuchaos"`:            {"string.json", 200},
	`count by (Hostname) (`: {"error-parse.json", 400},
	`DCGM_FI_DEV_GPU_TEMP + on(Hostname) DCGM_FI_DEV_GPU_TEMP`: {"error-execution.json", 422},
}

// fakeProm answers the captured queries with the captured answers, under
// prefix, and records the queries it was sent.
type fakeProm struct {
	*httptest.Server
	mu      sync.Mutex
	queries []string
}

func newFakeProm(t *testing.T, prefix string) *fakeProm {
	t.Helper()
	f := &fakeProm{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != prefix+"/api/v1/query" || r.Method != http.MethodPost {
			http.Error(w, "404 page not found", http.StatusNotFound)
			return
		}
		q := r.FormValue("query")
		f.mu.Lock()
		f.queries = append(f.queries, q)
		f.mu.Unlock()
		c, ok := captured[q]
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"the fake knows no answer to this query"}`))
			return
		}
		body, err := os.ReadFile(filepath.Join("testdata", c.file))
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(c.status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeProm) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.queries)
}

func newClient(t *testing.T, url string) *Client {
	t.Helper()
	c, err := New(Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestQuery(t *testing.T) {
	t.Parallel()
	srv := newFakeProm(t, "/prom")
	c := newClient(t, srv.URL+"/prom")
	tests := []struct {
		name, query string
		want        []Sample
		wantErr     []string
		status      int    // of an *Error
		errType     string // of an *Error
	}{
		{name: "firing alert", query: `ALERTS{alertname="GpuMissing",alertstate="firing"}`, want: []Sample{{Labels: map[string]string{
			"Hostname": "gpu-node-0", "__name__": "ALERTS", "alertname": "GpuMissing", "alertstate": "firing", "severity": "critical"}, Value: 1}}},
		{name: "empty vector", query: `ALERTS{alertname="GpuXidError",alertstate="firing"}`, want: []Sample{}},
		{name: "aggregated vector", query: `count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)`, want: []Sample{
			{Labels: map[string]string{"Hostname": "gpu-node-0"}, Value: 7}, {Labels: map[string]string{"Hostname": "gpu-node-1"}, Value: 8}}},
		{name: "scalar", query: `scalar(count(up))`, want: []Sample{{Labels: map[string]string{}, Value: 1}}},
		{name: "range vector", query: `up[3s]`, wantErr: []string{"range vector", "max_over_time"}},
		{name: "string", query: `"gpuchaos"`, wantErr: []string{"returns a string"}},
		{name: "parse error", query: `count by (Hostname) (`, status: 400, errType: "bad_data",
			wantErr: []string{"prometheus " + srv.URL + "/prom", "query count by (Hostname) (", "bad_data: invalid parameter", "unclosed left parenthesis"}},
		{name: "execution error", query: `DCGM_FI_DEV_GPU_TEMP + on(Hostname) DCGM_FI_DEV_GPU_TEMP`, status: 422, errType: "execution",
			wantErr: []string{"execution: found duplicate series", "many-to-many matching not allowed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := c.Query(t.Context(), tc.query)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Query = %v, want an error", got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				var pe *Error
				if tc.status != 0 && (!errors.As(err, &pe) || pe.Status != tc.status || pe.Type != tc.errType) {
					t.Errorf("error %v: want *Error with HTTP %d and type %s", err, tc.status, tc.errType)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tc.want, func(a, b Sample) bool {
				return a.Value == b.Value && len(a.Labels) == len(b.Labels) && equalMaps(a.Labels, b.Labels)
			}) {
				t.Errorf("Query = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("NaN", func(t *testing.T) {
		t.Parallel()
		got, err := c.Query(t.Context(), `vector(0) / 0`)
		if err != nil || len(got) != 1 || !math.IsNaN(got[0].Value) {
			t.Errorf("Query = %v, %v; want one NaN", got, err)
		}
	})
}

func equalMaps(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestQueryFailures(t *testing.T) {
	t.Parallel()
	notAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html><body>Welcome to nginx</body></html>", http.StatusBadGateway)
	}))
	t.Cleanup(notAPI.Close)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice the client hang up.
		_ = r.ParseForm()
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	gone := httptest.NewServer(http.NotFoundHandler())
	goneURL := gone.URL
	gone.Close()

	tests := []struct {
		name    string
		opts    Options
		wantErr []string
		is      error
	}{
		{"not the API", Options{URL: notAPI.URL}, []string{"prometheus " + notAPI.URL, "query up", "HTTP 502: not a Prometheus API answer: <html><body>Welcome to nginx"}, nil},
		{"timeout", Options{URL: slow.URL, Timeout: 50 * time.Millisecond}, []string{"prometheus " + slow.URL}, context.DeadlineExceeded},
		{"connection refused", Options{URL: goneURL}, []string{"prometheus " + goneURL, "query up", "connection refused"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Query(t.Context(), "up")
			if err == nil {
				t.Fatal("Query succeeded, want an error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
		})
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct{ url, want string }{
		{"http://127.0.0.1:9090", ""},
		{"https://user:secret@prom.example/prometheus", ""},
		{"", "want http:// or https:// and a host"},
		{"127.0.0.1:9090", "prometheus url"},
		{"ftp://prom", "want http:// or https://"},
		{"http://", "and a host"},
		{"http://p:9090/?x=1", "without a query or fragment"},
		{"http://p:x", "prometheus url"},
	}
	for _, tc := range tests {
		c, err := New(Options{URL: tc.url})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("New(%q): %v", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("New(%q) = %v, want an error containing %q", tc.url, err, tc.want)
		}
		if err == nil && strings.Contains(c.URL(), "secret") {
			t.Errorf("URL() = %q shows the password", c.URL())
		}
	}
}

func num(v float64) *float64 { return &v }

// probeCase is one observation of a probe against the captured answers.
type probeCase struct {
	name  string
	spec  v1alpha1.PrometheusProbe
	query string // sent to the server
	holds bool
	value float64
	// anyValue skips the value check (NaN).
	anyValue bool
	subjects []probe.Subject
	detail   string
}

func (tc probeCase) run(t *testing.T, srv *fakeProm) {
	t.Helper()
	p, err := FromSpec(tc.name, tc.spec, srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != tc.name {
		t.Errorf("Name = %q", p.Name())
	}
	if q := p.(*Probe).Query(); q != tc.query {
		t.Errorf("query %q, want %q", q, tc.query)
	}
	obs, err := p.Observe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if obs.Holds != tc.holds {
		t.Fatalf("Holds = %v, want %v (%s)", obs.Holds, tc.holds, obs.Detail)
	}
	if tc.holds && !tc.anyValue && obs.Value != tc.value {
		t.Errorf("Value = %v, want %v", obs.Value, tc.value)
	}
	if tc.subjects != nil && !slices.Equal(obs.Subjects, tc.subjects) {
		t.Errorf("Subjects = %+v, want %+v", obs.Subjects, tc.subjects)
	}
	if tc.detail != "" && obs.Detail != tc.detail {
		t.Errorf("Detail = %q, want %q", obs.Detail, tc.detail)
	}
}

func TestProbes(t *testing.T) {
	t.Parallel()
	srv := newFakeProm(t, "")
	const count, temp = `count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)`, `DCGM_FI_DEV_GPU_TEMP{Hostname="gpu-node-0"}`
	tests := []probeCase{
		{name: "alert firing", spec: v1alpha1.PrometheusProbe{Alert: "GpuMissing"},
			query: `ALERTS{alertname="GpuMissing",alertstate="firing"}`, holds: true, value: 1,
			subjects: []probe.Subject{{Node: "gpu-node-0"}},
			detail:   `alert GpuMissing firing for {Hostname="gpu-node-0",severity="critical"}`},
		{name: "alert not firing", spec: v1alpha1.PrometheusProbe{Alert: "GpuXidError"},
			query: `ALERTS{alertname="GpuXidError",alertstate="firing"}`, detail: "alert GpuXidError is not firing"},
		{name: "below", spec: v1alpha1.PrometheusProbe{Query: count, Op: "<", Value: num(8)},
			query: count, holds: true, value: 7,
			subjects: []probe.Subject{{Node: "gpu-node-0"}}, detail: `1 of 2 series hold < 8; {Hostname="gpu-node-0"} = 7`},
		{name: "above, none", spec: v1alpha1.PrometheusProbe{Query: count, Op: ">", Value: num(8)},
			query: count, detail: "no series hold (2 returned)"},
		{name: "within tolerance", spec: v1alpha1.PrometheusProbe{Query: count, Value: num(8.2), Tolerance: num(0.5)},
			query: count, holds: true, value: 8, subjects: []probe.Subject{{Node: "gpu-node-1"}}},
		{name: "tolerance picks the closest", spec: v1alpha1.PrometheusProbe{Query: count, Value: num(7.4), Tolerance: num(1)},
			query: count, holds: true, value: 7, subjects: []probe.Subject{{Node: "gpu-node-0"}, {Node: "gpu-node-1"}}},
		{name: "hottest GPU", spec: v1alpha1.PrometheusProbe{Query: temp, Op: ">=", Value: num(64)},
			query: temp, holds: true, value: 64,
			subjects: []probe.Subject{{Node: "gpu-node-0", GPU: "7", UUID: "GPU-c104906c-7b05-6251-078a-ef8bcefaad1c", PCI: "0000:db:00", Job: "gpuchaos-twin"}}},
		{name: "coolest GPUs", spec: v1alpha1.PrometheusProbe{Query: temp, Op: "<=", Value: num(62)},
			query: temp, holds: true, value: 62},
		{name: "job series name the training job", spec: v1alpha1.PrometheusProbe{Query: `gpuchaos_job_up`, Op: "==", Value: num(0)},
			query: `gpuchaos_job_up`, holds: true, value: 0, subjects: []probe.Subject{{Job: "llm-pretrain"}}},
		{name: "non-empty", spec: v1alpha1.PrometheusProbe{Query: `gpuchaos_job_up`},
			query: `gpuchaos_job_up`, holds: true, value: 0, subjects: []probe.Subject{{Job: "llm-pretrain"}}},
		{name: "NaN satisfies no comparison", spec: v1alpha1.PrometheusProbe{Query: `vector(0) / 0`, Op: "!=", Value: num(0)},
			query: `vector(0) / 0`, detail: "no series hold (1 returned)"},
		{name: "NaN is still a result", spec: v1alpha1.PrometheusProbe{Query: `vector(0) / 0`},
			query: `vector(0) / 0`, holds: true, anyValue: true, subjects: []probe.Subject{{}}},
	}
	// The group returns once its parallel cases are done, so the count of
	// queries below is complete.
	t.Run("group", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, srv)
			})
		}
	})
	if sent := srv.sent(); len(sent) != len(tests) {
		t.Errorf("%d queries sent for %d observations", len(sent), len(tests))
	}
}

func TestProbeError(t *testing.T) {
	t.Parallel()
	srv := newFakeProm(t, "")
	p, err := FromSpec("count", v1alpha1.PrometheusProbe{Query: `count by (Hostname) (`}, srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Observe(t.Context())
	for _, want := range []string{"probe count", srv.URL, "bad_data", "unclosed left parenthesis"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Observe error %v, want it to contain %q", err, want)
		}
	}
}

func TestFromSpecErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		spec       v1alpha1.PrometheusProbe
		defaultURL string
		want       string
	}{
		{"no URL anywhere", v1alpha1.PrometheusProbe{Alert: "A"}, "", "no Prometheus URL"},
		{"bad URL", v1alpha1.PrometheusProbe{URL: "prom:9090", Alert: "A"}, "", "prometheus url"},
		{"alert and query", v1alpha1.PrometheusProbe{Alert: "A", Query: "up"}, "http://p", "set alert or query, not both"},
		{"neither", v1alpha1.PrometheusProbe{}, "http://p", "set alert or query"},
		{"alert with value", v1alpha1.PrometheusProbe{Alert: "A", Value: num(1)}, "http://p", "not an alert"},
		{"op without value", v1alpha1.PrometheusProbe{Query: "up", Op: ">"}, "http://p", "op > needs a value"},
		{"unknown op", v1alpha1.PrometheusProbe{Query: "up", Op: "=>", Value: num(1)}, "http://p", `comparison "=>" is not one of`},
		{"op and tolerance", v1alpha1.PrometheusProbe{Query: "up", Op: ">", Value: num(1), Tolerance: num(1)}, "http://p", "not both"},
		{"tolerance without value", v1alpha1.PrometheusProbe{Query: "up", Tolerance: num(1)}, "http://p", "tolerance needs a value"},
		{"negative tolerance", v1alpha1.PrometheusProbe{Query: "up", Value: num(1), Tolerance: num(-1)}, "http://p", "tolerance must be"},
		{"value alone", v1alpha1.PrometheusProbe{Query: "up", Value: num(1)}, "http://p", "value needs op or tolerance"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FromSpec("p", tc.spec, tc.defaultURL, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FromSpec = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// The spec's own URL wins over the default.
	p, err := FromSpec("p", v1alpha1.PrometheusProbe{URL: "http://own:9090", Alert: "A"}, "http://default:9090", nil)
	if err != nil || p.(*Probe).client.URL() != "http://own:9090" {
		t.Errorf("FromSpec with its own URL: %v", err)
	}
}

// FuzzDecodeBody checks that no answer, however malformed, panics the
// decoder, and that what it accepts is well formed.
func FuzzDecodeBody(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(200, b)
	}
	f.Add(200, []byte(`{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"+Inf"]}]}}`))
	f.Add(502, []byte(`<html>`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		got, err := decodeBody(status, body)
		if err != nil {
			return
		}
		for _, s := range got {
			if s.Labels == nil {
				t.Fatalf("sample without a label map from %q", body)
			}
		}
	})
}
