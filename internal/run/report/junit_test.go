package report_test

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/run/report"
)

func TestCoverageJUnit(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := report.CoverageJUnit(&b, sample(t)); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Suites []struct {
			Name     string `xml:"name,attr"`
			Tests    int    `xml:"tests,attr"`
			Failures int    `xml:"failures,attr"`
			Cases    []struct {
				Class   string `xml:"classname,attr"`
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Text    string `xml:",chardata"`
				} `xml:"failure"`
				Out string `xml:"system-out"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("not XML: %v\n%s", err, b.String())
	}
	if len(doc.Suites) != 1 {
		t.Fatalf("%d suites", len(doc.Suites))
	}
	s := doc.Suites[0]
	// xid passes; thermal is only late; numa is missed: two failures.
	if s.Tests != 3 || s.Failures != 2 || len(s.Cases) != 3 {
		t.Fatalf("tests %d failures %d cases %d", s.Tests, s.Failures, len(s.Cases))
	}
	want := []struct {
		name, class string
		fails       bool
		text        string
	}{
		{"hardware.xid", "gpuchaos.hardware", false, ""},
		{"hardware.thermal-throttle", "gpuchaos.hardware", true, "Only late detections: dcgm-gpu-temp-high 12.0m (late)."},
		{"numa.remote-memory", "gpuchaos.numa", true, "3 detectors judged; none fired within the deadline."},
	}
	for i, w := range want {
		c := s.Cases[i]
		if c.Name != w.name || c.Class != w.class || (c.Failure != nil) != w.fails {
			t.Errorf("case %d = %s/%s failure=%v, want %s/%s failure=%v", i, c.Class, c.Name, c.Failure != nil, w.class, w.name, w.fails)
			continue
		}
		if w.fails && !strings.Contains(c.Failure.Text, w.text) {
			t.Errorf("%s failure text %q, want %q", w.name, c.Failure.Text, w.text)
		}
	}
	if !strings.Contains(s.Cases[0].Out, "kmsg-xid 15s, dcgm-xid-errors 75s") {
		t.Errorf("passing case output %q does not list its detectors fastest first", s.Cases[0].Out)
	}
}
