package report

import (
	"encoding/xml"
	"fmt"
	"io"

	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
)

// JUnit XML, as CI systems read it: one test case per fault, failed when no
// detector noticed the fault within its deadline (a late detection is
// reported in the failure message, but still fails the gate).
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Class      string          `xml:"classname,attr"`
	Name       string          `xml:"name,attr"`
	Properties []junitProperty `xml:"properties>property,omitempty"`
	Failure    *junitFailure   `xml:"failure,omitempty"`
	SystemOut  string          `xml:"system-out,omitempty"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// CoverageJUnit writes the result as JUnit XML.
func CoverageJUnit(w io.Writer, res *coverage.Result) error {
	suite := junitSuite{Name: "gpuchaos coverage"}
	for _, fr := range res.Faults {
		c := junitCase{Class: "gpuchaos." + string(fr.Fault.Family), Name: fr.ID}
		c.Properties = append(c.Properties,
			junitProperty{"target", targetName(fr)},
			junitProperty{"goodput", fmt.Sprintf("%.3f", fr.Job.Goodput)})
		if fr.First != nil {
			c.Properties = append(c.Properties, junitProperty{"fastest_ttd_seconds", fmt.Sprintf("%.0f", *fr.First)})
		}
		if by := detectedBy(fr); by != "" {
			c.SystemOut = "detected by " + by
		}
		if !passed(fr) {
			suite.Failures++
			msg := fmt.Sprintf("no detector noticed %s on %s", fr.ID, targetName(fr))
			text := fmt.Sprintf("%d detectors judged; none fired within the deadline.", len(res.Detectors))
			if len(fr.By) > 0 {
				msg += " within the deadline"
				text = "Only late detections: " + detectedBy(fr) + "."
			}
			c.Failure = &junitFailure{Message: msg, Text: text}
		}
		suite.Tests++
		suite.Cases = append(suite.Cases, c)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{suite}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
