// Package coverage computes the detection matrix: every catalogue fault run
// as an experiment on its own digital twin against every detector, with the
// time each took to notice, and the job's goodput under each fault. It runs
// on the twin's virtual clock, so the whole catalogue takes seconds.
package coverage

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
	"github.com/gpuchaos/gpuchaos/internal/run/target/twintarget"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// Options configure a coverage run. Zero values take the defaults.
type Options struct {
	// Spec is the twin's cluster; zero means twin.Default().
	Spec twin.ClusterSpec
	// Faults to run; nil means the whole catalogue.
	Faults []*catalog.Fault
	// Detectors are the built-in detectors to judge; nil means all of
	// them, an empty slice none.
	Detectors []*probe.Detector
	// Rules are alert and recording rules to judge with the real PromQL
	// engine; nil means none.
	Rules *rules.Set
	// OptIn lists the opt-in exporter counters the rules' static analysis
	// may count on, beside those the twin's spec enables.
	OptIn []string
	// Exporters names the exporters the fleet runs (rules.Exporters lists
	// them): the rules' static analysis counts on their metrics and the
	// twin exports the GPU exporters' series among them. nil means those
	// Spec declares (by default rules.DefaultExporters). Counters, when
	// not nil, is the exact list of what dcgm-exporter exports (the
	// fleet's counters CSV).
	Exporters []string
	Counters  []string
	// Recommended, when set, is the pack from which a rule is proposed for
	// every fault that no rule of Rules catches, and verified.
	Recommended *rules.Set
	Seed        uint64
	// Warmup runs the twin fault-free before injection (default 20m), so
	// baselines exist; Window is how long each fault stays injected
	// (default 20m); Deadline is the time-to-detect that counts as a pass
	// (default 10m).
	Warmup, Window, Deadline time.Duration
	// EvalInterval is the evaluation interval of rule groups that set
	// none, as Prometheus' global evaluation_interval; zero means
	// promeval.DefaultInterval. How often the twin's series are sampled
	// (Prometheus' scrape interval) is Spec.Exporter.ScrapeInterval.
	// Times to detect are those of a fault that starts just after a
	// scrape and at an evaluation of every group (the warm-up ends on
	// both grids). A real fault starts anywhere between them, which moves
	// a real Prometheus' time by up to one evaluation and one scrape
	// interval either way.
	EvalInterval time.Duration
	// Parallel is the number of twins run at once; default GOMAXPROCS.
	Parallel int
	// Progress, if set, is called after each fault run finishes: done of
	// total in stage StageFaults (the matrix), then in StageSuggestions
	// (the re-runs that verify suggestions). Calls never overlap and done
	// only grows within a stage; they come from the goroutines that ran
	// the faults, so a slow Progress slows the run.
	Progress func(stage string, done, total int)
}

// The stages Options.Progress reports.
const (
	StageFaults      = "faults"
	StageSuggestions = "suggestions"
)

// MaxRules bounds the rules one coverage run evaluates, alert and
// recording rules of every file together. A rule that can fire costs about
// 0.5 ms of CPU per fault (BenchmarkCoverage), so 20,000 against the whole
// catalogue are some 8 minutes of CPU and a few GB allocated; past that a
// run is better split by team or file.
const MaxRules = 20_000

// TooManyRulesError is Run's refusal of a rule set over MaxRules, before
// any twin is built.
type TooManyRulesError struct {
	// Rules is how many the set holds.
	Rules int
}

func (e *TooManyRulesError) Error() string {
	return fmt.Sprintf("%d rules, over the %d one coverage run evaluates; split them by file or team", e.Rules, MaxRules)
}

// Cell is one fault × detector outcome.
type Cell struct {
	Fault      string   `json:"fault"`
	Detector   string   `json:"detector"`
	Detected   bool     `json:"detected"`
	TTDSeconds *float64 `json:"ttd_seconds"`
	Verdict    string   `json:"verdict"`
}

// FaultResult is one fault's run.
type FaultResult struct {
	Fault  *catalog.Fault  `json:"-"`
	ID     string          `json:"id"`
	Target inventory.Ref   `json:"target"`
	Record *engine.Record  `json:"-"`
	Job    JobImpact       `json:"job"`
	By     []string        `json:"detected_by"`
	First  *float64        `json:"fastest_ttd_seconds"`
	Error  string          `json:"error,omitempty"`
	Cells  map[string]Cell `json:"-"`
}

// JobImpact is what the fault cost the training job over the fault window
// and the recovery window after it.
type JobImpact struct {
	Goodput      float64 `json:"goodput"`
	LostGPUHours float64 `json:"lost_gpu_hours"`
	Restarts     int     `json:"restarts"`
}

// Result is the whole matrix.
type Result struct {
	Faults    []*FaultResult `json:"faults"`
	Detectors []*Detector    `json:"detectors"`
	Matrix    []Cell         `json:"matrix"`
	// Rules reports every rule under test: static analysis and the faults
	// it caught.
	Rules []RuleReport `json:"rules"`
	// Suggestions propose and verify a recommended rule for every fault no
	// rule under test caught.
	Suggestions []Suggestion `json:"suggestions"`
	// Baseline is the fault-free twin over the same span: the job's
	// goodput, and the detectors that fired anyway (false positives).
	Baseline Baseline `json:"baseline"`
	// The run's shape, in seconds: how long each fault stayed injected,
	// the deadline that makes a detection a pass, and the watch after
	// recovery.
	WindowSeconds   float64 `json:"window_seconds"`
	DeadlineSeconds float64 `json:"deadline_seconds"`
	RecoverySeconds float64 `json:"recovery_seconds"`
}

// Baseline is the fault-free reference run.
type Baseline struct {
	Job JobImpact `json:"job"`
	// FalsePositives names the detectors that fired on the fault-free
	// twin; Noisy says how often each did.
	FalsePositives []string `json:"false_positives"`
	Noisy          []Noise  `json:"noisy"`
}

// Noise is how often one detector fired on the fault-free twin, over the
// span a fault run watches (the fault window and the recovery after it).
type Noise struct {
	Detector string `json:"detector"`
	// Firings counts the times it began to fire: for a rule, its alerts'
	// firing episodes, one per series; for a watcher, its polls that held
	// after one that did not.
	Firings int     `json:"firings"`
	Seconds float64 `json:"span_seconds"`
}

// Count says how often it fired: "fired 4 times in 30m".
func (n Noise) Count() string {
	times := "times"
	if n.Firings == 1 {
		times = "time"
	}
	span := strings.TrimSuffix((time.Duration(n.Seconds) * time.Second).String(), "0s")
	if strings.HasSuffix(span, "h0m") {
		span = strings.TrimSuffix(span, "0m")
	}
	return fmt.Sprintf("fired %d %s in %s", n.Firings, times, span)
}

// Text is Count said of the fault-free twin.
func (n Noise) Text() string { return n.Count() + " on the fault-free twin" }

// Noisy is the verdict of every cell of a detector that fires on the
// fault-free twin, and the status of its rule: what it fires on says
// nothing about the fault, so it gets no detection credit.
const Noisy = "noisy"

// discredit takes detection credit from the noisy detectors: their cells
// become Noisy, and each fault's detectors and fastest time are what the
// others noticed.
func (res *Result) discredit() {
	noisy := map[string]Noise{}
	for _, n := range res.Baseline.Noisy {
		noisy[n.Detector] = n
	}
	if len(noisy) == 0 {
		return
	}
	for _, fr := range res.Faults {
		for name, c := range fr.Cells {
			if _, ok := noisy[name]; ok {
				c.Detected, c.TTDSeconds, c.Verdict = false, nil, Noisy
				fr.Cells[name] = c
			}
		}
		fr.By = slices.DeleteFunc(fr.By, func(name string) bool { _, ok := noisy[name]; return ok })
		fr.First = nil
		for _, name := range fr.By {
			if t := fr.Cells[name].TTDSeconds; t != nil && (fr.First == nil || *t < *fr.First) {
				fr.First = t
			}
		}
	}
	// A rule the analysis calls unknown keeps that status: it fires on the
	// twin because the twin lacks the exporter it reads (absent() of an
	// unknown metric), which says nothing of a fleet that runs it.
	for _, d := range res.Detectors {
		if n, ok := noisy[d.Name]; ok {
			d.Status, d.Reason = discredited(d.Status, d.Reason, n)
		}
	}
	for i, r := range res.Rules {
		if n, ok := noisy[r.Detector]; ok && r.Detector != "" {
			res.Rules[i].Status, res.Rules[i].Reason = discredited(r.Status, r.Reason, n)
		}
	}
}

// discredited is the status and reason of a detector that fired on the
// fault-free twin.
func discredited(status, reason string, n Noise) (string, string) {
	if status == string(rules.StatusUnknown) {
		return status, reason + "; " + n.Text() + ", and it gets no detection credit"
	}
	return Noisy, n.Text() + "; it gets no detection credit"
}

// jobName is the training job of the default twin; faults that need a job
// target it.
func jobName(inv inventory.Inventory) string {
	if len(inv.Jobs) > 0 {
		return inv.Jobs[0].Name
	}
	return ""
}

func (o *Options) defaults() {
	// One list of exporters serves the rules' analysis and the twin, so a
	// rule the analysis keeps reads on the twin what the fleet exports:
	// --exporter when given, else what the spec declares (by default
	// rules.DefaultExporters, which twin.DefaultExporters equals).
	if reflect.ValueOf(o.Spec).IsZero() {
		o.Spec = twin.Default()
	}
	if o.Exporters == nil {
		o.Exporters = slices.Clone(o.Spec.Exporter.Exporters)
	} else {
		o.Spec.Exporter.Exporters = slices.Clone(o.Exporters)
	}
	if o.Faults == nil {
		o.Faults = catalog.All()
	}
	if o.Detectors == nil {
		o.Detectors = probe.Detectors()
	}
	if o.Warmup == 0 {
		o.Warmup = 20 * time.Minute
	}
	if o.Window == 0 {
		o.Window = 20 * time.Minute
	}
	if o.Deadline == 0 {
		o.Deadline = 10 * time.Minute
	}
	if o.Parallel <= 0 {
		o.Parallel = runtime.GOMAXPROCS(0)
	}
}

// recoveryWindow is how long each run watches after recovery, for time to
// recover and the job's cost.
const recoveryWindow = 10 * time.Minute

// The fault-free baseline relaunches its job cleanly baselineRelaunchAfter
// into the observed span, down for baselineRelaunchDown (process exit, start
// and checkpoint load on the same GPUs), so a rule that fires on every job
// launch fires there too (observation 9 of scripts/coverage-observations).
const (
	baselineRelaunchAfter = 5 * time.Minute
	baselineRelaunchDown  = 30 * time.Second
)

// Run computes the matrix.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if opts.Rules != nil && len(opts.Rules.Rules) > MaxRules {
		return nil, &TooManyRulesError{Rules: len(opts.Rules.Rules)}
	}
	opts.defaults()
	res := &Result{Detectors: Builtins(opts.Detectors), Faults: make([]*FaultResult, len(opts.Faults)),
		Rules: []RuleReport{}, Suggestions: []Suggestion{},
		WindowSeconds: opts.Window.Seconds(), DeadlineSeconds: opts.Deadline.Seconds(), RecoverySeconds: recoveryWindow.Seconds()}
	r := &runner{opts: opts, optIn: append(slices.Clone(opts.OptIn), opts.Spec.Exporter.OptIn...), eval: evalOptions(opts.EvalInterval)}
	r.builtin = builtinRules(res.Detectors)
	if opts.Rules != nil {
		r.rules = prepare(opts.Rules, rules.AnalyzeOptions{OptIn: r.optIn, Exporters: opts.Exporters, Counters: opts.Counters})
		tw, err := newTwin(opts)
		if err != nil {
			return nil, err
		}
		exported := map[string]bool{}
		for _, s := range tw.Series() {
			exported[s.Metric] = true
		}
		r.rules.noteOffTwin(exported)
		res.Detectors = append(res.Detectors, r.rules.cols...)
		res.Rules = r.rules.reports
	}
	r.cols = res.Detectors
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		done     int
		firstErr error
	)
	jobs := make(chan int)
	for range opts.Parallel {
		wg.Go(func() {
			for i := range jobs {
				fr, err := r.runFault(ctx, opts.Faults[i], r.rules, true)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				res.Faults[i] = fr
				done++
				if opts.Progress != nil {
					opts.Progress(StageFaults, done, len(opts.Faults))
				}
				mu.Unlock()
			}
		})
	}
	var bl Baseline
	var blErr error
	wg.Go(func() { bl, blErr = r.baseline(ctx) })
feed:
	for i := range opts.Faults {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if firstErr != nil {
		return nil, firstErr
	}
	if blErr != nil {
		return nil, blErr
	}
	res.Baseline = bl
	res.discredit()
	for _, fr := range res.Faults {
		for _, d := range res.Detectors {
			res.Matrix = append(res.Matrix, fr.Cells[d.Name])
		}
	}
	for i := range res.Rules {
		// By its column, not its name: two files' same-named alerts are
		// two columns, and each keeps its own detections.
		col := res.Rules[i].Detector
		if col == "" {
			continue
		}
		for _, fr := range res.Faults {
			if fr.Cells[col].Detected {
				res.Rules[i].Detects = append(res.Rules[i].Detects, fr.ID)
			}
		}
	}
	if opts.Recommended != nil {
		sugg, err := r.suggest(ctx, res)
		if err != nil {
			return nil, err
		}
		res.Suggestions = sugg
	}
	return res, nil
}

// runner holds what every fault run of one coverage run shares.
type runner struct {
	opts Options
	cols []*Detector
	// rules is opts.Rules prepared, nil without rules; optIn the counters
	// the analysis counts on.
	rules *ruleSet
	// builtin holds the built-in detectors that are alerting rules, nil
	// when there are none; the others (the kernel-log watcher) run as the
	// engine's expectations.
	builtin *ruleSet
	optIn   []string
	// eval holds one PromQL engine for every evaluation (safe for
	// concurrent use) and the evaluation interval of groups that set none.
	eval promeval.Options
}

// evalOptions is what every evaluation of a run shares: one engine, whose
// subqueries without a step take the evaluation interval as Prometheus'
// take its global one, and the interval itself.
func evalOptions(interval time.Duration) promeval.Options {
	if interval <= 0 {
		interval = promeval.DefaultInterval
	}
	return promeval.Options{Engine: promeval.NewEngine(interval), Interval: interval}
}

func newTwin(opts Options) (*twin.Twin, error) {
	// Rules are evaluated over the whole of each twin's span, from its
	// start (a rule's [1h] window and its for: state reach back that
	// far), and each span is short (warm-up, window, recovery; the clean
	// hour): keep all of it rather than the default retention, which the
	// clean hour's 80 minutes would outrun.
	return twin.New(twin.Options{Spec: opts.Spec, Seed: opts.Seed, Retention: -1})
}

// selectorFor aims a fault at one representative object of its scope: GPU 3
// of the first node (rank 3 of the job), the first node, or the job.
func selectorFor(f *catalog.Fault, inv inventory.Inventory) v1alpha1.Selector {
	sel := v1alpha1.Selector{Mode: v1alpha1.ModeOne}
	node := inv.Nodes[0]
	gpu := min(3, len(node.GPUs)-1)
	switch f.Scope {
	case catalog.ScopeGPU:
		sel.Nodes, sel.GPUs = []string{node.Name}, []string{strconv.Itoa(node.GPUs[gpu].Index)}
	case catalog.ScopeNode:
		sel.Nodes = []string{node.Name}
	case catalog.ScopeRank:
		sel.Jobs, sel.Ranks = []string{jobName(inv)}, []int{gpu}
	case catalog.ScopeJob:
		sel.Jobs = []string{jobName(inv)}
	}
	return sel
}

// runFault runs one fault as an experiment on a fresh twin, then judges,
// when builtins is set, the built-in detectors (the log watcher as the
// engine's expectation, the rules evaluated over the recorded series), and
// set's alert rules evaluated over the recorded series.
func (r *runner) runFault(ctx context.Context, f *catalog.Fault, set *ruleSet, builtins bool) (*FaultResult, error) {
	opts := r.opts
	tw, err := newTwin(opts)
	if err != nil {
		return nil, fmt.Errorf("coverage of %s: %w", f.ID, err)
	}
	start := tw.Now()
	if err := tw.Sleep(ctx, opts.Warmup); err != nil {
		return nil, err
	}
	inv := tw.Inventory()
	exp := &v1alpha1.Experiment{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindExperiment},
		ObjectMeta: metav1.ObjectMeta{Name: "coverage"},
		Spec: v1alpha1.ExperimentSpec{
			Selector: selectorFor(f, inv),
			Faults:   []v1alpha1.FaultSpec{{ID: f.ID, Mechanism: "twin"}},
			Duration: v1alpha1.Duration{Duration: opts.Window},
			// A job-wide fault touches every GPU of the job; on a twin
			// that is the point, so the cap is the whole twin.
			BlastRadius: v1alpha1.BlastRadius{MaxNodes: len(inv.Nodes), MaxGPUs: gpuCount(inv)},
		},
	}
	if builtins {
		for _, d := range opts.Detectors {
			if d.AlertRule() != nil {
				continue
			}
			exp.Spec.Expectations = append(exp.Spec.Expectations, v1alpha1.Expectation{
				Detector: d.Name, Within: v1alpha1.Duration{Duration: opts.Deadline},
			})
		}
	}
	job := jobName(inv)
	before, _ := tw.Job(job)
	eng := engine.New(engine.Options{Target: twintarget.New(tw), Seed: opts.Seed, RecoveryWindow: recoveryWindow})
	rec, runErr := eng.Run(ctx, exp)
	if rec == nil {
		return nil, fmt.Errorf("coverage of %s: %w", f.ID, runErr)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// Hold every run to the same span so job figures compare.
	if rest := rec.InjectedAt.Add(opts.Window + recoveryWindow).Sub(tw.Now()); rest > 0 {
		if err := tw.Sleep(ctx, rest); err != nil {
			return nil, err
		}
	}
	after, _ := tw.Job(job)
	fr := &FaultResult{Fault: f, ID: f.ID, Record: rec, Job: impact(before, after, len(tw.Inventory().Jobs[0].Ranks)), By: []string{}, Cells: map[string]Cell{}}
	if len(rec.Plan.Injections) > 0 {
		fr.Target = rec.Plan.Injections[0].Ref
	}
	if runErr != nil {
		fr.Error = runErr.Error()
	}
	for _, v := range rec.Verdicts {
		c := Cell{Fault: f.ID, Detector: v.Name, Verdict: v.Verdict, TTDSeconds: v.TTDSeconds}
		c.Detected = v.TTDSeconds != nil
		if c.Detected {
			fr.By = append(fr.By, v.Name)
			if fr.First == nil || *v.TTDSeconds < *fr.First {
				fr.First = v.TTDSeconds
			}
		}
		fr.Cells[v.Name] = c
	}
	sets := []*ruleSet{set}
	if builtins {
		sets = append(sets, r.builtin)
	}
	for _, set := range sets {
		if set == nil {
			continue
		}
		cells, err := ruleCells(ctx, r.eval, set, tw, start, rec, opts.Window, opts.Deadline, f.ID)
		if err != nil {
			return nil, fmt.Errorf("coverage of %s: %w", f.ID, err)
		}
		for name, c := range cells {
			fr.Cells[name] = c
			if c.Detected {
				fr.By = append(fr.By, name)
				if fr.First == nil || *c.TTDSeconds < *fr.First {
					fr.First = c.TTDSeconds
				}
			}
		}
	}
	slices.Sort(fr.By)
	return fr, nil
}

func gpuCount(inv inventory.Inventory) int {
	n := 0
	for _, node := range inv.Nodes {
		n += len(node.GPUs)
	}
	return n
}

func impact(before, after twin.JobStatus, ranks int) JobImpact {
	wall := after.WallSeconds - before.WallSeconds
	prod := after.ProductiveSeconds - before.ProductiveSeconds
	j := JobImpact{Restarts: after.Restarts - before.Restarts}
	if wall > 0 {
		// A restart from a checkpoint older than the window loses work
		// done before it: the window's net progress is negative. That
		// work counts in the GPU-hours lost; goodput, a share of the
		// window's time, is 0 at worst.
		j.Goodput = max(0, prod/wall)
		j.LostGPUHours = (wall - prod) * float64(ranks) / 3600
	}
	return j
}

// impactAround is impact from before to after leaving out the stretch from
// pre to post (the baseline's relaunch): goodput is the rate of the rest,
// and the GPU-hours lost are that rate's over the whole span, so they
// compare with a fault run's. A zero post (the span ended first) leaves
// nothing out.
func impactAround(before, pre, post, after twin.JobStatus, ranks int) JobImpact {
	if post.WallSeconds == 0 {
		return impact(before, after, ranks)
	}
	wall := pre.WallSeconds - before.WallSeconds + after.WallSeconds - post.WallSeconds
	prod := pre.ProductiveSeconds - before.ProductiveSeconds + after.ProductiveSeconds - post.ProductiveSeconds
	j := JobImpact{Restarts: after.Restarts - before.Restarts}
	if wall > 0 {
		j.LostGPUHours = (after.WallSeconds - before.WallSeconds) * (1 - prod/wall) * float64(ranks) / 3600
		j.Goodput = max(0, prod/wall)
	}
	return j
}

// baseline runs a fault-free twin over the same span as a fault run and
// reports which detectors fired anyway.
func (r *runner) baseline(ctx context.Context) (Baseline, error) {
	opts := r.opts
	tw, err := newTwin(opts)
	if err != nil {
		return Baseline{}, err
	}
	start := tw.Now()
	if err := tw.Sleep(ctx, opts.Warmup); err != nil {
		return Baseline{}, err
	}
	from := tw.Now()
	job := jobName(tw.Inventory())
	before, _ := tw.Job(job)
	var probes []probe.Probe
	for _, d := range opts.Detectors {
		if d.AlertRule() == nil {
			probes = append(probes, d.Probe(tw))
		}
	}
	fired := map[string]int{}
	held := make([]bool, len(probes))
	span := opts.Window + recoveryWindow
	end := tw.Now().Add(span)
	// A normal day: the job is relaunched cleanly, so a rule that pages on
	// every launch (its memory allocation, its first steps) shows as
	// noisy. No fault run has the relaunch, so the job's goodput is
	// measured around it: pre and post bracket it.
	relaunch, relaunched := tw.Now().Add(baselineRelaunchAfter), false
	var pre, post twin.JobStatus
	for tw.Now().Before(end) {
		switch now := tw.Now(); {
		case !relaunched && !now.Before(relaunch):
			pre, _ = tw.Job(job)
			if err := tw.Relaunch(job, baselineRelaunchDown); err != nil {
				return Baseline{}, err
			}
			relaunched = true
		case relaunched && post.WallSeconds == 0 && !now.Before(relaunch.Add(baselineRelaunchDown)):
			post, _ = tw.Job(job)
		}
		for i, p := range probes {
			obs, err := p.Observe(ctx)
			if err != nil {
				return Baseline{}, err
			}
			if obs.Holds && !held[i] {
				fired[probes[i].Name()]++
			}
			held[i] = obs.Holds
		}
		if err := tw.Sleep(ctx, probe.EvalInterval); err != nil {
			return Baseline{}, err
		}
	}
	after, _ := tw.Job(job)
	b := Baseline{Job: impactAround(before, pre, post, after, len(tw.Inventory().Jobs[0].Ranks)), FalsePositives: []string{}, Noisy: []Noise{}}
	for _, set := range []*ruleSet{r.builtin, r.rules} {
		if set == nil {
			continue
		}
		ruleFired, err := firingRules(ctx, r.eval, set, tw, start, from)
		if err != nil {
			return Baseline{}, err
		}
		for _, d := range set.cols {
			if n := ruleFired[d.rule]; n > 0 {
				fired[d.Name] = n
			}
		}
	}
	for _, d := range r.cols {
		if n := fired[d.Name]; n > 0 {
			b.FalsePositives = append(b.FalsePositives, d.Name)
			b.Noisy = append(b.Noisy, Noise{Detector: d.Name, Firings: n, Seconds: span.Seconds()})
		}
	}
	return b, nil
}
