package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/gpuchaos/gpuchaos/internal/model/suggest"
)

// Status is the verdict of the static analysis on one rule.
type Status string

// The analysis verdicts.
const (
	// StatusOK: the rule can produce a result with the metrics available.
	StatusOK Status = "ok"
	// StatusNeverFires: every way the rule could produce a result needs
	// a metric that nothing produces.
	StatusNeverFires Status = "never_fires"
	// StatusUnknown: the rule can produce a result only through a metric
	// that no exporter of the registry lists. gpuchaos cannot tell whether
	// the fleet has it, so the rule is evaluated, and reads nothing there.
	StatusUnknown Status = "unknown"
	// StatusOptInOff: the rule could fire once the user switches on a
	// metric a declared exporter leaves off (an opt-in counter, a DCGM
	// field listed in dcgm-exporter's counters CSV, an opt-in collector);
	// the reason names each and how. A rule that needs an exporter the
	// fleet does not run stays never_fires.
	StatusOptInOff Status = "opt_in_off"
)

// MetricUse is one metric a rule reads and where it would come from.
type MetricUse struct {
	Name string `json:"name"`
	// Availability is AvailDefault, AvailOptIn, AvailRecorded or
	// AvailUnknown.
	Availability string `json:"availability"`
	// Source is the exporter, or for a recorded metric the recording
	// rule as file:line.
	Source string `json:"source,omitempty"`
	// Present says whether the metric exists under the options: a default
	// metric, an opt-in one the caller enabled, or a recorded one whose
	// rule can produce a series.
	Present bool `json:"present"`
	// Suggestion is the known metric the name most likely meant, for an
	// unknown one.
	Suggestion string `json:"suggestion,omitempty"`
}

// Analysis is the verdict on one rule.
type Analysis struct {
	Rule *Rule `json:"-"`
	// Metrics lists each metric the expression reads once, in order of
	// first appearance.
	Metrics []MetricUse `json:"metrics"`
	Status  Status      `json:"status"`
	// Reason says in words why the rule never fires, or, for a rule that
	// can fire, which of the metrics it reads are missing all the same.
	Reason string `json:"reason,omitempty"`
}

// AnalyzeOptions says what the fleet produces beyond the defaults.
type AnalyzeOptions struct {
	// OptIn lists metrics the user says are enabled: normally opt-in
	// dcgm-exporter counters, but any name is accepted, which lets a user
	// declare a metric from an exporter this package does not know.
	OptIn []string
	// Exporters names the exporters the fleet runs (Exporters lists the
	// registry); nil means DefaultExporters. Prometheus' own series are
	// always there.
	Exporters []string
	// Counters, when not nil, is the exact list of what dcgm-exporter
	// exports: the fields of the fleet's own counters CSV.
	Counters []string
}

// Analyze decides, for every rule of the set, which metrics it reads and
// whether it can ever fire. It returns one Analysis per rule, in the set's
// order.
//
// A recording rule's output counts as present only when that rule itself
// can produce a series, so a chain of records fed by a missing metric is
// followed to the end. The verdict is never_fires only when every branch
// that could yield a sample needs a missing metric: `a or b` needs one of
// them, `a unless b` and `absent(b)` need only what stays outside absent,
// `a and b` and arithmetic need both.
//
// A metric that no exporter of the registry lists is unknown: the verdict
// is never_fires only if the rule could not fire even were every unknown
// metric there, and unknown when it could fire only through one.
func Analyze(set *Set, opts AnalyzeOptions) []Analysis {
	strict := newAnalyzer(set, opts, true)
	loose := newAnalyzer(set, opts, false)
	switched := newAnalyzer(set, opts, false)
	switched.allOn = true
	strict.loose = loose
	out := make([]Analysis, len(set.Rules))
	for i, r := range set.Rules {
		out[i] = strict.analyze(r, loose, switched)
	}
	return out
}

type analyzer struct {
	cat *catalogue
	// strict counts a metric no exporter lists as absent; otherwise as
	// present (the other bound of what the fleet may have).
	strict bool
	// allOn counts every metric of a declared exporter as present, opt-in
	// or not: what the fleet would have with everything switched on.
	allOn bool
	// loose is the other bound, for a strict analyzer: what it says of a
	// record tells a record that never produces a series from one that
	// hangs on unknown metrics.
	loose    *analyzer
	declared map[string]bool
	// counters is the dcgm-exporter counters CSV's fields, nil without one.
	counters map[string]bool
	optIn    map[string]bool
	records  map[string][]*Rule
	// produces holds the recording rules that can produce a series: the
	// least fixed point, so records that only feed each other stay out.
	produces map[*Rule]bool
	// candidates are the names a misspelling is compared against.
	candidates []string
	// used memoizes use: a fleet's rules read the same few names over and
	// over, and finding what an unknown one meant compares it with every
	// candidate, records included, so without it the analysis grew with
	// rules × records.
	used map[string]MetricUse
	// misspell memoizes misspelt.
	misspell map[string]bool
	// rare are the candidates tried after the others: every DCGM field,
	// which would otherwise win over the counters people use.
	rare []string
}

func newAnalyzer(set *Set, opts AnalyzeOptions, strict bool) *analyzer {
	a := &analyzer{
		cat:      mustCatalogue(),
		strict:   strict,
		declared: map[string]bool{"prometheus": true},
		optIn:    map[string]bool{},
		records:  map[string][]*Rule{},
		produces: map[*Rule]bool{},
		used:     map[string]MetricUse{},
		misspell: map[string]bool{},
	}
	for _, n := range opts.OptIn {
		a.optIn[n] = true
	}
	exps := opts.Exporters
	if exps == nil {
		exps = DefaultExporters()
	}
	for _, e := range exps {
		a.declared[e] = true
	}
	if opts.Counters != nil {
		a.counters = map[string]bool{}
		for _, n := range opts.Counters {
			a.counters[n] = true
			a.optIn[n] = true
		}
	}
	for _, m := range a.cat.known {
		if strings.HasPrefix(m.Provenance, "dcgm_fields.h") {
			a.rare = append(a.rare, m.Name)
			continue
		}
		a.candidates = append(a.candidates, m.Name)
	}
	for _, r := range set.Rules {
		if r.Kind == KindRecord {
			if len(a.records[r.Name]) == 0 {
				a.candidates = append(a.candidates, r.Name)
			}
			a.records[r.Name] = append(a.records[r.Name], r)
		}
	}
	for changed := true; changed; {
		changed = false
		for _, r := range set.Rules {
			if r.Kind != KindRecord || a.produces[r] || r.Parsed == nil {
				continue
			}
			if empty, _ := a.empty(r.Parsed); !empty {
				a.produces[r] = true
				changed = true
			}
		}
	}
	return a
}

// present says whether a metric of that exact name exists.
func (a *analyzer) present(name string) bool {
	if a.optIn[name] {
		return true
	}
	i, known := a.cat.byName[name]
	if known && a.produced(a.cat.known[i]) {
		return true
	}
	for _, r := range a.records[name] {
		if a.produces[r] {
			return true
		}
	}
	// A name no exporter lists may still be some exporter's the registry
	// lacks, unless it is a misspelling of one it has.
	return !a.strict && !known && len(a.records[name]) == 0 && !a.misspelt(name)
}

// misspelt says whether an unknown name is another exporter's name or a
// plausible misspelling of a name the registry or the rule set has.
func (a *analyzer) misspelt(name string) bool {
	if m, ok := a.misspell[name]; ok {
		return m
	}
	_, elsewhere := lookupElsewhere(name)
	_, slip := a.slipOf(name)
	m := elsewhere || slip || a.typoOf(name) != ""
	a.misspell[name] = m
	return m
}

// produced says whether the declared exporters produce a known metric.
func (a *analyzer) produced(m Metric) bool {
	switch {
	case !a.declared[m.Source]:
		return false
	case a.allOn:
		return true
	case m.Source == "dcgm-exporter" && a.counters != nil:
		return a.counters[m.Name]
	}
	return m.Availability == AvailDefault || a.optIn[m.Name]
}

// selectorNames returns the metric names a selector can match: its
// __name__ equality, or the known and recorded names an __name__ regex
// matches. exact is false when the selector can match names this package
// cannot enumerate (no name matcher, or a negative one).
func (a *analyzer) selectorNames(vs *parser.VectorSelector) (names []string, pattern string, exact bool) {
	for _, m := range vs.LabelMatchers {
		if m.Name != model.MetricNameLabel {
			continue
		}
		switch m.Type {
		case labels.MatchEqual:
			return []string{m.Value}, "", true
		case labels.MatchRegexp:
			for _, c := range a.candidates {
				if m.Matches(c) {
					names = append(names, c)
				}
			}
			return names, "{" + m.String() + "}", true
		default:
			return nil, "", false
		}
	}
	return nil, "", false
}

// empty says whether the expression surely yields no sample at any time,
// and which missing metrics make it so.
func (a *analyzer) empty(e parser.Expr) (bool, []string) {
	switch e := e.(type) {
	case *parser.VectorSelector:
		names, pattern, exact := a.selectorNames(e)
		if !exact {
			return false, nil
		}
		for _, n := range names {
			if a.present(n) {
				return false, nil
			}
		}
		if pattern != "" {
			// A regex may match a metric no exporter lists.
			return a.strict || len(names) > 0, []string{pattern}
		}
		return true, names
	case *parser.MatrixSelector:
		return a.empty(e.VectorSelector)
	case *parser.SubqueryExpr:
		return a.empty(e.Expr)
	case *parser.ParenExpr:
		return a.empty(e.Expr)
	case *parser.UnaryExpr:
		return a.empty(e.Expr)
	case *parser.StepInvariantExpr:
		return a.empty(e.Expr)
	case *parser.AggregateExpr:
		return a.empty(e.Expr)
	case *parser.Call:
		return a.emptyCall(e)
	case *parser.BinaryExpr:
		return a.emptyBinary(e)
	}
	// Literals and durations always have a value.
	return false, nil
}

func (a *analyzer) emptyCall(c *parser.Call) (bool, []string) {
	switch c.Func.Name {
	case "absent", "absent_over_time":
		// These return a sample exactly when their argument is empty.
		return false, nil
	case "info":
		// info() passes its first argument through when no info series
		// matches, so only that argument matters.
		return a.empty(c.Args[0])
	}
	if c.Func.ReturnType == parser.ValueTypeScalar || c.Func.ReturnType == parser.ValueTypeString {
		return false, nil
	}
	var culprits []string
	for _, arg := range c.Args {
		if t := arg.Type(); t != parser.ValueTypeVector && t != parser.ValueTypeMatrix {
			continue
		}
		if empty, why := a.empty(arg); empty {
			culprits = append(culprits, why...)
		}
	}
	// Functions without a vector argument (vector(), time-of-day
	// functions defaulting to time()) always have a value.
	return len(culprits) > 0, culprits
}

func (a *analyzer) emptyBinary(b *parser.BinaryExpr) (bool, []string) {
	lt, rt := b.LHS.Type(), b.RHS.Type()
	lv, rv := lt == parser.ValueTypeVector, rt == parser.ValueTypeVector
	le, lwhy := a.empty(b.LHS)
	re, rwhy := a.empty(b.RHS)
	switch {
	case !lv && !rv:
		return false, nil
	case lv && !rv:
		return le, lwhy
	case !lv && rv:
		return re, rwhy
	}
	// Fill modifiers let one side stand in for a missing match.
	fillL, fillR := false, false
	if vm := b.VectorMatching; vm != nil {
		fillL, fillR = vm.FillValues.LHS != nil, vm.FillValues.RHS != nil
	}
	switch {
	case b.Op == parser.LOR || (fillL && fillR):
		if le && re {
			return true, append(lwhy, rwhy...)
		}
		return false, nil
	case b.Op == parser.LUNLESS || fillR:
		return le, lwhy
	case fillL:
		return re, rwhy
	}
	// and, arithmetic and comparisons need a match on both sides.
	var why []string
	if le {
		why = append(why, lwhy...)
	}
	if re {
		why = append(why, rwhy...)
	}
	return le || re, why
}

// uses lists the metrics an expression reads, once each, in order.
func (a *analyzer) uses(e parser.Expr) []MetricUse {
	var out []MetricUse
	seen := map[string]bool{}
	add := func(u MetricUse) {
		if !seen[u.Name] {
			seen[u.Name] = true
			out = append(out, u)
		}
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		names, pattern, exact := a.selectorNames(vs)
		if exact && len(names) == 0 {
			add(MetricUse{Name: pattern, Availability: AvailUnknown})
		}
		for _, name := range names {
			add(a.use(name))
		}
		return nil
	})
	return out
}

func (a *analyzer) use(name string) MetricUse {
	if u, ok := a.used[name]; ok {
		return u
	}
	u := a.findUse(name)
	a.used[name] = u
	return u
}

func (a *analyzer) findUse(name string) MetricUse {
	u := MetricUse{Name: name, Present: a.present(name)}
	if rs := a.records[name]; len(rs) > 0 {
		u.Availability = AvailRecorded
		u.Source = fmt.Sprintf("%s:%d", rs[0].Source, rs[0].Line)
		return u
	}
	if i, ok := a.cat.byName[name]; ok {
		m := a.cat.known[i]
		u.Availability = m.Availability
		u.Source = m.Source
		if m.Availability == AvailOptIn && (m.Source != "dcgm-exporter" || strings.HasPrefix(m.Provenance, "dcgm_fields.h")) {
			// Not a counter --opt-in can switch on in the twin.
			u.Availability = AvailOff
		}
		if m, ok := lookupElsewhere(name); ok && !u.Present {
			u.Suggestion = m.equivalent
		}
		return u
	}
	u.Availability = AvailUnknown
	if a.optIn[name] {
		u.Source = "declared by the caller"
		return u
	}
	if m, ok := lookupElsewhere(name); ok {
		u.Source = m.exporter
		u.Suggestion = m.equivalent
		return u
	}
	u.Suggestion = a.didYouMean(name)
	return u
}

// didYouMean returns the known or recorded name closest to name, or the
// fleet equivalent of a similar name from another exporter, or "".
func (a *analyzer) didYouMean(name string) string {
	if s := a.typoOf(name); s != "" {
		return s
	}
	if m, ok := a.resembles(name); ok {
		return m.equivalent
	}
	return ""
}

// typoOf returns the known or recorded name that name misspells: the same
// words, but for typos within a word or a suffix added or dropped; "" when
// there is none.
func (a *analyzer) typoOf(name string) string {
	for _, cands := range [][]string{a.candidates, a.rare} {
		if s, d := suggest.Closest(name, cands); plausible(name, s, d) && sameThing(name, s) {
			return s
		}
	}
	return ""
}

// plausible says whether a candidate at edit distance d is a plausible
// correction: within a third of the name's length, or the name with a
// suffix added or dropped (DCGM_FI_DEV_ECC_DBE_VOL for …_VOL_TOTAL).
func plausible(name, cand string, d int) bool {
	if cand == "" {
		return false
	}
	if d <= len(name)/3 {
		return true
	}
	ln, lc := strings.ToLower(name), strings.ToLower(cand)
	short := min(len(ln), len(lc))
	return short >= 8 && (strings.HasPrefix(lc, ln) || strings.HasPrefix(ln, lc))
}

// sameThing says whether a candidate correction measures what the name
// does: the same words but for typos within a word, or a suffix added or
// dropped (DCGM_FI_DEV_ECC_DBE_VOL for …_VOL_TOTAL). A different word is a
// different quantity: kube_pod_info is not kube_node_info, and
// DCGM_FI_DEV_POWER_MGMT_LIMIT is not DCGM_FI_DEV_POWER_USAGE, and a
// did-you-mean between them sends the user to the wrong series.
func sameThing(name, cand string) bool {
	tn := strings.Split(strings.ToLower(name), "_")
	tc := strings.Split(strings.ToLower(cand), "_")
	short := min(len(tn), len(tc))
	for i := range short {
		if tn[i] == tc[i] {
			continue
		}
		if len(tn) != len(tc) {
			return false
		}
		if d := suggest.Distance(tn[i], tc[i]); d > max(1, len(tn[i])/3) || d >= len(tn[i]) {
			return false
		}
	}
	return true
}

func (a *analyzer) analyze(r *Rule, loose, switched *analyzer) Analysis {
	an := Analysis{Rule: r, Status: StatusOK}
	if r.Parsed == nil {
		return an
	}
	an.Metrics = a.uses(r.Parsed)
	empty, culprits := loose.empty(r.Parsed)
	var missing []string
	for _, u := range an.Metrics {
		if !u.Present {
			missing = append(missing, u.Name)
		}
	}
	if empty {
		an.Status = StatusNeverFires
		if off, _ := switched.empty(r.Parsed); !off {
			// Every missing part the rule needs can be switched on.
			an.Status = StatusOptInOff
		}
		why := a.explainAll(unique(culprits), map[string]bool{})
		an.Reason = fmt.Sprintf("%s reads %s", r.Name, why)
		if r.Kind == KindRecord {
			// A recording rule fires nothing; it records.
			an.Reason = fmt.Sprintf("%s never produces a series: it reads %s", r.Name, why)
		}
		return an
	}
	if strictEmpty, why := a.empty(r.Parsed); strictEmpty {
		an.Status = StatusUnknown
		verb := "fire"
		if r.Kind == KindRecord {
			verb = "produce a series"
		}
		an.Reason = fmt.Sprintf("%s can %s only through metrics no exporter gpuchaos knows lists, so it is evaluated as reading nothing: it reads %s",
			r.Name, verb, a.explainAll(unique(why), map[string]bool{}))
		return an
	}
	if why := a.absentOfUnknown(r.Parsed, loose); len(why) > 0 {
		// Unknown wins over what the twin shows: absent() of a metric no
		// exporter gpuchaos knows fires on the twin all the time, which
		// says only that the twin lacks the exporter, not that the rule is
		// noisy where the exporter runs.
		an.Status = StatusUnknown
		verb := "fire"
		if r.Kind == KindRecord {
			verb = "produce a series"
		}
		an.Reason = fmt.Sprintf("%s asks only whether %s is absent, so it will %s wherever that exporter is not scraped, the twin included: it reads %s",
			r.Name, strings.Join(why, ", "), verb, a.explainAll(why, map[string]bool{}))
		return an
	}
	if len(missing) > 0 {
		// The explanation ends the sentence: put after it, "never match"
		// trailed a did-you-mean and read as part of the suggestion.
		verb := "fire"
		if r.Kind == KindRecord {
			verb = "produce a series"
		}
		an.Reason = fmt.Sprintf("%s can %s, but never through the parts of it that read %s", r.Name, verb, a.explainAll(missing, map[string]bool{}))
	}
	return an
}

// absentOfUnknown lists the metrics read inside absent() or
// absent_over_time() whose presence hangs on a metric no exporter of the
// registry lists: strictly absent, yet present were the unknown metrics
// there.
func (a *analyzer) absentOfUnknown(e parser.Expr, loose *analyzer) []string {
	var why []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		c, ok := n.(*parser.Call)
		if !ok || (c.Func.Name != "absent" && c.Func.Name != "absent_over_time") {
			return nil
		}
		if strict, w := a.empty(c.Args[0]); strict {
			if looseEmpty, _ := loose.empty(c.Args[0]); !looseEmpty {
				why = append(why, w...)
			}
		}
		return nil
	})
	return unique(why)
}

func unique(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func (a *analyzer) explainAll(names []string, visiting map[string]bool) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = a.explain(n, visiting)
	}
	return strings.Join(parts, "; it also reads ")
}

// explain says why one metric is missing, following recording rules.
func (a *analyzer) explain(name string, visiting map[string]bool) string {
	if rs := a.records[name]; len(rs) > 0 {
		r := rs[0]
		if visiting[name] {
			return fmt.Sprintf("%s, which only recording rules that feed each other produce", name)
		}
		visiting[name] = true
		defer delete(visiting, name)
		_, why := a.empty(r.Parsed)
		verdict := "never produces a series because"
		if a.loose != nil && slices.ContainsFunc(a.loose.records[name], func(r *Rule) bool { return a.loose.produces[r] }) {
			verdict = "can produce a series only through metrics no exporter gpuchaos knows lists:"
		}
		return fmt.Sprintf("%s, recorded by the rule at %s:%d, which %s it reads %s",
			name, r.Source, r.Line, verdict, a.explainAll(unique(why), visiting))
	}
	if strings.HasPrefix(name, "{") {
		return fmt.Sprintf("%s, which matches no metric the declared exporters produce", name)
	}
	if i, ok := a.cat.byName[name]; ok {
		m := a.cat.known[i]
		if !a.declared[m.Source] {
			s := fmt.Sprintf("%s, which %s exports, an exporter this fleet does not run (declare it with --exporter %s)", name, m.Source, m.Source)
			if m.Availability == AvailOptIn {
				s = fmt.Sprintf("%s, which %s exports only once enabled there, an exporter this fleet does not run (declare it with --exporter %s, enable the metric and pass it with --opt-in)", name, m.Source, m.Source)
			}
			if e, ok := lookupElsewhere(name); ok && e.equivalent != "" {
				s += fmt.Sprintf("; did you mean %s (%s)?", e.equivalent, a.use(e.equivalent).Availability)
			}
			return s
		}
		if m.Source == "dcgm-exporter" && a.counters != nil {
			return fmt.Sprintf("%s, which the counters CSV given for dcgm-exporter does not list", name)
		}
		if m.Source == "dcgm-exporter" && strings.HasPrefix(m.Provenance, "dcgm_fields.h") {
			return fmt.Sprintf("%s, a DCGM field dcgm-exporter exports only when its counters CSV lists it (list it there and pass the file with --exporter dcgm-exporter=FILE; the twin does not export it)", name)
		}
		if m.Source == "dcgm-exporter" {
			return fmt.Sprintf("%s, an opt-in counter that dcgm-exporter's default set leaves off (enable it in the exporter's counters CSV, then pass it as opt-in)", name)
		}
		return fmt.Sprintf("%s, an opt-in metric that %s leaves off by default (enable it there, then pass it with --opt-in)", name, m.Source)
	}
	u := a.use(name)
	var s string
	if m, ok := lookupElsewhere(name); ok {
		s = fmt.Sprintf("%s, which dcgm-exporter does not export (it comes from %s, an exporter this fleet does not run)", name, m.exporter)
	} else if m, ok := a.slipOf(name); ok {
		s = fmt.Sprintf("%s, which no exporter produces (it looks like %s from %s, an exporter this fleet does not run)", name, m.name, m.exporter)
	} else if a.typoOf(name) != "" {
		s = fmt.Sprintf("%s, which no exporter produces", name)
	} else if m, ok := a.resembles(name); ok {
		s = fmt.Sprintf("%s, which no exporter gpuchaos knows lists (unknown; it looks like %s from %s, an exporter this fleet does not run)", name, m.name, m.exporter)
	} else {
		s = fmt.Sprintf("%s, which no exporter gpuchaos knows lists (unknown)", name)
	}
	if u.Suggestion != "" {
		s += fmt.Sprintf("; did you mean %s (%s)?", u.Suggestion, a.use(u.Suggestion).Availability)
	}
	return s
}

// slipOf finds the other-exporter metric that name is with a unit suffix
// dropped or added (nvidia_gpu_temperature for …_celsius), the usual slip
// when a rule is copied: a misspelling, so the name provably reads nothing.
func (a *analyzer) slipOf(name string) (elsewhereMetric, bool) {
	ln := strings.ToLower(name)
	for _, m := range a.cat.elsewhere {
		lm := strings.ToLower(m.name)
		if min(len(ln), len(lm)) >= 8 && (strings.HasPrefix(lm, ln) || strings.HasPrefix(ln, lm)) {
			return m, true
		}
	}
	return elsewhereMetric{}, false
}

// resembles finds the other-exporter metric a name was probably copied
// from: a slip (slipOf) first, else the nearest name.
//
// A name that is merely near another exporter's is only a hint: OpenPAI's
// own gpu_utilization is near dcgm-exporter 1.x's dcgm_gpu_utilization
// without being it, so it stays unknown.
func (a *analyzer) resembles(name string) (elsewhereMetric, bool) {
	if m, ok := a.slipOf(name); ok {
		return m, true
	}
	var other []string
	for _, m := range a.cat.elsewhere {
		other = append(other, m.name)
	}
	if s, d := suggest.Closest(name, other); plausible(name, s, d) {
		return lookupElsewhere(s)
	}
	return elsewhereMetric{}, false
}
