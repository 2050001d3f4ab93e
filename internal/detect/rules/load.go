package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/gpuchaos/gpuchaos/internal/model/limitread"
	"github.com/gpuchaos/gpuchaos/internal/model/suggest"
)

// Kind says whether a rule raises alerts or records series.
type Kind string

// The two kinds of Prometheus rule.
const (
	KindAlert  Kind = "alert"
	KindRecord Kind = "record"
)

// Rule is one alerting or recording rule as loaded from a file.
type Rule struct {
	// Source is the file path as given to Load or LoadFiles.
	Source string
	// Group is the name of the rule group.
	Group string
	// Index is the rule's position in its group, from 0.
	Index int
	// Line is the line of the rule in its file, from 1.
	Line int
	// Name is the alert name or the recorded metric name.
	Name string
	// Kind is KindAlert or KindRecord.
	Kind Kind
	// Expr is the PromQL expression as written.
	Expr string
	// Parsed is Expr parsed with Prometheus' own PromQL parser.
	Parsed parser.Expr
	// For and KeepFiringFor are the alert's pending and hold durations;
	// both are zero for recording rules.
	For, KeepFiringFor time.Duration
	// Labels are the rule's labels with the group's labels merged in
	// underneath, as Prometheus applies them (a rule's own label wins).
	Labels map[string]string
	// Annotations are the alert's annotations, unexpanded.
	Annotations map[string]string
	// Interval is the group's evaluation interval; zero means the
	// evaluator's default, which the caller chooses.
	Interval time.Duration
}

// Set is a collection of rules in file, group and index order.
type Set struct {
	Rules []*Rule
	// Warnings are findings Prometheus loads the rules with all the same,
	// as `promtool check rules` prints lint findings and exits 0: a
	// recording rule whose name and labels repeat another's while their
	// expressions may write different series. Each is an *Error.
	Warnings []error
}

// Alerts returns the alerting rules of the set, in order.
func (s *Set) Alerts() []*Rule {
	var out []*Rule
	for _, r := range s.Rules {
		if r.Kind == KindAlert {
			out = append(out, r)
		}
	}
	return out
}

// Lookup returns every rule with the given alert or record name, in order.
// Prometheus allows one alert name in several groups (and, with different
// labels, several times in one group), so there may be more than one.
func (s *Set) Lookup(name string) []*Rule {
	var out []*Rule
	for _, r := range s.Rules {
		if r.Name == name {
			out = append(out, r)
		}
	}
	return out
}

// Error is a problem with a rule file, one of its groups or one of its
// rules. Load and LoadFiles return one Error per problem, joined.
type Error struct {
	// Source is the file.
	Source string
	// Line is the line the problem is on, or 0 when unknown.
	Line int
	// Group is the group's name when the problem is inside a group.
	Group string
	// Rule is the rule's alert or record name when the problem is inside
	// a rule; RuleIndex is its position in the group from 0, or -1 when
	// the problem is not inside a rule.
	Rule      string
	RuleIndex int
	// Err is the problem itself.
	Err error
}

// Error formats the problem as `file: group "g" rule "r" (line n): problem`,
// leaving out the parts that do not apply.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	switch {
	case e.RuleIndex >= 0:
		fmt.Fprintf(&b, ": group %q ", e.Group)
		if e.Rule != "" {
			fmt.Fprintf(&b, "rule %q", e.Rule)
		} else {
			fmt.Fprintf(&b, "rule #%d", e.RuleIndex+1)
		}
		if e.Line > 0 {
			fmt.Fprintf(&b, " (line %d)", e.Line)
		}
	case e.Group != "":
		fmt.Fprintf(&b, ": group %q", e.Group)
		if e.Line > 0 {
			fmt.Fprintf(&b, " (line %d)", e.Line)
		}
	case e.Line > 0:
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the underlying problem.
func (e *Error) Unwrap() error { return e.Err }

// Fields each level of a rule file accepts; anything else is an error, as
// `promtool check rules` makes it.
var (
	plainGroupFields = []string{"name", "interval", "query_offset", "limit", "labels", "rules"}
	// The operator's RuleGroup also carries Thanos' partial response
	// strategy.
	crGroupFields = append(slices.Clone(plainGroupFields), "partial_response_strategy")
	ruleFields    = []string{"record", "alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
)

// Load reads the rules in one file's contents. source names the file in
// errors and in each Rule. Every problem found is reported, each as an
// *Error, joined with errors.Join.
func Load(data []byte, source string) (*Set, error) {
	l := &loader{source: source, parser: parser.NewParser(parser.Options{})}
	docs, err := decodeDocuments(data)
	if err != nil {
		return nil, l.fileErr(yamlLine(err), fmt.Errorf("not YAML: %s", yamlMessage(err)))
	}
	if len(docs) == 0 {
		return nil, l.fileErr(0, errors.New("empty file: no rule groups"))
	}
	for i, d := range docs {
		l.document(d, i)
	}
	if len(l.errs) == 0 && len(l.rules) == 0 {
		err := fmt.Errorf("%w: the file has no rule groups", errNoRules)
		if len(l.skipped) > 0 {
			err = fmt.Errorf("%w: the file holds %s but no PrometheusRule", errNoRules, strings.Join(l.skipped, ", "))
		}
		l.errs = append(l.errs, l.fileErr(0, err))
	}
	l.checkDuplicates()
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return &Set{Rules: l.rules, Warnings: l.warns}, nil
}

// LoadFiles reads several rule files into one Set, in the order given.
// A directory stands for its rule files (RuleFileExts), in name order, not
// those of its subdirectories: a fleet's rules folder, as Prometheus'
// rule_files: [dir/*.yaml] reads it. It reports the problems of every file,
// and also a recording rule that two files define with the same labels.
func LoadFiles(paths ...string) (*Set, error) {
	if len(paths) == 0 {
		return nil, errors.New("load rules: no files given")
	}
	var (
		set  Set
		errs []error
	)
	paths, inDir, errs := expandDirs(paths)
	for _, p := range paths {
		data, err := readFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s, err := Load(data, p)
		if err != nil && inDir[p] && onlyNoRules(err) {
			// A rules folder often keeps other manifests beside the
			// PrometheusRules; named alone, the file would be a mistake.
			set.Warnings = append(set.Warnings, fmt.Errorf("skipped: %w", err))
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		set.Rules = append(set.Rules, s.Rules...)
		set.Warnings = append(set.Warnings, s.Warnings...)
	}
	dupErrs, dupWarns := duplicateRecords(set.Rules, true)
	errs = append(errs, dupErrs...)
	set.Warnings = append(set.Warnings, dupWarns...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &set, nil
}

// RuleFileExts are the names LoadFiles reads in a directory: what rule
// files are called in the wild (OpenPAI's gpu.rules among them). Other
// files there, a README or a dashboard, are skipped.
var RuleFileExts = []string{".yaml", ".yml", ".rules", ".json"}

// errNoRules is the problem of a file that holds no rule group.
var errNoRules = errors.New("no rules")

// onlyNoRules says whether Load's error is only that the file holds no
// rules.
func onlyNoRules(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		return len(errs) == 1 && errors.Is(errs[0], errNoRules)
	}
	return errors.Is(err, errNoRules)
}

// expandDirs replaces each directory among paths with its rule files, and
// says which files came from a directory; a directory without any is an
// error, as an empty rule file is.
func expandDirs(paths []string) ([]string, map[string]bool, []error) {
	var (
		out   []string
		inDir = map[string]bool{}
		errs  []error
	)
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil || !st.IsDir() {
			// readFile says what is wrong with it.
			out = append(out, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("load rules: %w", err))
			continue
		}
		n := len(out)
		for _, e := range entries {
			if e.Type().IsRegular() && slices.Contains(RuleFileExts, strings.ToLower(filepath.Ext(e.Name()))) {
				out = append(out, filepath.Join(p, e.Name()))
				inDir[out[len(out)-1]] = true
			}
		}
		if len(out) == n {
			errs = append(errs, &Error{Source: p, RuleIndex: -1, Err: fmt.Errorf("no rule files in the directory (%s)", strings.Join(RuleFileExts, ", "))})
		}
	}
	return out, inDir, errs
}

// MaxFileBytes bounds one rule file. The largest public rule sets
// (kube-prometheus' mixins, a few thousand rules) are well under 1 MiB, so a
// larger file is a mistake: a log, a dump, a binary. It is the bound `run`
// puts on an experiment file, for the same reason, but declared here: each
// package owns what it reads.
const MaxFileBytes = 4 << 20

// readFile reads a rule file, refusing one over MaxFileBytes before
// reading it: parsing YAML costs tens of times the file's size in memory,
// so a 50 MB file took 9 s and 319 MB before it was refused. A
// file whose size stat cannot tell (a pipe, a device) is read up to the
// limit and refused past it.
func readFile(path string) ([]byte, error) {
	tooLarge := func(size string) error {
		return &Error{Source: path, RuleIndex: -1, Err: fmt.Errorf("%s, over the %d MiB limit for a rule file", size, MaxFileBytes>>20)}
	}
	data, err := limitread.File(path, MaxFileBytes)
	var tl *limitread.TooLargeError
	switch {
	case errors.As(err, &tl) && tl.Size >= 0:
		return nil, tooLarge(fmt.Sprintf("%.1f MiB", float64(tl.Size)/(1<<20)))
	case errors.As(err, &tl):
		return nil, tooLarge(fmt.Sprintf("more than %d MiB", MaxFileBytes>>20))
	case err != nil:
		return nil, fmt.Errorf("load rules: %w", err)
	}
	return data, nil
}

type loader struct {
	source string
	parser parser.Parser
	rules  []*Rule
	errs   []error
	warns  []error
	// skipped lists the Kubernetes objects that are not PrometheusRules,
	// for the error when nothing else is in the file.
	skipped []string
}

func (l *loader) fileErr(line int, err error) *Error {
	return &Error{Source: l.source, Line: line, RuleIndex: -1, Err: err}
}

func (l *loader) fail(line int, err error) { l.errs = append(l.errs, l.fileErr(line, err)) }

// decodeDocuments returns the content node of every non-empty YAML document.
func decodeDocuments(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
			c := n.Content[0]
			if c.Kind == yaml.ScalarNode && c.Tag == "!!null" {
				continue
			}
			docs = append(docs, c)
		}
	}
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlLine extracts the line number from a YAML parser error, or 0.
func yamlLine(err error) int {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// yamlMessage is a YAML parser error without its "yaml: line N:" prefix,
// which the caller moves into the position.
func yamlMessage(err error) string {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		return m[2]
	}
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// deref follows YAML aliases.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

var kindNames = map[yaml.Kind]string{
	yaml.DocumentNode: "document", yaml.SequenceNode: "list",
	yaml.MappingNode: "mapping", yaml.ScalarNode: "scalar", yaml.AliasNode: "alias",
}

// field is one key of a YAML mapping with its value.
type field struct {
	key   string
	line  int
	value *yaml.Node
}

// fields returns the keys of a mapping node, reporting through bad any key
// outside allowed and any key given twice. what names the mapping in
// messages ("a rule", "a group").
func fields(n *yaml.Node, allowed []string, what string, bad func(line int, err error)) map[string]field {
	out := map[string]field{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if prev, dup := out[k.Value]; dup {
			bad(k.Line, fmt.Errorf("field %q given twice (lines %d and %d)", k.Value, prev.line, k.Line))
			continue
		}
		if allowed != nil && !slices.Contains(allowed, k.Value) {
			msg := fmt.Sprintf("unknown field %q in %s", k.Value, what)
			if s, d := suggest.Closest(k.Value, allowed); d <= 2 {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				msg += fmt.Sprintf(" (it takes %s)", strings.Join(allowed, ", "))
			}
			bad(k.Line, errors.New(msg))
			continue
		}
		out[k.Value] = field{key: k.Value, line: k.Line, value: v}
	}
	return out
}

// document reads one YAML document: a plain rule file, a PrometheusRule or
// a List of them. Other Kubernetes objects are skipped, since kubectl
// manifests mix kinds.
func (l *loader) document(n *yaml.Node, index int) {
	if n.Kind != yaml.MappingNode {
		l.fail(n.Line, fmt.Errorf("not a rule file: the document is a YAML %s, not a mapping with \"groups\" or a PrometheusRule", kindNames[n.Kind]))
		return
	}
	top := fields(n, nil, "", func(int, error) {})
	kind, hasKind := top["kind"]
	if !hasKind {
		if _, ok := top["groups"]; !ok {
			keys := slices.Sorted(maps.Keys(top))
			msg := fmt.Sprintf("not a rule file: no top-level \"groups\" list and no PrometheusRule kind (keys: %s)", strings.Join(keys, ", "))
			for _, k := range keys {
				if s, d := suggest.Closest(k, []string{"groups"}); d <= 2 {
					msg += fmt.Sprintf("; did you mean %q instead of %q?", s, k)
				}
			}
			l.fail(n.Line, errors.New(msg))
			return
		}
		if index > 0 {
			// Prometheus reads only the first document of a rule file;
			// loading the rest would claim detection it never does.
			l.fail(n.Line, fmt.Errorf("document %d of a plain rule file: Prometheus reads only the first YAML document and would ignore this one; merge the groups into one document", index+1))
			return
		}
		fs := fields(n, []string{"groups"}, "a rule file", l.fail)
		l.groups(fs["groups"], plainGroupFields)
		return
	}
	switch kind.value.Value {
	case "PrometheusRule":
		l.prometheusRule(n)
	case "List":
		items, ok := top["items"]
		if !ok || items.value.Kind != yaml.SequenceNode {
			l.fail(n.Line, errors.New("kind List without an \"items\" list"))
			return
		}
		for _, it := range items.value.Content {
			it = deref(it)
			if it.Kind != yaml.MappingNode {
				l.fail(it.Line, fmt.Errorf("an item of the List is a YAML %s, not an object", kindNames[it.Kind]))
				continue
			}
			f := fields(it, nil, "", func(int, error) {})
			if k := f["kind"]; k.value != nil && k.value.Value == "PrometheusRule" {
				l.prometheusRule(it)
			} else {
				l.skip(f)
			}
		}
	default:
		l.skip(top)
	}
}

func (l *loader) skip(top map[string]field) {
	k := "an object without a kind"
	if f := top["kind"]; f.value != nil {
		k = "a " + f.value.Value
	}
	l.skipped = append(l.skipped, k)
}

func (l *loader) prometheusRule(n *yaml.Node) {
	top := fields(n, nil, "", func(int, error) {})
	if av := top["apiVersion"]; av.value == nil || !strings.HasPrefix(av.value.Value, "monitoring.coreos.com/") {
		got := "none"
		if av.value != nil {
			got = strconv.Quote(av.value.Value)
		}
		l.fail(n.Line, fmt.Errorf("PrometheusRule with apiVersion %s, want monitoring.coreos.com/v1", got))
		return
	}
	spec, ok := top["spec"]
	if !ok || spec.value.Kind != yaml.MappingNode {
		l.fail(n.Line, errors.New("PrometheusRule without a spec"))
		return
	}
	fs := fields(spec.value, []string{"groups"}, "a PrometheusRule spec", l.fail)
	l.groups(fs["groups"], crGroupFields)
}

// groups reads a list of rule groups. Group names must be unique within the
// list (one rule file, or one PrometheusRule), as in Prometheus.
func (l *loader) groups(f field, allowed []string) {
	if f.value == nil || f.value.Tag == "!!null" {
		return
	}
	if f.value.Kind != yaml.SequenceNode {
		l.fail(f.line, fmt.Errorf("\"groups\" is a YAML %s, not a list", kindNames[f.value.Kind]))
		return
	}
	seen := map[string]int{}
	for _, g := range f.value.Content {
		g = deref(g)
		if g.Kind != yaml.MappingNode {
			l.fail(g.Line, fmt.Errorf("a group is a YAML %s, not a mapping", kindNames[g.Kind]))
			continue
		}
		l.group(g, allowed, seen)
	}
}

func (l *loader) group(n *yaml.Node, allowed []string, seen map[string]int) {
	name := ""
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" {
			name = deref(n.Content[i+1]).Value
		}
	}
	gerr := func(line int, err error) {
		l.errs = append(l.errs, &Error{Source: l.source, Line: line, Group: name, RuleIndex: -1, Err: err})
	}
	fs := fields(n, allowed, "a group", gerr)
	if name == "" {
		gerr(n.Line, errors.New("group name must not be empty"))
	} else if prev, dup := seen[name]; dup {
		gerr(n.Line, fmt.Errorf("group name repeated (first at line %d); Prometheus requires unique group names in a file", prev))
	} else {
		seen[name] = n.Line
	}
	var interval time.Duration
	if f, ok := fs["interval"]; ok {
		d, err := model.ParseDuration(f.value.Value)
		if err != nil {
			gerr(f.line, fmt.Errorf("interval: %w", err))
		}
		interval = time.Duration(d)
	}
	var groupLabels map[string]string
	if f, ok := fs["labels"]; ok {
		if err := f.value.Decode(&groupLabels); err != nil {
			gerr(f.line, fmt.Errorf("labels: %s", yamlMessage(err)))
		}
		for k, v := range groupLabels {
			if !model.UTF8Validation.IsValidLabelName(k) || k == model.MetricNameLabel {
				gerr(f.line, fmt.Errorf("invalid group label name %q", k))
			}
			if !model.LabelValue(v).IsValid() {
				gerr(f.line, fmt.Errorf("invalid group label value %q", v))
			}
		}
	}
	rf, ok := fs["rules"]
	if !ok || rf.value.Tag == "!!null" {
		return
	}
	if rf.value.Kind != yaml.SequenceNode {
		gerr(rf.line, fmt.Errorf("\"rules\" is a YAML %s, not a list", kindNames[rf.value.Kind]))
		return
	}
	for i, rn := range rf.value.Content {
		l.rule(deref(rn), name, i, interval, groupLabels)
	}
}

func (l *loader) rule(n *yaml.Node, group string, index int, interval time.Duration, groupLabels map[string]string) {
	name := ""
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; (k == "alert" || k == "record") && name == "" {
			name = deref(n.Content[i+1]).Value
		}
	}
	bad := false
	rerr := func(line int, err error) {
		bad = true
		l.errs = append(l.errs, &Error{Source: l.source, Line: line, Group: group, Rule: name, RuleIndex: index, Err: err})
	}
	if n.Kind != yaml.MappingNode {
		rerr(n.Line, fmt.Errorf("a rule is a YAML %s, not a mapping", kindNames[n.Kind]))
		return
	}
	fields(n, ruleFields, "a rule", rerr)
	if bad {
		return
	}
	var r rulefmt.Rule
	if err := n.Decode(&r); err != nil {
		rerr(n.Line, errors.New(yamlMessage(err)))
		return
	}
	var parsed parser.Expr
	if r.Expr != "" {
		var err error
		if parsed, err = l.parser.ParseExpr(r.Expr); err != nil {
			rerr(n.Line, fmt.Errorf("expr: %w", err))
		}
	}
	// rulefmt checks the rest the way Prometheus does: exactly one of
	// alert and record, valid names, no for: on a recording rule, and
	// label and annotation templates that parse.
	var node rulefmt.RuleNode
	if err := n.Decode(&node); err == nil {
		for _, we := range r.Validate(node, model.UTF8Validation, l.parser) {
			inner := we.Unwrap()
			var perr parser.ParseErrors
			if errors.As(inner, &perr) {
				continue // reported above, in our words
			}
			rerr(n.Line, inner)
		}
	}
	if bad {
		return
	}
	kind := KindAlert
	if r.Record != "" {
		kind = KindRecord
	}
	labels := maps.Clone(groupLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, r.Labels)
	l.rules = append(l.rules, &Rule{
		Source: l.source, Group: group, Index: index, Line: n.Line,
		Name: name, Kind: kind, Expr: r.Expr, Parsed: parsed,
		For: time.Duration(r.For), KeepFiringFor: time.Duration(r.KeepFiringFor),
		Labels: labels, Annotations: r.Annotations, Interval: interval,
	})
}

// checkDuplicates reports rules that Prometheus would load but that
// collide when evaluated.
//
// An alert name repeated in one group is an error only when the two rules
// also carry the same labels: then both write the same ALERTS series and
// their alerts cannot be told apart. The same name with different labels
// (a warning and a critical threshold, as kubernetes-mixin does) is a
// common, valid pattern, and the same name in different groups is allowed
// by Prometheus, so both are accepted.
//
// A recording rule whose name and labels repeat another's anywhere in the
// set is an error only when both provably write the same series
// (sameSeries); otherwise it is a warning, as in promtool, since their
// expressions may well keep them apart: kube-prometheus records
// code_verb:apiserver_request_total:increase1h four times, once for each
// of code=~"2..", "3..", "4.." and "5..".
func (l *loader) checkDuplicates() {
	type key struct{ group, name string }
	byName := map[key][]*Rule{}
	for _, r := range l.rules {
		if r.Kind == KindAlert {
			k := key{r.Group, r.Name}
			for _, prev := range byName[k] {
				if maps.Equal(prev.Labels, r.Labels) {
					l.errs = append(l.errs, &Error{Source: l.source, Line: r.Line, Group: r.Group, Rule: r.Name, RuleIndex: r.Index,
						Err: fmt.Errorf("duplicate alert name: also defined at line %d with the same labels, so both write the same ALERTS series; rename one or give them different labels (e.g. severity)", prev.Line)})
					break
				}
			}
			byName[k] = append(byName[k], r)
		}
	}
	errs, warns := duplicateRecords(l.rules, false)
	l.errs = append(l.errs, errs...)
	l.warns = append(l.warns, warns...)
}

// duplicateRecords reports recording rules with the same name and labels:
// as errors the pairs that provably write the same series, as warnings the
// others. With crossFileOnly it reports only pairs from different files,
// which Load has not already seen.
func duplicateRecords(rules []*Rule, crossFileOnly bool) (errs, warns []error) {
	byName := map[string][]*Rule{}
	for _, r := range rules {
		if r.Kind != KindRecord {
			continue
		}
		var warn error
		for _, prev := range byName[r.Name] {
			if crossFileOnly && prev.Source == r.Source {
				continue
			}
			if !maps.Equal(prev.Labels, r.Labels) {
				continue
			}
			where := fmt.Sprintf("line %d", prev.Line)
			if prev.Source != r.Source {
				where = fmt.Sprintf("%s:%d", prev.Source, prev.Line)
			}
			if sameSeries(prev.Parsed, r.Parsed) {
				errs = append(errs, &Error{Source: r.Source, Line: r.Line, Group: r.Group, Rule: r.Name, RuleIndex: r.Index,
					Err: fmt.Errorf("duplicate recording rule: also defined at %s with the same labels, so both would write the same series", where)})
				warn = nil
				break
			}
			if warn == nil {
				warn = &Error{Source: r.Source, Line: r.Line, Group: r.Group, Rule: r.Name, RuleIndex: r.Index,
					Err: fmt.Errorf("recording rule name and labels repeat the rule at %s; loaded, since their expressions may write different series, but check they never write the same one", where)}
			}
		}
		if warn != nil {
			warns = append(warns, warn)
		}
		byName[r.Name] = append(byName[r.Name], r)
	}
	return errs, warns
}
