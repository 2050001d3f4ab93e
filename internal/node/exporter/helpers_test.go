package exporter

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/node/exposition"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// dcgmLabels are dcgm-exporter's labels on every DCGM_FI_* series.
var dcgmLabels = []string{"Hostname", "UUID", "device", "gpu", "modelName", "pci_bus_id"}

// scrape fetches /metrics through a real HTTP server and parses it with
// Prometheus' own text parser, strict (legacy) name validation included.
func scrape(t *testing.T, a *Agent) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(a)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != exposition.ContentType {
		t.Errorf("Content-Type %q, want %q", ct, exposition.ContentType)
	}
	return parse(t, body)
}

// render writes the page a scrape would get in the text format.
func render(t testing.TB, a *Agent) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, f := range a.gather() {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func parse(t testing.TB, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, body)
	}
	return fams
}

// labelMap returns a series' labels by name.
func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func labelNames(m *dto.Metric) []string {
	var out []string
	for _, l := range m.GetLabel() {
		out = append(out, l.GetName())
	}
	sort.Strings(out)
	return out
}

// value returns a series' value whatever its type.
func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	return m.GetUntyped().GetValue()
}

// find returns the series of family name whose labels include want.
func find(fams map[string]*dto.MetricFamily, name string, want map[string]string) (*dto.Metric, bool) {
	f, ok := fams[name]
	if !ok {
		return nil, false
	}
next:
	for _, m := range f.GetMetric() {
		l := labelMap(m)
		for k, v := range want {
			if l[k] != v {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

func newAgent(t *testing.T, opts Options) *Agent {
	t.Helper()
	a, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

func joined(s []string) string { return strings.Join(s, ",") }
