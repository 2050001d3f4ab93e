package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.yaml.in/yaml/v3"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/fault/twinfault"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
	"github.com/gpuchaos/gpuchaos/internal/twin"
	"github.com/gpuchaos/gpuchaos/internal/twin/live"
)

// The intervals both sides run at: the twin's series are sampled, and
// Prometheus scrapes them, every agreeScrape; groups that set no interval
// are evaluated every agreeEval (the rules below set their own).
const (
	// Two seconds, not one: under -race on two busy cores a 1 s scrape of
	// four twins' pages timed out now and then, and a failed scrape marks
	// the series stale and restarts every pending for:.
	agreeScrape = 2 * time.Second
	agreeEval   = 10 * time.Second
	// agreeWarmup is how long each twin runs fault-free before the fault,
	// on both sides: coverage's default.
	agreeWarmup = 20 * time.Minute
	// agreeLead is how far ahead the first injection is planned: the
	// twins' warm-up, Prometheus' start and one evaluation of every group
	// over scraped data fit in it on an idle machine; a busy one moves the
	// injection to a later evaluation.
	agreeLead = 30 * time.Second
)

const (
	zhaodong    = "internal/detect/rules/testdata/public/zhaodong-arista-dcgm-fake-gpu-exporter-gpu_alerts.yaml"
	utkuozdemir = "internal/detect/rules/testdata/public/utkuozdemir-nvidia_gpu_exporter-prometheusrule.yaml"
)

// agreements are the rules whose time to detect a live Prometheus measures
// against coverage's prediction: three rules of the public corpus — the
// arista file's two temperature alerts (its only rules with a for: of a
// minute or less that the twin can make fire, the second under two
// faults) and nvidia_gpu_exporter's own NvidiaGpuPowerBrake (for: 5m, the
// shortest of that chart's rules that catch a fault) — and the
// recommended pack's NodeGpuCountDropped, once predicted at 90 s and
// measured at 64–76 s.
var agreements = []struct {
	file, alert, fault string
}{
	{zhaodong, "GPUCriticalTemperature", "hardware.thermal-throttle"},
	{zhaodong, "GPUHighTemperature", "hardware.thermal-throttle"},
	{zhaodong, "GPUHighTemperature", "exhaustion.thermal-soak"},
	{utkuozdemir, "NvidiaGpuPowerBrake", "hardware.power-brake"},
	{"internal/detect/rules/packs/recommended.yaml", "NodeGpuCountDropped", "hardware.fallen-off-bus"},
}

// TestPrometheusAgreesWithCoverage holds the virtual clock to the real
// thing: for each rule above, the time to detect that coverage predicts
// equals, within one evaluation interval of the rule's group, what a real
// Prometheus measures on a live twin with the same seed, spec, warm-up,
// fault, rules and intervals.
//
// Coverage's fault starts just after a scrape and at an evaluation. Each
// live twin is started so that its fault does too: the twin runs from
// exactly the warm-up before an instant on Prometheus' evaluation grid of
// the rule's group (2.x puts a group at a hash of its file and name within
// its interval), and the fault is applied there. The twins then play the
// same series, and Prometheus sees each change up to one scrape (and the
// twin's tick) later than the prediction does, which moves the firing
// evaluation by at most one. Detection is read from Prometheus' own
// timestamps, the first sample of the alert's firing ALERTS series, so a
// slow machine changes neither side: only a scrape path slower than an
// evaluation interval could.
//
// One twin per fault, each its own scrape job, since coverage runs each
// fault on a twin of its own; their Hostname labels are prefixed with the
// job so that rules counting a node's GPUs count one twin's.
func TestPrometheusAgreesWithCoverage(t *testing.T) {
	ctx := needPrometheus(t, 12*time.Minute)
	const seed = 1
	spec := twin.Default()
	spec.Exporter.ScrapeInterval = agreeScrape
	spec.Exporter.Exporters = append(twin.DefaultExporters(), twin.ExporterDCGM1x, twin.ExporterNVIDIAGPU)

	// The rule files, by absolute path: that path is the file Prometheus
	// names the groups by, and so part of their phase.
	var paths []string
	plain := map[string]string{}
	for _, a := range agreements {
		if _, ok := plain[a.file]; !ok {
			plain[a.file] = plainRuleFile(t, filepath.Join("..", "..", "..", a.file))
		}
		if p := plain[a.file]; !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	set, err := rules.LoadFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}

	// One run per fault, each with its own twin and evaluation grid.
	var runs []*agreeRun
	for _, a := range agreements {
		p := plain[a.file]
		i := slices.IndexFunc(set.Rules, func(r *rules.Rule) bool {
			return r.Source == p && r.Name == a.alert && r.Kind == rules.KindAlert
		})
		if i < 0 {
			t.Fatalf("%s: no alert %s", a.file, a.alert)
		}
		r := set.Rules[i]
		iv := r.Interval
		if iv == 0 {
			iv = agreeEval
		}
		j := slices.IndexFunc(runs, func(run *agreeRun) bool { return run.fault.ID == a.fault })
		if j < 0 {
			f, ok := catalog.Lookup(a.fault)
			if !ok {
				t.Fatalf("no fault %s", a.fault)
			}
			runs = append(runs, &agreeRun{fault: f, job: fmt.Sprintf("twin-%d", len(runs)), file: p, group: r.Group, interval: iv})
			j = len(runs) - 1
		}
		run := runs[j]
		if run.file != p || run.group != r.Group {
			t.Fatalf("%s's rules are in two groups; the test injects it on one group's evaluation grid", a.fault)
		}
		run.alerts = append(run.alerts, a.alert)
	}

	// Coverage's prediction, for the targets to inject on and the times.
	pred := predict(ctx, t, spec, seed, set, runs, agreeWarmup)
	for _, run := range runs {
		run.ref = pred[run.fault.ID].Target
	}

	// The planned injections, and the twins started the warm-up before.
	plan := time.Now().Add(agreeLead)
	for _, run := range runs {
		run.at = nextEval(plan, run.offset(), run.interval)
		run.start = run.at.Add(-agreeWarmup)
		runner, err := live.New(ctx, live.Options{Twin: twin.Options{Spec: spec, Seed: seed, Start: run.start}})
		if err != nil {
			t.Fatal(err)
		}
		run.runner = runner
		run.addr = serveTwin(t, runner)
	}

	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	writeFile(t, config, agreeConfig(paths, runs))
	promURL := testutil.StartPrometheus(t, config, filepath.Join(dir, "data"), 30*time.Second)
	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)

	// Every group under test has evaluated scraped data before any fault:
	// NodeGpuCountDropped compares with the count its group recorded.
	waitUntil(ctx, t, "Prometheus to scrape every twin", func() (bool, error) {
		// Prometheus' own up for each twin: the twins also serve the up of
		// the targets they stand in for, which arrive with exported_job.
		res, err := rawQuery(ctx, client, promURL, fmt.Sprintf(`count(up{exported_job=""} == 1) == %d and count(DCGM_FI_DEV_GPU_TEMP) == %d`, len(runs), 16*len(runs)))
		return len(res) == 1, err
	})
	scraped := time.Now()
	waitUntil(ctx, t, "Prometheus to evaluate every group on scraped data", func() (bool, error) {
		return groupsEvaluatedSince(ctx, client, promURL, runs, scraped)
	})

	// Inject, each on its group's grid, each twin at once.
	var wg sync.WaitGroup
	errs := make([]error, len(runs))
	for i, run := range runs {
		wg.Go(func() { errs[i] = run.inject(ctx) })
	}
	wg.Wait()
	for i, run := range runs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Logf("%s on %s injected at %s (%s after the planned instant), its twin started %s before",
			run.fault.ID, run.ref.Key(), run.at.Format("15:04:05.000"), run.at.Sub(run.start.Add(agreeWarmup)), run.at.Sub(run.start))
	}

	// Predictions again where the injection moved: the twin's warm-up
	// before it is longer by whole evaluation intervals.
	for _, run := range runs {
		if w := run.at.Sub(run.start); w != agreeWarmup {
			pred[run.fault.ID] = predict(ctx, t, spec, seed, set, []*agreeRun{run}, w)[run.fault.ID]
		}
	}

	// Wait for every alert to fire, by Prometheus' timestamps; past one
	// evaluation after the predicted firing (and a grace for a slow
	// machine's scrapes and evaluations to land) the answer is known.
	for _, run := range runs {
		fr := pred[run.fault.ID]
		for _, alert := range run.alerts {
			predicted, ok := predictedTTD(fr, alert)
			if !ok {
				t.Errorf("%s under %s: coverage predicts no detection (%+v)", alert, run.fault.ID, fr.Cells)
				continue
			}
			giveUp := run.at.Add(predicted + 3*run.interval + 15*time.Second)
			var fired, pending time.Time
			for {
				var err error
				if fired, err = firstAlertSample(ctx, client, promURL, alert, "firing", run.job); err != nil {
					t.Fatal(err)
				}
				if !fired.IsZero() || time.Now().After(giveUp) || ctx.Err() != nil {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			pending, _ = firstAlertSample(ctx, client, promURL, alert, "pending", run.job)
			if fired.IsZero() {
				t.Errorf("%s under %s: predicted to fire %s after injection; Prometheus had not fired it %s after (%s)",
					alert, run.fault.ID, predicted, time.Since(run.at).Round(time.Second), run.health(ctx, client, promURL))
				continue
			}
			measured := fired.Sub(run.at.Truncate(time.Millisecond))
			active := "before ALERTS were written"
			if !pending.IsZero() {
				active = pending.Sub(run.at.Truncate(time.Millisecond)).String()
			}
			t.Logf("%-22s %-25s group interval %s: predicted %s, measured %s (pending at %s)", alert, run.fault.ID, run.interval, predicted, measured, active)
			if measured%run.interval != 0 {
				t.Errorf("%s fired at %s, %s after the injection: not on the evaluation grid computed for group %q of %s; is this Prometheus 2.x?",
					alert, fired.Format(time.RFC3339Nano), measured, run.group, run.file)
			}
			if d := measured - predicted; d > run.interval || d < -run.interval {
				t.Errorf("%s under %s: measured %s, predicted %s: %s apart, more than the group's evaluation interval (%s; %s)",
					alert, run.fault.ID, measured, predicted, d, run.interval, run.health(ctx, client, promURL))
			}
		}
	}
}

// health says what could have made Prometheus late for this run: scrapes
// of its twin that failed since the injection (each marks the twin's
// series stale and restarts a pending for:) and virtual time the live
// twin gave up because it could not keep up with the wall clock.
func (r *agreeRun) health(ctx context.Context, c *http.Client, base string) string {
	since := time.Since(r.at).Round(time.Second) + time.Second
	q := fmt.Sprintf(`count_over_time(up{job=%q,exported_job=""}[%ds]) > sum_over_time(up{job=%q,exported_job=""}[%ds])`,
		r.job, int(since.Seconds()), r.job, int(since.Seconds()))
	failed := "no failed scrape"
	if res, err := rawQuery(ctx, c, base, q); err != nil {
		failed = "failed scrapes unknown: " + err.Error()
	} else if len(res) > 0 {
		failed = "some scrapes of the twin failed since the injection"
	}
	return fmt.Sprintf("%s; the live twin gave up %s of virtual time", failed, r.runner.Slipped())
}

// plainRuleFile returns the absolute path of a plain rule file with the
// rules of path: path itself, or for a PrometheusRule resource (which
// Prometheus cannot load; the operator hands it the spec) its spec written
// to a file of the same name in a temporary folder.
func plainRuleFile(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(abs)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Kind string    `yaml:"kind"`
		Spec yaml.Node `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if doc.Kind != "PrometheusRule" {
		return abs
	}
	out, err := yaml.Marshal(&doc.Spec)
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(t.TempDir(), filepath.Base(abs))
	if err := os.WriteFile(plain, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return plain
}

// agreeRun is one fault's live run: its twin, scrape job, the group whose
// evaluations it is injected on, and when.
type agreeRun struct {
	fault       *catalog.Fault
	alerts      []string
	job         string
	file, group string
	interval    time.Duration
	ref         inventory.Ref
	// start is when the twin began, at the warm-up before the injection
	// as first planned; at is the injection.
	start, at time.Time
	runner    *live.Runner
	addr      string
}

// offset is where Prometheus 2.x evaluates the run's group within its
// interval (rules/manager.go, Group.EvalTimestamp): the hash of the
// group's labels {file, name}, in Prometheus' label order and encoding of
// 2.x (name, 0xff, value, 0xff for each, sorted by name), modulo the
// interval.
func (r *agreeRun) offset() time.Duration {
	b := []byte("file\xff" + r.file + "\xffname\xff" + r.group + "\xff")
	return time.Duration(xxhash.Sum64(b) % uint64(r.interval))
}

// nextEval is the first evaluation at or after t of a group evaluated at
// offset within every interval since the Unix epoch.
func nextEval(t time.Time, offset, interval time.Duration) time.Time {
	ns := t.UnixNano() - int64(offset)
	k := ns / int64(interval)
	if ns%int64(interval) != 0 {
		k++
	}
	return time.Unix(0, k*int64(interval)+int64(offset))
}

// inject applies the fault at r.at on the twin's clock, right after the
// twin's scrape there, as coverage does at the end of its warm-up. Should
// the twin or the wall clock already be past it (a slow machine), the
// injection moves to a later evaluation of the group.
func (r *agreeRun) inject(ctx context.Context) error {
	vals, err := r.fault.Resolve(nil)
	if err != nil {
		return err
	}
	for {
		for time.Until(r.at) < 200*time.Millisecond {
			r.at = r.at.Add(r.interval)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(r.at) - 100*time.Millisecond):
		}
		done := false
		r.runner.WithTwin(func(tw *twin.Twin) {
			if tw.Now().After(r.at) || time.Now().After(r.at) {
				return
			}
			if err = tw.Sleep(ctx, r.at.Sub(tw.Now())); err != nil {
				return
			}
			err = twinfault.New(r.fault, tw).Inject(ctx, "agreement/"+r.fault.ID, r.ref, vals)
			done = true
		})
		if err != nil || done {
			return err
		}
	}
}

// predict runs coverage for the runs' faults with warm-up w.
func predict(ctx context.Context, t *testing.T, spec twin.ClusterSpec, seed uint64, set *rules.Set, runs []*agreeRun, w time.Duration) map[string]*coverage.FaultResult {
	t.Helper()
	var faults []*catalog.Fault
	for _, r := range runs {
		faults = append(faults, r.fault)
	}
	res, err := coverage.Run(ctx, coverage.Options{Spec: spec, Seed: seed, Rules: set, Faults: faults, Detectors: []*probe.Detector{},
		EvalInterval: agreeEval, Warmup: w, Window: 10 * time.Minute, Deadline: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*coverage.FaultResult{}
	for _, fr := range res.Faults {
		if fr.Error != "" {
			t.Fatalf("coverage of %s: %s", fr.ID, fr.Error)
		}
		out[fr.ID] = fr
	}
	return out
}

func predictedTTD(fr *coverage.FaultResult, alert string) (time.Duration, bool) {
	c, ok := fr.Cells[alert]
	if !ok || c.TTDSeconds == nil {
		return 0, false
	}
	return time.Duration(*c.TTDSeconds * float64(time.Second)), true
}

// agreeConfig scrapes every run's twin under its job and loads the rule
// files.
func agreeConfig(ruleFiles []string, runs []*agreeRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\nrule_files:\n", agreeScrape, agreeEval)
	for _, f := range ruleFiles {
		fmt.Fprintf(&b, "  - %q\n", f)
	}
	b.WriteString("scrape_configs:\n")
	for _, r := range runs {
		fmt.Fprintf(&b, `  - job_name: %s
    scrape_interval: %s
    scrape_timeout: %s
    static_configs: [{targets: [%q]}]
    metric_relabel_configs:
      - {source_labels: [Hostname], regex: "(.+)", target_label: Hostname, replacement: "%s/$1"}
`, r.job, agreeScrape, agreeScrape, r.addr, r.job)
	}
	return b.String()
}

// groupsEvaluatedSince reports whether Prometheus has evaluated every
// run's group since t (the rules API's lastEvaluation).
func groupsEvaluatedSince(ctx context.Context, c *http.Client, base string, runs []*agreeRun, t time.Time) (bool, error) {
	body, err := apiGet(ctx, c, base+"/api/v1/rules?type=alert")
	if err != nil {
		return false, err
	}
	type group struct {
		Name           string    `json:"name"`
		File           string    `json:"file"`
		LastEvaluation time.Time `json:"lastEvaluation"`
	}
	var r struct {
		Data struct {
			Groups []group `json:"groups"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return false, fmt.Errorf("decode rules: %w", err)
	}
	for _, run := range runs {
		i := slices.IndexFunc(r.Data.Groups, func(g group) bool { return g.Name == run.group && g.File == run.file })
		if i < 0 {
			return false, fmt.Errorf("Prometheus has no group %q of %s", run.group, run.file)
		}
		if !r.Data.Groups[i].LastEvaluation.After(t) {
			return false, nil
		}
	}
	return true, nil
}

// firstAlertSample returns the time of the first sample of alert's ALERTS
// series in state, for the run scraped as job (its series carry the job,
// or a Hostname the job prefixes), or the zero time if there is none:
// Prometheus writes it at the evaluation that went pending or fired.
func firstAlertSample(ctx context.Context, c *http.Client, base, alert, state, job string) (time.Time, error) {
	res, err := rawQuery(ctx, c, base, fmt.Sprintf(`ALERTS{alertname=%q,alertstate=%q}[15m]`, alert, state))
	if err != nil {
		return time.Time{}, err
	}
	var first time.Time
	for _, s := range res {
		if s.Metric["job"] != job && !strings.HasPrefix(s.Metric["Hostname"], job+"/") {
			continue
		}
		for _, v := range s.Values {
			if first.IsZero() || v.Before(first) {
				first = v
			}
		}
	}
	return first, nil
}

// rawSeries is one series of a query's result with its sample times:
// a vector's one, or a range vector's raw samples.
type rawSeries struct {
	Metric map[string]string
	Values []time.Time
}

// rawQuery runs an instant query and returns sample times exactly as the
// API gives them (seconds with milliseconds, read as a decimal).
func rawQuery(ctx context.Context, c *http.Client, base, q string) ([]rawSeries, error) {
	body, err := apiGet(ctx, c, base+"/api/v1/query?query="+url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	var r struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  []json.Number     `json:"value"`
				Values [][]json.Number   `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	d := json.NewDecoder(strings.NewReader(string(body)))
	d.UseNumber()
	if err := d.Decode(&r); err != nil {
		return nil, fmt.Errorf("query %s: decode: %w", q, err)
	}
	var out []rawSeries
	for _, e := range r.Data.Result {
		s := rawSeries{Metric: e.Metric}
		pairs := e.Values
		if e.Value != nil {
			pairs = append(pairs, e.Value)
		}
		for _, p := range pairs {
			if len(p) != 2 {
				return nil, fmt.Errorf("query %s: sample %v", q, p)
			}
			ts, err := apiTime(p[0].String())
			if err != nil {
				return nil, fmt.Errorf("query %s: %w", q, err)
			}
			s.Values = append(s.Values, ts)
		}
		out = append(out, s)
	}
	return out, nil
}

// apiTime reads the API's "1733100000.123" to the millisecond, without
// the rounding a float64 would bring.
func apiTime(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	whole, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("timestamp %q: %w", s, err)
	}
	ms := 0
	if frac != "" {
		frac = (frac + "000")[:3]
		if ms, err = strconv.Atoi(frac); err != nil {
			return time.Time{}, fmt.Errorf("timestamp %q: %w", s, err)
		}
	}
	return time.UnixMilli(whole*1000 + int64(ms)), nil
}

func apiGet(ctx context.Context, c *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", u, resp.StatusCode, body)
	}
	return body, nil
}
