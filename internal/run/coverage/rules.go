package coverage

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/promeval"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// Detector is one column of the matrix: a built-in detector or an alert
// rule from the rules under test.
type Detector struct {
	Name string `json:"name"`
	// Kind is "builtin" or "rule".
	Kind        string        `json:"kind"`
	Layer       catalog.Layer `json:"layer"`
	Reads       []string      `json:"reads"`
	Rule        string        `json:"rule"`
	Description string        `json:"description,omitempty"`
	// Source is the rule's file:line and group.
	Source string `json:"source,omitempty"`
	// Status and Reason are the static analysis of a rule.
	Status string `json:"status,omitempty"`
	Reason string `json:"reason,omitempty"`

	rule *rules.Rule
}

// RuleReport is one rule of the set under test, alert or record: its
// static analysis and the faults it caught (pass or late).
type RuleReport struct {
	Name string `json:"name"`
	// Detector is the rule's column in the matrix, for an alert rule: its
	// name, with its file and line added when another alert shares it.
	Detector string   `json:"detector,omitempty"`
	Kind     string   `json:"kind"`
	Source   string   `json:"source"`
	Group    string   `json:"group"`
	Expr     string   `json:"expr"`
	Status   string   `json:"status"`
	Reason   string   `json:"reason,omitempty"`
	Metrics  []string `json:"metrics"`
	Detects  []string `json:"detects"`
}

// Suggestion is a rule of the recommended pack proposed for a fault nothing
// caught, with the evidence: it fired on a re-run of the fault and stayed
// silent over a fault-free hour.
type Suggestion struct {
	Fault string `json:"fault"`
	// Rule is empty when no recommended rule catches the fault; Note then
	// says so.
	Rule       string  `json:"rule,omitempty"`
	Expr       string  `json:"expr,omitempty"`
	For        string  `json:"for,omitempty"`
	TTDSeconds float64 `json:"ttd_seconds,omitempty"`
	// Verified is true when the re-run fired within the deadline and the
	// clean hour stayed silent.
	Verified bool   `json:"verified"`
	Note     string `json:"note,omitempty"`
}

// Text renders the suggestion as one line for people.
func (s Suggestion) Text() string {
	if s.Rule == "" {
		return fmt.Sprintf("%s: %s", s.Fault, s.Note)
	}
	return fmt.Sprintf("%s: add %s (fired %.0fs after injection on a re-run; silent over a fault-free hour)", s.Fault, s.Rule, s.TTDSeconds)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Builtins turns built-in detectors into matrix columns.
func Builtins(ds []*probe.Detector) []*Detector {
	out := make([]*Detector, len(ds))
	for i, d := range ds {
		out[i] = &Detector{Name: d.Name, Kind: "builtin", Layer: d.Layer, Reads: d.Reads, Rule: d.Rule, Description: d.Description, rule: d.AlertRule()}
	}
	return out
}

// builtinRules is the built-in columns that are alerting rules as a rule
// set, nil when there are none. They are evaluated as any rule under test
// is, one range query per rule over each run rather than a query per rule
// at every poll of the engine: the same evaluation (promeval's Watch, which
// the detectors' probes use, is proven equal to Evaluate), a fifth of the
// demo's time.
func builtinRules(cols []*Detector) *ruleSet {
	rs := &ruleSet{live: &rules.Set{}}
	for _, d := range cols {
		if d.Kind == "builtin" && d.rule != nil {
			rs.cols = append(rs.cols, d)
			rs.live.Rules = append(rs.live.Rules, d.rule)
		}
	}
	if len(rs.cols) == 0 {
		return nil
	}
	return rs
}

// ruleSet is a rule set prepared for a coverage run: its alert rules as
// matrix columns, every rule's report, and the rules the evaluation runs.
type ruleSet struct {
	cols    []*Detector
	reports []RuleReport
	// live holds the rules the static analysis says can produce a sample.
	// Only they are evaluated: a rule that can never fire costs nothing
	// per fault, which keeps a fleet's pile of dead rules from slowing
	// the run. The twin exports nothing the analysis counts as absent
	// (TestTwinExportsWhatAnalysisCounts), so leaving them out changes no
	// cell.
	live *rules.Set
	// uses holds each report's metrics as the analysis saw them, and col
	// each alert report's matrix column (nil for a record).
	uses [][]rules.MetricUse
	col  []*Detector
}

// noteOffTwin adds to the reason of every rule that can fire the metrics it
// reads that the fleet has and the twin does not export (another exporter's,
// a DCGM field beyond the twin's counters): on the twin those parts read
// nothing, so a fault they would catch on the fleet shows as missed there.
// A recorded series is followed to what its recording rules read, so a rule
// over a record of node_cpu_seconds_total says so as the record does.
func (rs *ruleSet) noteOffTwin(exported map[string]bool) {
	records := map[string][]int{}
	for i, r := range rs.reports {
		if r.Kind == string(rules.KindRecord) {
			records[r.Name] = append(records[r.Name], i)
		}
	}
	memo := map[int][]string{}
	visiting := map[int]bool{}
	// offTwin lists what report i reads, directly or through records, that
	// the fleet has and the twin does not export.
	var offTwin func(i int) []string
	offTwin = func(i int) []string {
		if off, ok := memo[i]; ok {
			return off
		}
		if visiting[i] {
			// Records that feed each other produce nothing (the analysis
			// calls them absent), so the loop adds nothing.
			return nil
		}
		visiting[i] = true
		defer delete(visiting, i)
		var off []string
		add := func(names ...string) {
			for _, n := range names {
				if !slices.Contains(off, n) {
					off = append(off, n)
				}
			}
		}
		for _, u := range rs.uses[i] {
			switch {
			case !u.Present:
			case u.Availability == rules.AvailRecorded:
				for _, j := range records[u.Name] {
					add(offTwin(j)...)
				}
			case !exported[u.Name]:
				add(u.Name)
			}
		}
		memo[i] = off
		return off
	}
	for i := range rs.reports {
		r := &rs.reports[i]
		if r.Status != string(rules.StatusOK) {
			continue
		}
		off := offTwin(i)
		if len(off) == 0 {
			continue
		}
		note := fmt.Sprintf("the twin does not export %s, so there it reads nothing", strings.Join(off, ", "))
		if r.Reason != "" {
			note = r.Reason + "; " + note
		}
		r.Reason = note
		if c := rs.col[i]; c != nil {
			c.Reason = note
		}
	}
}

// prepare analyses a set once for a whole coverage run, with the exporters
// and opt-in counters the fleet runs. Rules the analysis calls unknown are
// evaluated: they read nothing on the twin, as on a fleet without the
// metric.
func prepare(set *rules.Set, opts rules.AnalyzeOptions) *ruleSet {
	rs := &ruleSet{live: &rules.Set{}}
	seen := map[string]int{}
	for _, a := range rules.Analyze(set, opts) {
		r := a.Rule
		if a.Status != rules.StatusNeverFires && a.Status != rules.StatusOptInOff {
			rs.live.Rules = append(rs.live.Rules, r)
		}
		var metrics []string
		for _, m := range a.Metrics {
			metrics = append(metrics, m.Name)
		}
		src := fmt.Sprintf("%s:%d", r.Source, r.Line)
		rs.reports = append(rs.reports, RuleReport{Name: r.Name, Kind: string(r.Kind), Source: src, Group: r.Group, Expr: r.Expr,
			Status: string(a.Status), Reason: a.Reason, Metrics: metrics, Detects: []string{}})
		rs.uses = append(rs.uses, a.Metrics)
		rs.col = append(rs.col, nil)
		if r.Kind != rules.KindAlert {
			continue
		}
		name := r.Name
		if seen[name]++; seen[name] > 1 {
			name = fmt.Sprintf("%s (%s)", r.Name, filepath.Base(src))
		}
		rs.reports[len(rs.reports)-1].Detector = name
		expr := r.Expr
		if r.For > 0 {
			expr += " for " + r.For.String()
		}
		rs.cols = append(rs.cols, &Detector{Name: name, Kind: "rule", Layer: catalog.LayerExporterMetrics, Reads: metrics, Rule: oneLine(expr),
			Source: src + " group " + r.Group, Status: string(a.Status), Reason: a.Reason, rule: r})
		rs.col[len(rs.col)-1] = rs.cols[len(rs.cols)-1]
	}
	return rs
}

// ruleCells evaluates a rule set with the real PromQL engine over a finished
// run on tw and judges every alert column as the engine judges a probe: the
// first firing for an injected target while the fault was in, pass within
// the deadline, late after it, error when already firing at injection.
func ruleCells(ctx context.Context, eval promeval.Options, set *ruleSet, tw *twin.Twin, start time.Time, rec *engine.Record, window, deadline time.Duration, faultID string) (map[string]Cell, error) {
	// Nothing after the window counts, so the recovery watch after it,
	// a fifth of the span, is not evaluated.
	end := rec.InjectedAt.Add(window)
	evalEnd := tw.Now()
	if !rec.InjectedAt.IsZero() && end.After(start) && end.Before(evalEnd) {
		evalEnd = end
	}
	res, err := promeval.Evaluate(ctx, set.live, tw, start, evalEnd, eval)
	if err != nil {
		return nil, fmt.Errorf("evaluate rules: %w", err)
	}
	place := placer(tw)
	concerns := func(ls series.Labels) bool { return rec.Plan.Concerns(place(ls)) }
	cells := make(map[string]Cell, len(set.cols))
	for _, d := range set.cols {
		if d.rule == nil {
			continue
		}
		c := Cell{Fault: faultID, Detector: d.Name, Verdict: engine.Missed}
		already := false
		for _, a := range res.AlertsOf(d.rule) {
			if concerns(a.Labels) && a.FiringAt(rec.InjectedAt) {
				already = true
			}
		}
		switch t, ok := res.FirstFiring(d.rule, rec.InjectedAt, concerns); {
		case already:
			c.Verdict = engine.Error
		case ok && !t.After(end):
			ttd := t.Sub(rec.InjectedAt).Seconds()
			c.Detected, c.TTDSeconds, c.Verdict = true, &ttd, engine.Pass
			if ttd > deadline.Seconds() {
				c.Verdict = engine.Late
			}
		}
		cells[d.Name] = c
	}
	return cells, nil
}

// firingRules evaluates a set over a fault-free span and returns, for each
// alert rule that fired after from, how many firing episodes its alerts
// had there: false positives.
func firingRules(ctx context.Context, eval promeval.Options, set *ruleSet, tw *twin.Twin, start, from time.Time) (map[*rules.Rule]int, error) {
	res, err := promeval.Evaluate(ctx, set.live, tw, start, tw.Now(), eval)
	if err != nil {
		return nil, fmt.Errorf("evaluate rules on the fault-free twin: %w", err)
	}
	fired := map[*rules.Rule]int{}
	for _, a := range res.Alerts {
		// Each alert on its own: asking FirstFiring per alert scanned
		// every alert of the set again, quadratic in the rules.
		for _, iv := range a.Firing {
			if iv.To.IsZero() || iv.To.After(from) {
				fired[a.Rule]++
			}
		}
	}
	return fired, nil
}

// cleanHour is how long the fault-free twin runs to vet a suggestion: an
// hour after the warm-up.
const cleanHour = time.Hour

// suggest proposes, for every fault that no rule under test caught within
// the deadline, the fastest alert of the recommended pack that catches it on
// a re-run of the fault and never fires over a fault-free hour.
func (r *runner) suggest(ctx context.Context, res *Result) ([]Suggestion, error) {
	var missed []*FaultResult
	for _, fr := range res.Faults {
		caught := false
		for _, d := range res.Detectors {
			if d.Kind == "rule" && fr.Cells[d.Name].Verdict == engine.Pass {
				caught = true
			}
		}
		if !caught {
			missed = append(missed, fr)
		}
	}
	out := []Suggestion{}
	if len(missed) == 0 {
		return out, nil
	}
	// The recommended pack is what to deploy beside the fleet's exporters,
	// so it is judged against the default ones.
	rec := prepare(r.opts.Recommended, rules.AnalyzeOptions{OptIn: r.optIn})
	tw, err := newTwin(r.opts)
	if err != nil {
		return nil, err
	}
	start := tw.Now()
	if err := tw.Sleep(ctx, r.opts.Warmup+cleanHour); err != nil {
		return nil, err
	}
	noisy, err := firingRules(ctx, r.eval, rec, tw, start, start.Add(r.opts.Warmup))
	if err != nil {
		return nil, err
	}
	for i, fr := range missed {
		again, err := r.runFault(ctx, fr.Fault, rec, false)
		if err != nil {
			return nil, err
		}
		if r.opts.Progress != nil {
			r.opts.Progress(StageSuggestions, i+1, len(missed))
		}
		var best *Detector
		for _, d := range rec.cols {
			c := again.Cells[d.Name]
			if d.rule == nil || c.Verdict != engine.Pass || noisy[d.rule] > 0 {
				continue
			}
			if best == nil || *c.TTDSeconds < *again.Cells[best.Name].TTDSeconds {
				best = d
			}
		}
		if best == nil {
			out = append(out, Suggestion{Fault: fr.ID, Note: noSuggestion(fr, res.Baseline)})
			continue
		}
		ttd := *again.Cells[best.Name].TTDSeconds
		expr := best.rule.Expr
		out = append(out, Suggestion{Fault: fr.ID, Rule: best.Name, Expr: oneLine(expr), For: best.rule.For.String(), TTDSeconds: ttd, Verified: true})
	}
	return out, nil
}

// noSuggestion explains why no recommended rule catches a fault, from what
// the fault did to the job.
func noSuggestion(fr *FaultResult, base Baseline) string {
	const none = "no rule of the recommended pack catches it on this twin"
	loss := base.Job.Goodput - fr.Job.Goodput
	var optIn []string
	allOptIn := len(fr.Fault.Signature.Series) > 0
	for _, name := range fr.Fault.Signature.Series {
		if m, ok := rules.LookupMetric(name); ok && m.Availability == rules.AvailOptIn {
			optIn = append(optIn, name)
		} else {
			allOptIn = false
		}
	}
	switch {
	case allOptIn:
		return fmt.Sprintf("%s: the only series it moves are opt-in counters dcgm-exporter leaves off (%s); enable them and alert on their increase", none, strings.Join(optIn, ", "))
	case loss < 0.005:
		return none + " within the deadline; the fault costs the job no goodput in the window (its harm shows later: at a restart, at scale, or past the deadline)"
	case fr.Fault.Signature.Silent:
		return fmt.Sprintf("%s: it moves no GPU metric and costs the job %.0f%% of its goodput, less than a step-time rule can flag without firing on a fault-free hour", none, 100*loss)
	}
	return fmt.Sprintf("%s within the deadline without firing on the fault-free hour (it costs the job %.0f%% of its goodput)", none, 100*loss)
}

// placer returns what an alert on tw is about: its labels' subject
// (probe.SubjectFromLabels), placed on a node of the twin when it names no
// node but its instance is one (kube-prometheus relabels node-exporter's
// instance to the node's name, so NodeFilesystemAlmostOutOfSpace and
// NodeCPUHighUsage carry no other) or its pod ran on one. A pod alert
// (KubePodCrashLooping, KubePodNotReady) names only the namespace and the
// pod; kube-state-metrics' kube_pod_info says where it ran, the join an
// operator makes. A pod recreated under its name on another node stays
// unplaced: the alert does not say which. An instance that is a target's
// address names no node: the series of a job scraped from the twin's page
// keep their training-job subject.
func placer(tw *twin.Twin) func(series.Labels) probe.Subject {
	nodes := map[string]bool{}
	for _, n := range tw.Inventory().Nodes {
		nodes[n.Name] = true
	}
	podNode := map[string][]string{}
	for _, s := range tw.Select("kube_pod_info") {
		key := s.Labels.Get("namespace") + "/" + s.Labels.Get("pod")
		if n := s.Labels.Get("node"); n != "" && !slices.Contains(podNode[key], n) {
			podNode[key] = append(podNode[key], n)
		}
	}
	return func(ls series.Labels) probe.Subject {
		s := probe.SubjectFromLabels(ls)
		if s.Node != "" {
			return s
		}
		if in := ls.Get("instance"); nodes[in] {
			s.Node = in
		} else if on := podNode[ls.Get("namespace")+"/"+ls.Get("pod")]; ls.Get("pod") != "" && len(on) == 1 {
			s.Node = on[0]
		}
		return s
	}
}
