package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe/promapi"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
	"github.com/gpuchaos/gpuchaos/internal/run/target/livetarget"
	"github.com/gpuchaos/gpuchaos/internal/twin"
	"github.com/gpuchaos/gpuchaos/internal/twin/live"
)

// scrapeJob is the job name Prometheus scrapes the twin under.
const scrapeJob = "gpuchaos-twin"

const prometheusConfig = `global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: ` + scrapeJob + `
    # The twin stands in for many exporters on many hosts and serves
    # their job, instance and up labels itself, as a federation endpoint
    # does: keep them (examples/live/prometheus.yml does the same).
    honor_labels: true
    scrape_interval: 1s
    scrape_timeout: 900ms
    static_configs:
      - targets: [%q]
`

// alertRules are the rules the experiment expects to see fire or miss:
// GpuMissing counts each node's GPUs, the way many fleets notice a GPU that
// fell off the bus; GpuXidError watches the XID field, which cannot show an
// XID 79 because the GPU's series vanish with it.
const alertRules = `groups:
  - name: gpuchaos-e2e
    rules:
      - alert: GpuMissing
        expr: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP) < 8
        for: 3s
        labels: {severity: critical}
        annotations:
          summary: "{{ $labels.Hostname }} exports {{ $value }} GPUs instead of 8"
      - alert: GpuXidError
        expr: DCGM_FI_DEV_XID_ERRORS > 0
        labels: {severity: warning}
        annotations:
          summary: "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $value }}"
`

const experiment = `apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata: {name: e2e-fallen-off-bus}
spec:
  selector: {nodes: [gpu-node-0], gpus: ["3"], mode: one}
  faults: [{id: hardware.fallen-off-bus}]
  duration: 40s
  steadyState:
    - name: twin-scraped
      probe: {prometheus: {query: 'count(up{job="` + scrapeJob + `"} == 1)', value: 1, tolerance: 0}}
  expectations:
    - {name: GpuMissing, within: 30s, probe: {prometheus: {alert: GpuMissing}}}
    - {name: GpuXidError, within: 30s, probe: {prometheus: {alert: GpuXidError}}}
    - name: gpu-count
      within: 30s
      probe: {prometheus: {query: count by (Hostname) (DCGM_FI_DEV_GPU_TEMP), op: "<", value: 8}}
`

// TestPrometheusLiveLoop is the live loop end to end: a real
// Prometheus scrapes a live twin every second and evaluates real alert
// rules; the engine makes GPU 3 of gpu-node-0 fall off the bus and judges
// the alerts through the HTTP API.
func TestPrometheusLiveLoop(t *testing.T) {
	ctx := needPrometheus(t, 3*time.Minute)
	began := time.Now()

	// The twin, served on a free loopback port.
	runner, err := live.New(ctx, live.Options{Warmup: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	twinAddr := serveTwin(t, runner)

	// Prometheus, scraping it.
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yml")
	writeFile(t, rules, alertRules)
	config := filepath.Join(dir, "prometheus.yml")
	writeFile(t, config, fmt.Sprintf(prometheusConfig, rules, twinAddr))
	promURL := testutil.StartPrometheus(t, config, filepath.Join(dir, "data"), 30*time.Second)
	client := &http.Client{}
	t.Cleanup(client.CloseIdleConnections)
	api, err := promapi.New(promapi.Options{URL: promURL, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(ctx, t, "Prometheus to scrape the twin", func() (bool, error) {
		res, err := api.Query(ctx, `up{job="`+scrapeJob+`"} == 1 and on() count(DCGM_FI_DEV_GPU_TEMP) == 16`)
		return len(res) == 1, err
	})
	ready := time.Now()

	exp, err := v1alpha1.Load([]byte(experiment), "e2e.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exp.Default()
	if err := exp.Validate(v1alpha1.ValidateOptions{
		CheckFault:    catalog.CheckSpec,
		KnownDetector: func(s string) bool { _, ok := probe.LookupDetector(s); return ok },
	}); err != nil {
		t.Fatal(err)
	}
	tgt := livetarget.New(runner, promURL)
	tgt.Client = client
	eng := engine.New(engine.Options{
		Target:         tgt,
		PollInterval:   time.Second,
		RecoveryWindow: 20 * time.Second,
		OnEvent: func(ev engine.Event) {
			t.Logf("%+7.1fs %-12s %-12s %s", ev.Offset, ev.Kind, ev.Name, ev.Detail)
		},
	})
	rec, err := eng.Run(ctx, exp)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("set-up %.1fs, experiment %.1fs", ready.Sub(began).Seconds(), time.Since(ready).Seconds())

	want := map[string]string{"GpuMissing": engine.Pass, "GpuXidError": engine.Missed, "gpu-count": engine.Pass}
	for _, v := range rec.Verdicts {
		ttd := "none"
		if v.TTDSeconds != nil {
			ttd = fmt.Sprintf("%.1fs", *v.TTDSeconds)
		}
		t.Logf("verdict %-11s %-6s ttd %s: %s", v.Name, v.Verdict, ttd, v.Detail)
		if v.Verdict != want[v.Name] {
			t.Errorf("%s: verdict %s, want %s (%s)", v.Name, v.Verdict, want[v.Name], v.Detail)
		}
		if v.Verdict != engine.Pass {
			continue
		}
		// Twin sample (1 s), Prometheus scrape (1 s), rule evaluation
		// (1 s), the for: 3s and the engine's poll (1 s): a few seconds.
		if v.TTDSeconds == nil || *v.TTDSeconds <= 0 || *v.TTDSeconds >= 30 {
			t.Errorf("%s: time to detect %v s, want between 0 and 30", v.Name, v.TTDSeconds)
		}
		if !hasSubject(v.Subjects, "gpu-node-0") {
			t.Errorf("%s: subjects %+v, want gpu-node-0", v.Name, v.Subjects)
		}
		if v.ClearedSeconds == nil {
			t.Errorf("%s did not clear within the recovery window", v.Name)
		}
	}
	if len(rec.Verdicts) != len(want) {
		t.Errorf("%d verdicts, want %d", len(rec.Verdicts), len(want))
	}
	if m, x := verdict(rec, "GpuMissing"), verdict(rec, "gpu-count"); m != nil && x != nil && m.TTDSeconds != nil && x.TTDSeconds != nil &&
		*m.TTDSeconds < *x.TTDSeconds+2 {
		t.Errorf("GpuMissing fired %.1fs after injection, the raw count dropped at %.1fs: the rule's for: 3s is not honoured",
			*m.TTDSeconds, *x.TTDSeconds)
	}
	runner.WithTwin(func(tw *twin.Twin) {
		if a := tw.Active(); len(a) != 0 {
			t.Errorf("faults still applied after the run: %v", a)
		}
	})
}

func verdict(rec *engine.Record, name string) *engine.Verdict {
	for i := range rec.Verdicts {
		if rec.Verdicts[i].Name == name {
			return &rec.Verdicts[i]
		}
	}
	return nil
}

func hasSubject(subs []probe.Subject, node string) bool {
	for _, s := range subs {
		if s.Node == node {
			return true
		}
	}
	return false
}

// serveTwin runs the twin and serves it on a free loopback port until the
// test ends, and returns the address.
func serveTwin(t *testing.T, r *live.Runner) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- r.Start(ctx) }()
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			done <- err
			return
		}
		done <- nil
	}()
	t.Cleanup(func() {
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("stop serving the twin: %v", err)
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("twin: %v", err)
			}
		}
		if n := r.MissedTicks(); n > 0 {
			t.Logf("the twin missed %d ticks", n)
		}
	})
	return ln.Addr().String()
}

// needPrometheus fails the test without Debian's Prometheus server and
// returns a context that ends after limit, or 10 s before the test's own
// deadline, whichever is first, so a hang fails with the test's logs.
func needPrometheus(t *testing.T, limit time.Duration) context.Context {
	t.Helper()
	testutil.NeedPrometheus(t)
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	t.Cleanup(cancel)
	if dl, ok := t.Deadline(); ok {
		var c context.CancelFunc
		ctx, c = context.WithDeadline(ctx, dl.Add(-10*time.Second))
		t.Cleanup(c)
	}
	return ctx
}

// waitUntil waits for cond (testutil.Eventually) until ctx's deadline;
// an error from cond is retried, and logged when it changes so that a
// wait in vain shows why.
func waitUntil(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	within := time.Minute
	if dl, ok := ctx.Deadline(); ok {
		within = time.Until(dl)
	}
	var last string
	testutil.Eventually(t, within, what, func() bool {
		ok, err := cond()
		if err != nil && err.Error() != last {
			last = err.Error()
			t.Logf("waiting for %s: %v", what, err)
		}
		return ok
	})
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
