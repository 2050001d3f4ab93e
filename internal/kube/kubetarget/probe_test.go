package kubetarget

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe/promapi"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe/scrape"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

func needPrometheus(t *testing.T) {
	t.Helper()
	for _, bin := range []string{testutil.PrometheusBin, "/usr/bin/promtool"} {
		if _, err := os.Stat(bin); err != nil {
			kubetest.Missing(t, bin+" is missing: run scripts/setup-prometheus (as root) to install Prometheus from Debian's packages")
		}
	}
}

// replay is a probe.Source over fixed series at a time the test sets: the
// local and twin targets' view of the same history the server was given.
type replay struct {
	byMetric map[string][]*series.Series
	at       *atomic.Int64 // ms
}

func (r *replay) Now() time.Time                        { return time.UnixMilli(r.at.Load()) }
func (r *replay) Select(metric string) []*series.Series { return r.byMetric[metric] }
func (r *replay) Logs() []series.LogLine                { return nil }

// history is a fleet of two nodes with two GPUs each, as the agent
// exports it, over 40 minutes, with faults in it:
//
//   - n1 GPU 1 runs hot (92 °C) from 20m on: dcgm-gpu-temp-high fires a
//     minute later (for: 1m);
//   - n2 GPU 0 is hot for 40 s at 10m: shorter than for:, no alert;
//   - n2 GPU 1 reports XID 79 from 25m on: dcgm-xid-errors fires at once;
//   - n2 GPU 0 stops being reported at 30m (it fell off the bus): after
//     the 5m lookback it is gone and dcgm-gpu-missing fires a minute
//     later;
//   - gpuchaos_probe_test, labelled with a quote, a backslash and a
//     newline in one series and plainly in another, selects exactly one of
//     them only if the probe's PromQL escapes the value; the odd one
//     vanishes at 15m, for the absent probes.
//
// Samples are 10 s apart, 3 s off the 15 s evaluation grid: Debian's
// server is Prometheus 2, whose range selectors and lookback include their
// left end, where the engine gpuchaos links (Prometheus 3) excludes it. Off
// the grid no sample ever sits on a window's edge, so the comparison tests
// this package's evaluation, not that change between versions.
func history(start time.Time) []*series.Series {
	const step = 10 * time.Second
	end := start.Add(40 * time.Minute)
	at := func(d time.Duration) int64 { return start.Add(d).UnixMilli() }
	var out []*series.Series
	gen := func(metric string, ls series.Labels, until time.Time, v func(ms int64) float64) {
		s := &series.Series{Metric: metric, Labels: ls}
		for ts := start.Add(3 * time.Second); !ts.After(until); ts = ts.Add(step) {
			ms := ts.UnixMilli()
			s.Samples = append(s.Samples, series.Sample{T: ms, V: v(ms)})
		}
		out = append(out, s)
	}
	for _, node := range []string{"n1", "n2"} {
		for g := range 2 {
			// Sorted by name, as series.Labels are: upper case first.
			ls := series.Labels{
				{Name: "Hostname", Value: node}, {Name: "UUID", Value: fmt.Sprintf("GPU-%s-%d", node, g)},
				{Name: "gpu", Value: strconv.Itoa(g)}, {Name: "pci_bus_id", Value: fmt.Sprintf("00000000:%02X:00.0", 0x18+g)},
			}
			until := end
			if node == "n2" && g == 0 {
				until = start.Add(30 * time.Minute)
			}
			gen("DCGM_FI_DEV_GPU_TEMP", ls, until, func(ms int64) float64 {
				switch {
				case node == "n1" && g == 1 && ms >= at(20*time.Minute):
					return 92
				case node == "n2" && g == 0 && ms >= at(10*time.Minute) && ms < at(10*time.Minute+40*time.Second):
					return 90
				}
				return 60 + float64(g)
			})
			gen("DCGM_FI_DEV_XID_ERRORS", ls, until, func(ms int64) float64 {
				if node == "n2" && g == 1 && ms >= at(25*time.Minute) {
					return 79
				}
				return 0
			})
		}
	}
	gen("gpuchaos_probe_test", series.Labels{{Name: "pod", Value: "a\"b\\c\nd"}}, start.Add(15*time.Minute), func(int64) float64 { return 5 })
	gen("gpuchaos_probe_test", series.Labels{{Name: "pod", Value: "a"}}, end, func(int64) float64 { return 1 })
	return out
}

// openMetrics writes series as OpenMetrics text with timestamps, which
// promtool backfills into a TSDB.
func openMetrics(ss []*series.Series) string {
	var b strings.Builder
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	for _, s := range ss {
		var ls []string
		for _, l := range s.Labels {
			ls = append(ls, l.Name+`="`+esc.Replace(l.Value)+`"`)
		}
		for _, p := range s.Samples {
			fmt.Fprintf(&b, "%s{%s} %s %s\n", s.Metric, strings.Join(ls, ","), strconv.FormatFloat(p.V, 'g', -1, 64),
				strconv.FormatFloat(float64(p.T)/1000, 'f', 3, 64))
		}
	}
	b.WriteString("# EOF\n")
	return b.String()
}

// serverWith backfills ss into a fresh TSDB with promtool and starts a
// real Prometheus server over it, scraping nothing.
func serverWith(t *testing.T, ss []*series.Series) string {
	t.Helper()
	dir := t.TempDir()
	om := filepath.Join(dir, "history.om")
	if err := os.WriteFile(om, []byte(openMetrics(ss)), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if out, err := exec.Command(testutil.Promtool(t), "tsdb", "create-blocks-from", "openmetrics", om, data).CombinedOutput(); err != nil {
		t.Fatalf("promtool backfill: %v\n%s", err, out)
	}
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte("global:\n  evaluation_interval: 15s\nscrape_configs: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return testutil.StartPrometheus(t, config, data, time.Minute)
}

// TestRuleProbesAgreeWithLocal replays one history through the probes the
// k8s target builds (asking a real Prometheus server holding the history)
// and through the ones the local and twin targets build (probe.FromSpec
// over the same series), observing both every 5 s of the history's clock:
// every observation must be the same (holds, subjects, value, detail),
// before, during and after each fault. Each probe must also hold exactly
// when the history says it should, so that agreement on "never holds"
// cannot pass the test.
func TestRuleProbesAgreeWithLocal(t *testing.T) {
	needPrometheus(t)
	t.Parallel()
	// Whole minutes, far enough back that the history and six minutes
	// after it are in the server's past.
	start := time.Now().Add(-50 * time.Minute).Truncate(time.Minute)
	ss := history(start)
	prom := serverWith(t, ss)

	var at atomic.Int64
	src := &replay{byMetric: map[string][]*series.Series{}, at: &at}
	for _, s := range ss {
		src.byMetric[s.Metric] = append(src.byMetric[s.Metric], s)
	}
	tgt := &Target{opts: Options{Prometheus: prom, Experiment: &v1alpha1.Experiment{}}, ruleClock: src.Now}

	n1g1 := probe.Subject{Node: "n1", GPU: "1", UUID: "GPU-n1-1", PCI: "0000:19:00"}
	n2g1 := probe.Subject{Node: "n2", GPU: "1", UUID: "GPU-n2-1", PCI: "0000:19:00"}
	ms := func(m int, s int) time.Duration { return time.Duration(m)*time.Minute + time.Duration(s)*time.Second }
	// A rule the server cannot evaluate while a node has two GPUs (a
	// one-to-one match finds two series a side): every step before n2's
	// GPU 0 goes is an execution error, which Prometheus and the local
	// engine both count as a failed evaluation that changes nothing.
	// After it, the one series left fires at once, labelled with the
	// match's labels only.
	pairing := &rules.Rule{Source: "test", Group: "test", Name: "n2-pairing", Kind: rules.KindAlert,
		Expr: `DCGM_FI_DEV_GPU_TEMP{Hostname="n2"} * on (Hostname) DCGM_FI_DEV_GPU_TEMP{Hostname="n2"} > 0`}
	// custom are the rules, by test name, evaluated instead of the
	// test's spec, through promapi's Rule and probe.NewAlertProbe.
	custom := map[string]*rules.Rule{"execution errors": pairing}
	tests := []struct {
		name string
		spec v1alpha1.ProbeSpec
		// holds lists the spans [from, to) of the history's clock when
		// the probe must hold; to 0 means to the end of the replay.
		holds [][2]time.Duration
		// subjects, when set, are the subjects while it holds.
		subjects []probe.Subject
	}{
		// for: 1m at a 15 s interval: the first evaluation that sees the
		// 92 (20m03s) is 20m15s; it fires at 21m15s. The 40 s blip on n2
		// never fires. The last sample (39m53s) leaves the 5m lookback
		// at 44m53s: the evaluation at 45m resolves every alert.
		{"temp-high", v1alpha1.ProbeSpec{Detector: "dcgm-gpu-temp-high"}, [][2]time.Duration{{ms(21, 15), ms(45, 0)}}, []probe.Subject{n1g1}},
		// No for: the first evaluation after the 25m03s sample.
		{"xid", v1alpha1.ProbeSpec{Detector: "dcgm-xid-errors"}, [][2]time.Duration{{ms(25, 15), ms(45, 0)}}, []probe.Subject{n2g1}},
		// n2 GPU 0's last sample is at 29m53s; after 5m of lookback
		// (34m53s) the count falls, first seen at 35m, firing at 36m.
		{"gpu-missing", v1alpha1.ProbeSpec{Detector: "dcgm-gpu-missing"}, [][2]time.Duration{{ms(36, 0), ms(45, 0)}}, []probe.Subject{{Node: "n2"}}},
		{"threshold above for 1m", v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{
			Metric: "DCGM_FI_DEV_GPU_TEMP", Labels: map[string]string{"Hostname": "n1"}, Op: ">", Value: 85, For: v1alpha1.Duration{Duration: time.Minute}}},
			[][2]time.Duration{{ms(21, 15), ms(45, 0)}}, []probe.Subject{n1g1}},
		// The odd pod's 5 matches; the plain pod's 1 would not.
		{"threshold below, escaped label", v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{
			Metric: "gpuchaos_probe_test", Labels: map[string]string{"pod": "a\"b\\c\nd"}, Op: "<", Value: 6}},
			[][2]time.Duration{{ms(0, 15), ms(20, 0)}}, nil},
		// Gone after 14m53s + 5m of lookback: absent from 19m53s on,
		// first evaluated at 20m.
		{"threshold absent", v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{
			Metric: "gpuchaos_probe_test", Labels: map[string]string{"pod": "a\"b\\c\nd"}, Absent: true}},
			[][2]time.Duration{{0, ms(0, 15)}, {ms(20, 0), 0}}, []probe.Subject{{}}},
		// No sample in the last 2m: from 16m53s, first evaluated at 17m.
		{"threshold absent for 2m", v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{
			Metric: "gpuchaos_probe_test", Labels: map[string]string{"pod": "a\"b\\c\nd"}, Absent: true, For: v1alpha1.Duration{Duration: 2 * time.Minute}}},
			[][2]time.Duration{{0, ms(0, 15)}, {ms(17, 0), 0}}, []probe.Subject{{}}},
		{"execution errors", v1alpha1.ProbeSpec{}, [][2]time.Duration{{ms(35, 0), ms(45, 0)}}, []probe.Subject{{Node: "n2"}}},
	}
	client, err := promapi.New(promapi.Options{URL: prom})
	if err != nil {
		t.Fatal(err)
	}
	type pair struct{ k8s, local probe.Probe }
	probes := make([]pair, len(tests))
	for i, tc := range tests {
		if r := custom[tc.name]; r != nil {
			k, err := client.Rule(tc.name, r, src.Now)
			if err != nil {
				t.Fatal(err)
			}
			probes[i] = pair{k, probe.NewAlertProbe(tc.name, r, &rules.Set{Rules: []*rules.Rule{r}}, src)}
			continue
		}
		k, err := tgt.Probe(tc.name, tc.spec)
		if err != nil {
			t.Fatalf("%s: k8s probe: %v", tc.name, err)
		}
		l, err := probe.FromSpec(tc.name, tc.spec, src)
		if err != nil {
			t.Fatalf("%s: local probe: %v", tc.name, err)
		}
		probes[i] = pair{k, l}
	}
	end := ms(46, 0)
	for d := 15 * time.Second; d <= end; d += 5 * time.Second {
		at.Store(start.Add(d).UnixMilli())
		for i, tc := range tests {
			ko, err := probes[i].k8s.Observe(t.Context())
			if err != nil {
				t.Fatalf("%s at %s: k8s: %v", tc.name, d, err)
			}
			lo, err := probes[i].local.Observe(t.Context())
			if err != nil {
				t.Fatalf("%s at %s: local: %v", tc.name, d, err)
			}
			if custom[tc.name] != nil && !ko.Holds && !lo.Holds {
				// The servers' error texts differ; the count of failed
				// evaluations may not.
				if failed(ko.Detail) != failed(lo.Detail) || failed(ko.Detail) == "" {
					t.Fatalf("%s at %s: failures differ:\nk8s   %s\nlocal %s", tc.name, d, ko.Detail, lo.Detail)
				}
				continue
			}
			if !reflect.DeepEqual(ko, lo) {
				t.Fatalf("%s at %s:\nk8s   %+v\nlocal %+v", tc.name, d, ko, lo)
			}
			want := slices.ContainsFunc(tc.holds, func(s [2]time.Duration) bool { return d >= s[0] && (s[1] == 0 || d < s[1]) })
			if ko.Holds != want {
				t.Fatalf("%s at %s: holds %v, want %v (%s)", tc.name, d, ko.Holds, want, ko.Detail)
			}
			if ko.Holds && tc.subjects != nil && !slices.Equal(ko.Subjects, tc.subjects) {
				t.Fatalf("%s at %s: subjects %+v, want %+v", tc.name, d, ko.Subjects, tc.subjects)
			}
		}
	}

	// A probe built mid-fault looks back as far as its for:, on both
	// targets: it holds at its first observation.
	at.Store(start.Add(ms(30, 0)).UnixMilli())
	spec := v1alpha1.ProbeSpec{Detector: "dcgm-gpu-temp-high"}
	k, err := tgt.Probe("late", spec)
	if err != nil {
		t.Fatal(err)
	}
	l, err := probe.FromSpec("late", spec, src)
	if err != nil {
		t.Fatal(err)
	}
	ko, kerr := k.Observe(t.Context())
	lo, lerr := l.Observe(t.Context())
	if kerr != nil || lerr != nil || !ko.Holds || !reflect.DeepEqual(ko, lo) {
		t.Fatalf("late first observation: k8s %+v (%v), local %+v (%v); want both holding, equal", ko, kerr, lo, lerr)
	}
	if math.IsNaN(ko.Value) || ko.Value != 92 {
		t.Errorf("late observation value %v, want 92", ko.Value)
	}
}

// failed returns "N evaluations failed" from a rule error's text.
func failed(detail string) string {
	i := strings.Index(detail, " evaluations failed")
	if i < 0 {
		return ""
	}
	j := strings.LastIndex(detail[:i], " ")
	return detail[j+1 : i]
}

// TestProbeRefusals: what the k8s target cannot evaluate is refused when
// the probe is built (the controller's admission), in one line that says
// what to use instead.
func TestProbeRefusals(t *testing.T) {
	t.Parallel()
	with := &Target{opts: Options{Prometheus: "http://prometheus.monitoring:9090", Experiment: &v1alpha1.Experiment{}}}
	without := &Target{opts: Options{Experiment: &v1alpha1.Experiment{}}}
	temp := &v1alpha1.ThresholdProbe{Metric: "DCGM_FI_DEV_GPU_TEMP", Op: ">", Value: 85}
	tests := []struct {
		name string
		tgt  *Target
		spec v1alpha1.ProbeSpec
		want []string // nil: built
	}{
		{"detector", with, v1alpha1.ProbeSpec{Detector: "dcgm-gpu-temp-high"}, nil},
		{"threshold", with, v1alpha1.ProbeSpec{Threshold: temp}, nil},
		{"detector without a server", without, v1alpha1.ProbeSpec{Detector: "dcgm-gpu-temp-high"},
			[]string{"probe p: a detector dcgm-gpu-temp-high on k8s is evaluated on the cluster's Prometheus, and none is configured", "--prometheus", "controller.prometheus"}},
		{"threshold without a server", without, v1alpha1.ProbeSpec{Threshold: temp}, []string{"threshold probe", "none is configured"}},
		{"log", with, v1alpha1.ProbeSpec{Log: &v1alpha1.LogProbe{Pattern: "Xid"}},
			[]string{"log probes read one node's kernel log, which is not in Prometheus", "detector dcgm-xid-errors", "DCGM_FI_DEV_XID_ERRORS"}},
		{"kernel-log detector", with, v1alpha1.ProbeSpec{Detector: "kmsg-xid"}, []string{"detector kmsg-xid reads one node's kernel log", "dcgm-xid-errors"}},
		{"unknown detector", with, v1alpha1.ProbeSpec{Detector: "no-such"}, []string{`"no-such" is not a built-in detector`}},
		{"bad threshold", with, v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: "gpu temp", Op: ">"}}, []string{`threshold metric "gpu temp"`}},
		{"workload", with, v1alpha1.ProbeSpec{Workload: &v1alpha1.WorkloadProbe{}}, []string{"workload probes"}},
	}
	for _, tc := range tests {
		p, err := tc.tgt.Probe("p", tc.spec)
		if tc.want == nil {
			if err != nil || p.Name() != "p" {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: built, want a refusal", tc.name)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: refusal on several lines: %q", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: refusal %q lacks %q", tc.name, err, w)
			}
		}
	}
	// A detector expectation without a probe name takes the detector's.
	if p, err := with.Probe("", v1alpha1.ProbeSpec{Detector: "dcgm-xid-errors"}); err != nil || p.Name() != "dcgm-xid-errors" {
		t.Errorf("unnamed detector probe: %v", err)
	}
}

// TestRuleProbeLive runs a detector on the wall clock against a real
// Prometheus scraping a real exporter page (the agent's text format), next
// to the probe the local target builds over its own scrapes of the same
// page: neither holds before the XID appears on the page, both hold after,
// about the same GPU.
func TestRuleProbeLive(t *testing.T) {
	needPrometheus(t)
	t.Parallel()
	var xid atomic.Int64
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintln(w, "# TYPE DCGM_FI_DEV_XID_ERRORS gauge")
		for g := range 2 {
			v := int64(0)
			if g == 1 {
				v = xid.Load()
			}
			fmt.Fprintf(w, "DCGM_FI_DEV_XID_ERRORS{Hostname=\"n1\",UUID=\"GPU-n1-%d\",gpu=\"%d\",pci_bus_id=\"00000000:%02X:00.0\"} %d\n", g, g, 0x18+g, v)
		}
	}))
	t.Cleanup(exporter.Close)
	u, err := url.Parse(exporter.URL)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	const job = "gpuchaos-agent"
	if err := os.WriteFile(config, []byte("scrape_configs:\n- job_name: "+job+"\n  scrape_interval: 1s\n  static_configs:\n  - targets: ['"+u.Host+"']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	prom := testutil.StartPrometheus(t, config, filepath.Join(dir, "data"), time.Minute)

	tgt := &Target{opts: Options{Prometheus: prom, Experiment: &v1alpha1.Experiment{}}}
	spec := v1alpha1.ProbeSpec{Detector: "dcgm-xid-errors"}
	k8s, err := tgt.Probe("xid", spec)
	if err != nil {
		t.Fatal(err)
	}
	store, err := scrape.New(scrape.Options{URL: exporter.URL + "/metrics"})
	if err != nil {
		t.Fatal(err)
	}
	lp, err := probe.FromSpec("xid", spec, store)
	if err != nil {
		t.Fatal(err)
	}
	local := scrape.Probe(lp, store)

	client, err := promapi.New(promapi.Options{URL: prom})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "Prometheus to hold the page's series", func() bool {
		res, err := client.Query(t.Context(), "DCGM_FI_DEV_XID_ERRORS")
		return err == nil && len(res) == 2
	})
	for name, p := range map[string]probe.Probe{"k8s": k8s, "local": local} {
		obs, err := p.Observe(t.Context())
		if err != nil || obs.Holds {
			t.Fatalf("%s before the XID: %+v, %v; want not holding", name, obs, err)
		}
	}

	xid.Store(79)
	var ko, lo probe.Observation
	// The rule is evaluated every 15 s after Prometheus' next scrape.
	testutil.Eventually(t, 2*time.Minute, "both probes to hold", func() bool {
		var kerr, lerr error
		ko, kerr = k8s.Observe(t.Context())
		lo, lerr = local.Observe(t.Context())
		if kerr != nil || lerr != nil {
			t.Fatalf("observe: k8s %v, local %v", kerr, lerr)
		}
		return ko.Holds && lo.Holds
	})
	want := []probe.Subject{{Node: "n1", GPU: "1", UUID: "GPU-n1-1", PCI: "0000:19:00"}}
	if !slices.Equal(lo.Subjects, want) {
		t.Errorf("local subjects %+v, want %+v", lo.Subjects, want)
	}
	// Prometheus labels what it scrapes with its scrape job, which names
	// no training job; the engine's Matches ignores such a job beside a
	// GPU. Everything else is the local probe's.
	for i := range ko.Subjects {
		if ko.Subjects[i].Job != job {
			t.Errorf("k8s subject %+v: job %q, want the scrape job %q", ko.Subjects[i], ko.Subjects[i].Job, job)
		}
		ko.Subjects[i].Job = ""
	}
	if !slices.Equal(ko.Subjects, want) || ko.Value != 79 {
		t.Errorf("k8s %+v, want subjects %+v and value 79", ko, want)
	}
}
