package report

import (
	"fmt"
	"html/template"
	"io"

	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
)

// CoverageHTML writes a self-contained page (no scripts, no network) with
// the summary and a heatmap of the matrix: rows are faults, columns are
// detectors, a cell's colour and text give the time to detect.
func CoverageHTML(w io.Writer, res *coverage.Result, title string) error {
	doc := NewCoverageDoc(res)
	type cell struct {
		Text, Class, Title string
	}
	type row struct {
		ID, Family, Target string
		Goodput            string
		Missed             bool
		Cells              []cell
	}
	var rows []row
	for _, fd := range doc.Faults {
		r := row{ID: fd.ID, Family: string(fd.Family), Target: targetName(fd.FaultResult), Goodput: fmt.Sprintf("%.2f", fd.Job.Goodput), Missed: len(fd.By) == 0}
		for _, d := range res.Detectors {
			c := fd.Cells[d.Name]
			x := cell{Class: "miss", Title: fd.ID + " × " + d.Name + ": " + c.Verdict}
			if c.Detected {
				x.Text = seconds(*c.TTDSeconds)
				x.Class = c.Verdict
				if c.Verdict == "pass" && *c.TTDSeconds <= 60 {
					x.Class = "fast"
				}
			} else if c.Verdict == "error" {
				x.Class, x.Text = "error", "!"
			}
			r.Cells = append(r.Cells, x)
		}
		rows = append(rows, r)
	}
	return coverageTmpl.Execute(w, map[string]any{"Title": title, "Doc": doc, "Rows": rows, "Detectors": res.Detectors, "Timelines": timelines(res), "RuleLists": []ruleSection{
		{"Rules that can never fire", rulesWith(res, "never_fires")},
		{"Rules that need a metric switched on", rulesWith(res, "opt_in_off")},
		{"Rules over metrics no exporter gpuchaos knows lists", rulesWith(res, "unknown")},
	}})
}

// timeline is one fault's detections drawn on its time axis.
type timeline struct {
	ID     string
	Height int
	// Window and Deadline are x positions; Ticks label the axis.
	Window, Deadline float64
	Ticks            []tick
	Marks            []mark
}

type tick struct {
	X     float64
	Label string
}

type mark struct {
	X, Y        float64
	Label, Fill string
}

const (
	tlLeft  = 10.0
	tlWidth = 900.0
	tlRow   = 16
)

// timelines lays out, per fault, the fault window (shaded), the deadline
// (a dashed line) and a dot per detector at its time to detect.
func timelines(res *coverage.Result) []timeline {
	span := res.WindowSeconds + res.RecoverySeconds
	if span <= 0 {
		return nil
	}
	x := func(sec float64) float64 { return tlLeft + tlWidth*sec/span }
	var ticks []tick
	for m := 0.0; m*60 <= span; m += 5 {
		ticks = append(ticks, tick{x(m * 60), fmt.Sprintf("%.0fm", m)})
	}
	var out []timeline
	for _, fr := range res.Faults {
		tl := timeline{ID: fr.ID, Window: x(res.WindowSeconds) - tlLeft, Deadline: x(res.DeadlineSeconds), Ticks: ticks}
		for i, name := range detectionOrder(fr) {
			c := fr.Cells[name]
			fill := "#91cf60"
			if c.Verdict == "late" {
				fill = "#e6b400"
			}
			tl.Marks = append(tl.Marks, mark{X: x(*c.TTDSeconds), Y: float64(22 + i*tlRow), Label: name + " " + seconds(*c.TTDSeconds), Fill: fill})
		}
		tl.Height = 34 + len(tl.Marks)*tlRow
		out = append(out, tl)
	}
	return out
}

var coverageTmpl = template.Must(template.New("coverage").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2330}
h1{font-size:20px;margin:0 0 4px}
.sum{margin:8px 0 16px;color:#444}
table{border-collapse:collapse}
th,td{border:1px solid #d8dbe2;padding:3px 6px;text-align:center;white-space:nowrap}
th.d{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:500;font-size:12px;padding:6px 2px}
td.f{text-align:left;font-family:ui-monospace,monospace}td.missed{background:#fde0dd;color:#a50f15}
td.fast{background:#1a9850;color:#fff}td.pass{background:#91cf60}
td.late{background:#fee08b}td.miss{background:#fafafa;color:#bbb}td.error{background:#d73027;color:#fff}
tr.fam td{background:#eef0f5;text-align:left;font-weight:600}
h2{font-size:16px;margin:24px 0 4px}th.never{color:#999;text-decoration:line-through}.src{color:#777;font-size:12px}
table.sg td.x{text-align:left;white-space:normal;max-width:720px}.tl .f{font-family:ui-monospace,monospace;margin-top:8px}
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;border:1px solid #d8dbe2}
</style></head><body>
<h1>{{.Title}}</h1>
<div class="sum">Detected within the deadline: <b>{{.Doc.Summary.Detected}}</b> of {{.Doc.Summary.Faults}} faults
({{len .Doc.Summary.Late}} late, {{len .Doc.Summary.Missed}} missed).
Goodput {{printf "%.3f" .Doc.Summary.BaselineGoodput}} fault-free, {{printf "%.3f" .Doc.Summary.Goodput}} on average under a fault.
{{if .Doc.Baseline.FalsePositives}}False positives on the fault-free twin: {{range .Doc.Baseline.FalsePositives}}{{.}} {{end}}{{end}}</div>
<div class="legend"><span class="fast" style="background:#1a9850;color:#fff">≤ 1 min</span><span style="background:#91cf60">within deadline</span><span style="background:#fee08b">late</span><span style="background:#d73027;color:#fff">error</span><span>not detected</span><span style="background:#fde0dd;color:#a50f15">fault nothing noticed</span></div>
<table><thead><tr><th>fault</th><th>target</th><th>goodput</th>{{range .Detectors}}<th class="d{{if or (eq .Status "never_fires") (eq .Status "opt_in_off")}} never{{end}}" title="{{.Rule}}{{if .Reason}} — {{.Reason}}{{end}}">{{.Name}}</th>{{end}}</tr></thead><tbody>
{{range .Rows}}<tr><td class="f{{if .Missed}} missed{{end}}" title="{{.Family}}{{if .Missed}}: nothing noticed this fault{{end}}">{{.ID}}</td><td class="f">{{.Target}}</td><td>{{.Goodput}}</td>{{range .Cells}}<td class="{{.Class}}" title="{{.Title}}">{{.Text}}</td>{{end}}</tr>
{{end}}</tbody></table>
{{range .RuleLists}}{{if .Rules}}<h2>{{.Title}}</h2><ul>{{range .Rules}}<li><b>{{.Name}}</b> <span class="src">{{.Source}}</span>: {{.Reason}}</li>{{end}}</ul>{{end}}
{{end}}{{with .Doc.Suggestions}}<h2>Suggestions for the faults no rule caught</h2>
<p class="sum">From the recommended pack; each was re-run on the twin and stayed silent over a fault-free hour.</p>
<table class="sg"><thead><tr><th>fault</th><th>rule</th><th>time to detect</th><th>expression or reason</th></tr></thead><tbody>
{{range .}}<tr><td class="f">{{.Fault}}</td>{{if .Rule}}<td class="f">{{.Rule}}</td><td>{{printf "%.0f" .TTDSeconds}}s</td><td class="x"><code>{{.Expr}}</code></td>{{else}}<td>—</td><td>—</td><td class="x">{{.Note}}</td>{{end}}</tr>
{{end}}</tbody></table>{{end}}
<h2>Timelines</h2>
<p class="sum">Per fault: the shaded band is the fault window, the dashed line the deadline, each dot a detector's first firing.</p>
{{range .Timelines}}<div class="tl"><div class="f">{{.ID}}</div>
<svg xmlns="http://www.w3.org/2000/svg" width="1100" height="{{.Height}}" role="img" aria-label="timeline of {{.ID}}">
<rect x="10" y="4" width="{{printf "%.1f" .Window}}" height="{{.Height}}" fill="#fde0dd" opacity="0.6"/>
<line x1="{{printf "%.1f" .Deadline}}" y1="0" x2="{{printf "%.1f" .Deadline}}" y2="{{.Height}}" stroke="#a50f15" stroke-dasharray="4 3"/>
{{range .Ticks}}<text x="{{printf "%.1f" .X}}" y="12" font-size="10" fill="#666">{{.Label}}</text>{{end}}
{{range .Marks}}<circle cx="{{printf "%.1f" .X}}" cy="{{printf "%.1f" .Y}}" r="5" fill="{{.Fill}}" stroke="#333"/><text x="{{printf "%.1f" .X}}" dx="9" y="{{printf "%.1f" .Y}}" dy="4" font-size="11">{{.Label}}</text>{{end}}
{{if not .Marks}}<text x="20" y="26" font-size="12" fill="#a50f15">nothing noticed this fault</text>{{end}}
</svg></div>
{{end}}
</body></html>
`))

// ruleSection is one list of rules under its heading on the HTML page.
type ruleSection struct {
	Title string
	Rules []coverage.RuleReport
}

// rulesWith lists the rules under test whose static analysis says status.
func rulesWith(res *coverage.Result, status string) []coverage.RuleReport {
	var out []coverage.RuleReport
	for _, r := range res.Rules {
		if r.Status == status {
			out = append(out, r)
		}
	}
	return out
}
