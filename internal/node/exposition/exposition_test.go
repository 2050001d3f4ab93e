package exposition

import (
	"bytes"
	"compress/gzip"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// get serves one request for path with the given headers (name, value
// pairs) from h.
func get(t *testing.T, h http.Handler, method, path string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// page serves what fill builds and returns the text page.
func page(t *testing.T, fill func(b *Builder)) string {
	t.Helper()
	h := Handler(Options{Gather: func() []*dto.MetricFamily {
		var b Builder
		fill(&b)
		return b.Families()
	}})
	rec := get(t, h, http.MethodGet, "/metrics")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != ContentType {
		t.Errorf("Content-Type %q, want %q", ct, ContentType)
	}
	return rec.Body.String()
}

// TestPage is the page byte for byte: families in the order started, each
// with HELP and TYPE, labels in the order given, escaped as the format
// requires; a family without samples left out; a Vec's series in the
// order of their label values.
func TestPage(t *testing.T) {
	t.Parallel()
	gpu3 := Labels("gpu", "3", "modelName", `NVIDIA "H200"`)
	v := NewVec("fault", "gpu")
	v.Set(1, "network.loss", "")
	v.Set(1, "exhaustion.vram", "2")
	v.Set(1, "exhaustion.sm-burn", "1")
	v.Delete("exhaustion.sm-burn", "1")
	v.Delete("not.there", "0")
	got := page(t, func(b *Builder) {
		b.Family("m", "a\nhelp", Gauge)
		b.Add(gpu3, 61)
		b.AddKV(0.5)
		b.Family("empty", "Nothing here.", Gauge)
		b.Family("c_total", `back\slash "quoted"`, Counter)
		b.AddKV(3, "z", "1", "a", "2")
		b.Vec("f", "Faults.", Gauge, v)
		b.Vec("none", "Empty vec.", Counter, NewVec("x"))
	})
	want := `# HELP m a\nhelp
# TYPE m gauge
m{gpu="3",modelName="NVIDIA \"H200\""} 61
m 0.5
# HELP c_total back\\slash "quoted"
# TYPE c_total counter
c_total{z="1",a="2"} 3
# HELP f Faults.
# TYPE f gauge
f{fault="exhaustion.vram",gpu="2"} 1
f{fault="network.loss",gpu=""} 1
`
	if got != want {
		t.Errorf("page:\n%s\nwant:\n%s", got, want)
	}
}

func TestEscaping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, label, help string
	}{
		{"plain", "H200", "H200", "H200"},
		{"quote", `say "hi"`, `say \"hi\"`, `say "hi"`},
		{"backslash", `a\b`, `a\\b`, `a\\b`},
		{"line feed", "a\nb", `a\nb`, `a\nb`},
		{"escape-looking text", `\n`, `\\n`, `\\n`},
		{"unicode", "GPU-é", "GPU-é", "GPU-é"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := page(t, func(b *Builder) {
				b.Family("m", tc.in, Gauge)
				b.AddKV(1, "l", tc.in)
			})
			want := "# HELP m " + tc.help + "\n# TYPE m gauge\nm{l=\"" + tc.label + "\"} 1\n"
			if got != want {
				t.Errorf("page:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestValues: every value reads back exactly. Whole numbers past a
// million print with an exponent, as every Prometheus client library
// prints them (dcgm-exporter prints its integer fields without one; a
// parser reads both the same).
func TestValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0"}, {65, "65"}, {1980, "1980"}, {98765432100, "9.87654321e+10"}, {-3, "-3"},
		{0.9731, "0.9731"}, {-2.5, "-2.5"}, {123.456, "123.456"}, {0.1, "0.1"},
		{1.23e21, "1.23e+21"}, {1e300, "1e+300"},
		{math.Inf(1), "+Inf"}, {math.Inf(-1), "-Inf"}, {math.NaN(), "NaN"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			p := page(t, func(b *Builder) {
				b.Family("m", "h", Gauge)
				b.AddKV(tc.in)
			})
			got := strings.TrimSuffix(strings.TrimPrefix(p, "# HELP m h\n# TYPE m gauge\nm "), "\n")
			if got != tc.want {
				t.Errorf("%v printed as %q, want %q", tc.in, got, tc.want)
			}
			if !math.IsNaN(tc.in) {
				back, err := strconv.ParseFloat(strings.TrimPrefix(got, "+"), 64)
				if err != nil || back != tc.in {
					t.Errorf("%q reads back as %v (%v)", got, back, err)
				}
			}
		})
	}
}

// TestAddKVCopies: a caller may reuse its label slice between samples.
func TestAddKVCopies(t *testing.T) {
	t.Parallel()
	got := page(t, func(b *Builder) {
		b.Family("m", "h", Gauge)
		kv := []string{"gpu", "0"}
		for i := range 3 {
			kv[1] = strconv.Itoa(i)
			b.AddKV(float64(i), kv...)
		}
	})
	if want := "# HELP m h\n# TYPE m gauge\nm{gpu=\"0\"} 0\nm{gpu=\"1\"} 1\nm{gpu=\"2\"} 2\n"; got != want {
		t.Errorf("page:\n%s\nwant:\n%s", got, want)
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	healthy := false
	h := Handler(Options{
		Gather: func() []*dto.MetricFamily {
			var b Builder
			b.Family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Energy (in mJ).", Counter)
			b.AddKV(98765432100, "gpu", "0")
			return b.Families()
		},
		Healthy: func() bool { return healthy },
	})
	tests := []struct {
		method, path string
		code         int
		body         string
	}{
		{http.MethodGet, "/metrics", http.StatusOK, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\"}"},
		{http.MethodHead, "/metrics", http.StatusOK, ""},
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed, "method not allowed"},
		{http.MethodGet, "/", http.StatusNotFound, ""},
		{http.MethodGet, "/metrics/x", http.StatusNotFound, ""},
		{http.MethodGet, "/healthz", http.StatusServiceUnavailable, "not running\n"},
	}
	for _, tc := range tests {
		rec := get(t, h, tc.method, tc.path)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%s %s: %d %q, want %d with %q", tc.method, tc.path, rec.Code, rec.Body, tc.code, tc.body)
		}
	}
	healthy = true
	if rec := get(t, h, http.MethodGet, "/healthz"); rec.Code != http.StatusOK || rec.Body.String() != "ok\n" {
		t.Errorf("/healthz when healthy: %d %q", rec.Code, rec.Body)
	}

	// A scraper that asks for OpenMetrics gets the text format: its
	// encoder would append _total to the counter's name.
	rec := get(t, h, http.MethodGet, "/metrics", "Accept", "application/openmetrics-text;version=1.0.0")
	if ct := rec.Header().Get("Content-Type"); ct != ContentType || strings.Contains(rec.Body.String(), "CONSUMPTION_total") {
		t.Errorf("OpenMetrics asked: Content-Type %q, page\n%s", ct, rec.Body)
	}

	// Gzip when asked.
	rec = get(t, h, http.MethodGet, "/metrics", "Accept-Encoding", "gzip")
	if rec.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("Accept-Encoding gzip: Content-Encoding %q", rec.Header().Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(zr)
	if err != nil || !bytes.Contains(body, []byte("98765432100")) && !bytes.Contains(body, []byte("9.87654321e+10")) {
		t.Errorf("gzipped page %q (%v)", body, err)
	}

	// Protobuf when asked, the name unchanged.
	rec = get(t, h, http.MethodGet, "/metrics", "Accept", `application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited`)
	dec := expfmt.NewDecoder(rec.Body, expfmt.NewFormat(expfmt.TypeProtoDelim))
	var mf dto.MetricFamily
	if err := dec.Decode(&mf); err != nil {
		t.Fatalf("protobuf page (Content-Type %q): %v", rec.Header().Get("Content-Type"), err)
	}
	if mf.GetName() != "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" || mf.GetMetric()[0].GetCounter().GetValue() != 98765432100 {
		t.Errorf("protobuf family %v", &mf)
	}
}

// FuzzPage checks that any label value (a hostname, a model name, a fault
// id from a user's file) and any value leave a page Prometheus' strict
// text parser reads back to the same. Help texts are ours; TestEscaping
// covers them.
func FuzzPage(f *testing.F) {
	for _, s := range []string{"gpu-node-0", `quo"te`, `back\slash`, "new\nline", "ünïcode", "", `\\n"`} {
		f.Add(s, 1.5)
	}
	f.Fuzz(func(t *testing.T, v string, x float64) {
		// The text format carries UTF-8: an invalid byte becomes U+FFFD,
		// so every input is checked rather than skipped.
		v = strings.ToValidUTF8(v, "\uFFFD")
		var b Builder
		b.Family("m", "h", Gauge)
		b.AddKV(x, "a", v, "b", "x")
		var buf bytes.Buffer
		if _, err := expfmt.MetricFamilyToText(&buf, b.Families()[0]); err != nil {
			t.Fatal(err)
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := p.TextToMetricFamilies(&buf)
		if err != nil {
			t.Fatalf("value %q: %v", v, err)
		}
		m := fams["m"]
		var a string
		for _, l := range m.GetMetric()[0].GetLabel() {
			if l.GetName() == "a" {
				a = l.GetValue()
			}
		}
		if a != v {
			t.Errorf("label read back as %q, want %q", a, v)
		}
		if got := m.GetMetric()[0].GetGauge().GetValue(); got != x && !(math.IsNaN(x) && math.IsNaN(got)) {
			t.Errorf("value read back as %v, want %v", got, x)
		}
	})
}
