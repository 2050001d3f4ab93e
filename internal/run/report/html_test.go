package report_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
	"github.com/gpuchaos/gpuchaos/internal/run/report"
)

// node is a parsed HTML element; the standard library's XML decoder in its
// lenient mode reads the page well enough to check its structure.
type node struct {
	name  string
	attrs map[string]string
	kids  []*node
	text  strings.Builder
}

func parseHTML(t *testing.T, page []byte) *node {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(page))
	d.Strict, d.AutoClose, d.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	root := &node{name: "#root"}
	stack := []*node{root}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("page does not parse: %v\n%s", err, page)
		}
		top := stack[len(stack)-1]
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &node{name: strings.ToLower(tok.Name.Local), attrs: map[string]string{}}
			for _, a := range tok.Attr {
				n.attrs[a.Name.Local] = a.Value
			}
			top.kids = append(top.kids, n)
			stack = append(stack, n)
		case xml.EndElement:
			if len(stack) == 1 || stack[len(stack)-1].name != strings.ToLower(tok.Name.Local) {
				t.Fatalf("unbalanced </%s>", tok.Name.Local)
			}
			stack = stack[:len(stack)-1]
		case xml.CharData:
			for _, n := range stack {
				n.text.Write(tok)
			}
		}
	}
	if len(stack) != 1 {
		t.Fatalf("unclosed <%s>", stack[len(stack)-1].name)
	}
	return root
}

// all returns the elements named name under n, in document order.
func (n *node) all(name string) []*node {
	var out []*node
	for _, k := range n.kids {
		if k.name == name {
			out = append(out, k)
		}
		out = append(out, k.all(name)...)
	}
	return out
}

func (n *node) Text() string { return strings.Join(strings.Fields(n.text.String()), " ") }

// walk calls f for n and every element under it.
func (n *node) walk(f func(*node)) {
	f(n)
	for _, k := range n.kids {
		k.walk(f)
	}
}

// cellWant is a heatmap cell: its class and text.
type cellWant struct{ class, text string }

func TestCoverageHTML(t *testing.T) {
	t.Parallel()
	ds := detectors(t, "dcgm-xid-errors", "kmsg-xid")
	hostile := *fault(t, "hardware.xid")
	hostile.ID = `<script>alert("x")</script>&amp;'`
	tests := []struct {
		name      string
		res       *coverage.Result
		title     string
		faults    []string // the first cell of each row, decoded
		detectors []string
		cells     [][]cellWant
		missed    []bool // whether each fault's cell is marked missed
		summary   []string
	}{
		{
			name:      "sample",
			res:       sample(t),
			title:     "Coverage of <default> & \"friends\"",
			faults:    []string{"hardware.xid", "hardware.thermal-throttle", "numa.remote-memory"},
			detectors: []string{"dcgm-xid-errors", "kmsg-xid", "dcgm-gpu-temp-high"},
			cells: [][]cellWant{
				{{"pass", "75s"}, {"fast", "15s"}, {"miss", ""}},
				{{"miss", ""}, {"miss", ""}, {"late", "12.0m"}},
				{{"miss", ""}, {"error", "!"}, {"miss", ""}},
			},
			missed: []bool{false, false, true},
			summary: []string{
				"Detected within the deadline: 1 of 3 faults (1 late, 1 missed).",
				"Goodput 0.980 fault-free, 0.883 on average under a fault.",
				"False positives on the fault-free twin: dcgm-gpu-temp-high",
			},
		},
		{
			name:      "fault id with markup is escaped",
			res:       result(ds, coverage.Baseline{FalsePositives: []string{}}, faultResult(&hostile, gpu3, coverage.JobImpact{Goodput: 0.5}, ds, pass(60), miss)),
			title:     "x",
			faults:    []string{hostile.ID},
			detectors: []string{"dcgm-xid-errors", "kmsg-xid"},
			cells:     [][]cellWant{{{"fast", "60s"}, {"miss", ""}}},
			missed:    []bool{false},
			summary:   []string{"Detected within the deadline: 1 of 1 faults (0 late, 0 missed)."},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			if err := report.CoverageHTML(&buf, tt.res, tt.title); err != nil {
				t.Fatal(err)
			}
			page := buf.Bytes()
			// Self-contained: nothing fetched, nothing run.
			for _, bad := range []string{"http://", "https://", "<script", "url(", "@import", "//cdn"} {
				if bytes.Contains(bytes.ToLower(page), []byte(bad)) {
					t.Errorf("page contains %q", bad)
				}
			}
			root := parseHTML(t, page)
			root.walk(func(n *node) {
				switch n.name {
				case "script", "link", "img", "iframe", "object", "embed":
					t.Errorf("page has a <%s>", n.name)
				}
				for k, v := range n.attrs {
					if strings.HasPrefix(k, "on") || k == "src" || k == "href" {
						t.Errorf("<%s %s=%q>", n.name, k, v)
					}
				}
			})
			if got := root.all("title"); len(got) != 1 || got[0].Text() != tt.title {
				t.Errorf("title %v, want %q", got, tt.title)
			}
			tables := root.all("table")
			if len(tables) != 1 {
				t.Fatalf("%d tables, want 1", len(tables))
			}
			var heads []string
			for _, th := range tables[0].all("th") {
				heads = append(heads, th.Text())
			}
			if want := append([]string{"fault", "target", "goodput"}, tt.detectors...); !slices.Equal(heads, want) {
				t.Errorf("header %q, want %q", heads, want)
			}
			bodies := tables[0].all("tbody")
			if len(bodies) != 1 {
				t.Fatalf("%d tbody, want 1", len(bodies))
			}
			rows := bodies[0].all("tr")
			if len(rows) != len(tt.faults) {
				t.Fatalf("%d rows, want one per fault (%d)", len(rows), len(tt.faults))
			}
			for i, tr := range rows {
				tds := tr.all("td")
				if len(tds) != 3+len(tt.detectors) {
					t.Fatalf("row %d: %d cells, want 3 + one per detector (%d)", i, len(tds), len(tt.detectors))
				}
				if got := tds[0].Text(); got != tt.faults[i] {
					t.Errorf("row %d: fault %q, want %q", i, got, tt.faults[i])
				}
				if got := strings.Contains(tds[0].attrs["class"], "missed"); got != tt.missed[i] {
					t.Errorf("row %d: fault cell class %q, missed mark %v, want %v", i, tds[0].attrs["class"], got, tt.missed[i])
				}
				for j, want := range tt.cells[i] {
					td := tds[3+j]
					if td.attrs["class"] != want.class || td.Text() != want.text {
						t.Errorf("row %d × %s: class %q text %q, want %q %q", i, tt.detectors[j], td.attrs["class"], td.Text(), want.class, want.text)
					}
					if !strings.HasPrefix(td.attrs["title"], tt.faults[i]+" × "+tt.detectors[j]) {
						t.Errorf("row %d × %s: title %q", i, tt.detectors[j], td.attrs["title"])
					}
				}
			}
			text := root.Text()
			for _, want := range tt.summary {
				if !strings.Contains(text, want) {
					t.Errorf("page text lacks %q:\n%s", want, text)
				}
			}
		})
	}
}

// TestCoverageHTMLUnknown: rules over metrics no exporter lists get their
// own list, apart from those that can never fire (observation 5 of
// scripts/coverage-observations).
func TestCoverageHTMLUnknown(t *testing.T) {
	t.Parallel()
	res := sample(t)
	res.Rules = append(res.Rules,
		coverage.RuleReport{Name: "AutopilotUnhealthy", Kind: "alert", Source: "a.yaml:4", Status: "unknown", Reason: "reads autopilot_health_checks"},
		coverage.RuleReport{Name: "SmiHot", Kind: "alert", Source: "a.yaml:8", Status: "never_fires", Reason: "reads nvidia_smi_temperature_gpu"})
	var b bytes.Buffer
	if err := report.CoverageHTML(&b, res, "t"); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	never, unknown := strings.Index(page, "Rules that can never fire"), strings.Index(page, "Rules over metrics no exporter gpuchaos knows lists")
	if never < 0 || unknown < 0 {
		t.Fatalf("page lacks a list (never %d, unknown %d)", never, unknown)
	}
	if a := strings.Index(page, "AutopilotUnhealthy"); a < unknown {
		t.Errorf("the unknown rule is not in the unknown list")
	}
	if s := strings.Index(page, "SmiHot"); s < never || s > unknown {
		t.Errorf("the never-firing rule is not in the never-fires list")
	}
}
