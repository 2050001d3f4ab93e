// Package report renders coverage results and run records for people
// (tables, a self-contained HTML page) and for scripts (JSON).
package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
)

// CoverageDoc is the JSON form of a coverage result, the object DESIGN.md §4
// promises for `gpuchaos demo --format json`.
type CoverageDoc struct {
	// Rules reports every rule under test (empty without --rules).
	Rules       []coverage.RuleReport `json:"rules"`
	Suggestions []coverage.Suggestion `json:"suggestions"`
	Faults      []FaultDoc            `json:"faults"`
	Detectors   []*coverage.Detector  `json:"detectors"`
	Matrix      []coverage.Cell       `json:"matrix"`
	Summary     Summary               `json:"summary"`
	Baseline    coverage.Baseline     `json:"baseline"`
}

// FaultDoc is one fault row.
type FaultDoc struct {
	ID     string         `json:"id"`
	Family catalog.Family `json:"family"`
	Scope  catalog.Scope  `json:"scope"`
	Safety catalog.Safety `json:"safety"`
	*coverage.FaultResult
}

// Summary counts what was detected.
type Summary struct {
	Faults   int                       `json:"faults"`
	Detected int                       `json:"detected"`
	Missed   []string                  `json:"missed"`
	Late     []string                  `json:"late"`
	ByFamily map[catalog.Family]Family `json:"by_family"`
	// Goodput is the mean of the job's goodput across fault runs, beside
	// the fault-free baseline's.
	Goodput         float64 `json:"goodput_mean"`
	BaselineGoodput float64 `json:"baseline_goodput"`
	LostGPUHours    float64 `json:"lost_gpu_hours_total"`
}

// Family counts one family's faults.
type Family struct {
	Faults   int `json:"faults"`
	Detected int `json:"detected"`
}

// NewCoverageDoc builds the JSON document of a result.
func NewCoverageDoc(res *coverage.Result) *CoverageDoc {
	doc := &CoverageDoc{Detectors: res.Detectors, Matrix: res.Matrix, Baseline: res.Baseline, Rules: res.Rules, Suggestions: res.Suggestions}
	if doc.Rules == nil {
		doc.Rules = []coverage.RuleReport{}
	}
	if doc.Suggestions == nil {
		doc.Suggestions = []coverage.Suggestion{}
	}
	doc.Summary = Summary{Missed: []string{}, Late: []string{}, ByFamily: map[catalog.Family]Family{}, BaselineGoodput: res.Baseline.Job.Goodput}
	for _, fr := range res.Faults {
		f := fr.Fault
		doc.Faults = append(doc.Faults, FaultDoc{ID: f.ID, Family: f.Family, Scope: f.Scope, Safety: f.Safety, FaultResult: fr})
		fam := doc.Summary.ByFamily[f.Family]
		fam.Faults++
		doc.Summary.Faults++
		doc.Summary.Goodput += fr.Job.Goodput
		doc.Summary.LostGPUHours += fr.Job.LostGPUHours - res.Baseline.Job.LostGPUHours
		switch {
		case passed(fr):
			fam.Detected++
			doc.Summary.Detected++
		case len(fr.By) > 0:
			doc.Summary.Late = append(doc.Summary.Late, f.ID)
		default:
			doc.Summary.Missed = append(doc.Summary.Missed, f.ID)
		}
		doc.Summary.ByFamily[f.Family] = fam
	}
	if n := len(res.Faults); n > 0 {
		doc.Summary.Goodput /= float64(n)
	}
	return doc
}

// CoverageJSON writes NewCoverageDoc(res) as JSON indented by two spaces
// and followed by a newline, byte for byte as a json.Encoder with that
// indentation writes it, but the matrix a cell at a time: encoding the
// whole document at once held its text in memory twice over (compact, then
// indented), 75 MB each for 10,000 rules against the catalogue, and made
// the end of a run its peak in memory.
func CoverageJSON(w io.Writer, res *coverage.Result) error {
	doc := NewCoverageDoc(res)
	matrix := doc.Matrix
	doc.Matrix = nil
	head, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	// A newline cannot occur inside a JSON string, so this is the
	// top-level key and nothing else.
	const hole = "\n  \"matrix\": null"
	i := bytes.Index(head, []byte(hole))
	if i < 0 {
		return errors.New("encode coverage: no matrix field in the document")
	}
	bw := bufio.NewWriter(w)
	bw.Write(head[:i+len(hole)-len("null")])
	switch {
	case matrix == nil:
		bw.WriteString("null")
	case len(matrix) == 0:
		bw.WriteString("[]")
	default:
		bw.WriteString("[")
		for k, c := range matrix {
			b, err := json.MarshalIndent(c, "    ", "  ")
			if err != nil {
				return err
			}
			if k > 0 {
				bw.WriteString(",")
			}
			bw.WriteString("\n    ")
			bw.Write(b)
		}
		bw.WriteString("\n  ]")
	}
	bw.Write(head[i+len(hole):])
	bw.WriteString("\n")
	return bw.Flush()
}

// Findings are what a CI gate can fail a coverage run on.
type Findings struct {
	// Missed are the faults no detector noticed within the deadline: the
	// failed cases of the JUnit report, late detections included.
	Missed []string
	// NeverFires are the rules the static analysis says can never fire.
	NeverFires []string
	// OptInOff are the rules that need a metric switched on first.
	OptInOff []string
	// Noisy are the detectors that fired on the fault-free twin: false
	// positives.
	Noisy []string
	// Unknown are the rules that read a metric no exporter gpuchaos knows
	// lists, so their verdict is only as good as the twin's guess that the
	// metric is absent.
	Unknown []string
}

// CoverageFindings collects a result's findings, each list in the report's
// order.
func CoverageFindings(res *coverage.Result) Findings {
	f := Findings{NeverFires: []string{}, OptInOff: []string{}, Missed: []string{}, Noisy: slices.Clone(res.Baseline.FalsePositives), Unknown: []string{}}
	for _, fr := range res.Faults {
		if !passed(fr) {
			f.Missed = append(f.Missed, fr.ID)
		}
	}
	for _, r := range res.Rules {
		switch r.Status {
		case string(rules.StatusNeverFires):
			f.NeverFires = append(f.NeverFires, r.Name)
		case string(rules.StatusOptInOff):
			f.OptInOff = append(f.OptInOff, r.Name)
		case string(rules.StatusUnknown):
			f.Unknown = append(f.Unknown, r.Name)
		}
	}
	if f.Noisy == nil {
		f.Noisy = []string{}
	}
	return f
}

// passed reports whether some detector noticed the fault within its deadline.
func passed(fr *coverage.FaultResult) bool {
	for _, c := range fr.Cells {
		if c.Verdict == "pass" {
			return true
		}
	}
	return false
}

// CoverageTable writes the matrix for a terminal: one row per fault with the
// detectors that noticed it, fastest first, and what it cost the job.
func CoverageTable(w io.Writer, res *coverage.Result) error {
	doc := NewCoverageDoc(res)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tTARGET\tDETECTED BY (time to detect)\tGOODPUT\tLOST GPU-h")
	for _, fd := range doc.Faults {
		fr := fd.FaultResult
		by := detectedBy(fr)
		if by == "" {
			by = missedBy(len(res.Detectors))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\n", fd.ID, targetName(fr), by, fr.Job.Goodput, oneDecimal(fr.Job.LostGPUHours-res.Baseline.Job.LostGPUHours))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := doc.Summary
	fmt.Fprintf(w, "\nDetected within the deadline: %d of %d faults (%d late, %d missed).\n", s.Detected, s.Faults, len(s.Late), len(s.Missed))
	var fams []string
	for _, f := range catalog.Families() {
		if c, ok := s.ByFamily[f]; ok {
			fams = append(fams, fmt.Sprintf("%s %d/%d", f, c.Detected, c.Faults))
		}
	}
	fmt.Fprintf(w, "By family: %s.\n", strings.Join(fams, ", "))
	if len(s.Missed) > 0 {
		fmt.Fprintf(w, "Missed (nothing noticed): %s.\n", strings.Join(s.Missed, ", "))
	}
	if len(s.Late) > 0 {
		fmt.Fprintf(w, "Late (noticed after the deadline only): %s.\n", strings.Join(s.Late, ", "))
	}
	// One pass over the matrix: searching it once per detector was
	// quadratic in the rules, minutes for 10,000 of them.
	fired := map[string]bool{}
	for _, c := range res.Matrix {
		if c.Detected {
			fired[c.Detector] = true
		}
	}
	// A noisy detector fired, on the fault-free twin: it is listed with
	// the false positives, not as one that never fired.
	for _, fp := range res.Baseline.FalsePositives {
		fired[fp] = true
	}
	var silent []string
	for _, d := range res.Detectors {
		if !fired[d.Name] {
			silent = append(silent, d.Name)
		}
	}
	if len(silent) > 0 {
		fmt.Fprintf(w, "Detectors that never fired: %s.\n", strings.Join(silent, ", "))
	}
	if noisy := res.Baseline.Noisy; len(noisy) > 0 {
		var parts []string
		for _, n := range noisy {
			parts = append(parts, fmt.Sprintf("%s (%s)", n.Detector, n.Count()))
		}
		fmt.Fprintf(w, "False positives on the fault-free twin (no detection credit): %s.\n", strings.Join(parts, ", "))
	} else if fp := res.Baseline.FalsePositives; len(fp) > 0 {
		fmt.Fprintf(w, "False positives on the fault-free twin (no detection credit): %s.\n", strings.Join(fp, ", "))
	}
	fmt.Fprintf(w, "Goodput: %.3f fault-free; %.3f on average under a fault; %s GPU-hours lost to faults beyond the baseline.\n",
		s.BaselineGoodput, s.Goodput, oneDecimal(s.LostGPUHours))
	var never, unproduced, unknown, off []coverage.RuleReport
	for _, r := range res.Rules {
		switch {
		case r.Status == string(rules.StatusUnknown):
			unknown = append(unknown, r)
		case r.Status == string(rules.StatusOptInOff):
			off = append(off, r)
		case r.Status != string(rules.StatusNeverFires):
		case r.Kind == string(rules.KindRecord):
			unproduced = append(unproduced, r)
		default:
			never = append(never, r)
		}
	}
	ruleList(w, "Rules that can never fire", never, len(res.Rules))
	ruleList(w, "Rules that need a metric switched on in an exporter the fleet runs", off, len(res.Rules))
	ruleList(w, "Recording rules that can never produce a series", unproduced, len(res.Rules))
	ruleList(w, "Rules over metrics no exporter gpuchaos knows lists, evaluated as reading nothing", unknown, len(res.Rules))
	if len(res.Suggestions) > 0 {
		fmt.Fprintln(w, "\nSuggestions for the faults no rule caught (recommended pack, re-run on the twin, silent over a fault-free hour):")
		for _, sg := range res.Suggestions {
			fmt.Fprintf(w, "  %s\n", sg.Text())
		}
	}
	return nil
}

// ruleList writes one section of rules with the reason of each, or
// nothing when there are none.
func ruleList(w io.Writer, title string, list []coverage.RuleReport, total int) {
	if len(list) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s (%d of %d):\n", title, len(list), total)
	for _, r := range list {
		fmt.Fprintf(w, "  %s (%s): %s\n", r.Name, r.Source, r.Reason)
	}
}

// detectionOrder returns the detectors that noticed the fault, fastest
// first, ties by name.
func detectionOrder(fr *coverage.FaultResult) []string {
	names := slices.Clone(fr.By)
	slices.SortStableFunc(names, func(a, b string) int {
		ta, tb := *fr.Cells[a].TTDSeconds, *fr.Cells[b].TTDSeconds
		switch {
		case ta < tb:
			return -1
		case ta > tb:
			return 1
		}
		return strings.Compare(a, b)
	})
	return names
}

func detectedBy(fr *coverage.FaultResult) string {
	var parts []string
	for _, name := range detectionOrder(fr) {
		c := fr.Cells[name]
		s := fmt.Sprintf("%s %s", c.Detector, seconds(*c.TTDSeconds))
		if c.Verdict == "late" {
			s += " (late)"
		}
		parts = append(parts, s)
	}
	if len(parts) > 3 {
		parts = append(parts[:3], fmt.Sprintf("+%d more", len(parts)-3))
	}
	return strings.Join(parts, ", ")
}

func targetName(fr *coverage.FaultResult) string {
	r := fr.Target
	switch r.Kind {
	case catalog.ScopeGPU:
		return fmt.Sprintf("%s/gpu%d", r.Node, r.GPU)
	case catalog.ScopeRank:
		return fmt.Sprintf("%s/rank%d", r.Job, r.Rank)
	case catalog.ScopeJob:
		return r.Job
	}
	return r.Node
}

func seconds(s float64) string {
	if s < 90 {
		return fmt.Sprintf("%.0fs", s)
	}
	return fmt.Sprintf("%.1fm", s/60)
}

// missedBy is the DETECTED BY cell of a fault nothing noticed, which says
// how many detectors were judged: "all 0" when none was (recording rules
// only, no --builtin) said nothing true.
func missedBy(detectors int) string {
	switch detectors {
	case 0:
		return "MISSED: no detector judged (no alert rule, no built-in)"
	case 1:
		return "MISSED by the only detector"
	case 2:
		return "MISSED by both detectors"
	}
	return fmt.Sprintf("MISSED by all %d detectors", detectors)
}

// oneDecimal formats a figure to one decimal place without the "-0.0" a
// tiny negative rounds to: a fault that cost a few GPU-seconds less than
// the baseline cost nothing.
func oneDecimal(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	if s == "-0.0" {
		return "0.0"
	}
	return s
}
