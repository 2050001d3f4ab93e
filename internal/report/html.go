package report

import (
	"fmt"
	"html/template"
	"io"

	"github.com/gpuchaos/gpuchaos/internal/coverage"
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
	return coverageTmpl.Execute(w, map[string]any{"Title": title, "Doc": doc, "Rows": rows, "Detectors": res.Detectors})
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
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;border:1px solid #d8dbe2}
</style></head><body>
<h1>{{.Title}}</h1>
<div class="sum">Detected within the deadline: <b>{{.Doc.Summary.Detected}}</b> of {{.Doc.Summary.Faults}} faults
({{len .Doc.Summary.Late}} late, {{len .Doc.Summary.Missed}} missed).
Goodput {{printf "%.3f" .Doc.Summary.BaselineGoodput}} fault-free, {{printf "%.3f" .Doc.Summary.Goodput}} on average under a fault.
{{if .Doc.Baseline.FalsePositives}}False positives on the fault-free twin: {{range .Doc.Baseline.FalsePositives}}{{.}} {{end}}{{end}}</div>
<div class="legend"><span class="fast" style="background:#1a9850;color:#fff">≤ 1 min</span><span style="background:#91cf60">within deadline</span><span style="background:#fee08b">late</span><span style="background:#d73027;color:#fff">error</span><span>not detected</span><span style="background:#fde0dd;color:#a50f15">fault nothing noticed</span></div>
<table><thead><tr><th>fault</th><th>target</th><th>goodput</th>{{range .Detectors}}<th class="d" title="{{.Rule}}">{{.Name}}</th>{{end}}</tr></thead><tbody>
{{range .Rows}}<tr><td class="f{{if .Missed}} missed{{end}}" title="{{.Family}}{{if .Missed}}: nothing noticed this fault{{end}}">{{.ID}}</td><td class="f">{{.Target}}</td><td>{{.Goodput}}</td>{{range .Cells}}<td class="{{.Class}}" title="{{.Title}}">{{.Text}}</td>{{end}}</tr>
{{end}}</tbody></table>
</body></html>
`))
