package rules

import (
	"embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync"
)

// Availability values of a Metric and of a MetricUse.
const (
	// AvailDefault: the exporter produces the metric as installed.
	AvailDefault = "default"
	// AvailOptIn: the exporter produces it only once someone enables it.
	AvailOptIn = "opt-in"
	// AvailRecorded: a recording rule of the set produces it.
	AvailRecorded = "recorded"
	// AvailOff: an exporter produces it once configured so (a DCGM field
	// listed in dcgm-exporter's counters CSV, a kube-state-metrics
	// resource switched on), which --opt-in cannot do on the twin.
	AvailOff = "off"
	// AvailUnknown: nothing this package knows produces it.
	AvailUnknown = "unknown"
)

// Metric is one metric an exporter of the fleet produces.
type Metric struct {
	Name string `json:"name"`
	// Source is the exporter: dcgm-exporter, kube-state-metrics,
	// node-exporter, prometheus (its synthetic series) or gpuchaos.
	Source string `json:"source"`
	// Availability is AvailDefault or AvailOptIn.
	Availability string `json:"availability"`
	Unit         string `json:"unit"`
	Help         string `json:"help"`
	// Provenance says where the row was read, relative to the source's
	// repository (the CSV's header names the version).
	Provenance string `json:"provenance"`
}

// elsewhereMetric is a metric of a GPU exporter the fleet does not run.
type elsewhereMetric struct {
	name, exporter, equivalent string
}

// Exporter is one exporter of the registry (exporters/exporters.csv): a
// fleet declares the ones it runs, and the analysis counts a metric present
// only when a declared exporter produces it.
type Exporter struct {
	// Name is what coverage --exporter takes and what Metric.Source says.
	Name       string `json:"name"`
	Repository string `json:"repository"`
	// Declared says whether a fleet runs it when none is named.
	Declared   bool   `json:"declared"`
	Help       string `json:"help"`
	Provenance string `json:"provenance"`
}

//go:embed metrics/*.csv exporters/exporters.csv
var metricFiles embed.FS

// catalogue is the parsed metric data; it is read once and never changed.
type catalogue struct {
	known     []Metric
	byName    map[string]int
	elsewhere []elsewhereMetric
	exporters []Exporter
}

var loadCatalogue = sync.OnceValues(func() (*catalogue, error) { return parseCatalogue(metricFiles) })

// mustCatalogue returns the embedded metric data. The data is compiled in
// and TestMetricData parses it, so a failure here is a build defect.
func mustCatalogue() *catalogue {
	c, err := loadCatalogue()
	if err != nil {
		panic(fmt.Sprintf("rules: embedded metric data: %v", err))
	}
	return c
}

// Known returns every metric the bundled data lists, grouped by source.
// The slice is the caller's to keep.
func Known() []Metric { return slices.Clone(mustCatalogue().known) }

// LookupMetric returns the metric with the given name.
func LookupMetric(name string) (Metric, bool) {
	c := mustCatalogue()
	i, ok := c.byName[name]
	if !ok {
		return Metric{}, false
	}
	return c.known[i], true
}

// Exporters returns the registry of exporters, in the order of
// exporters/exporters.csv. The slice is the caller's to keep.
func Exporters() []Exporter { return slices.Clone(mustCatalogue().exporters) }

// LookupExporter returns the exporter of that name.
func LookupExporter(name string) (Exporter, bool) {
	for _, e := range mustCatalogue().exporters {
		if e.Name == name {
			return e, true
		}
	}
	return Exporter{}, false
}

// DefaultExporters returns the names of the exporters a fleet runs when it
// names none.
func DefaultExporters() []string {
	var out []string
	for _, e := range mustCatalogue().exporters {
		if e.Declared {
			out = append(out, e.Name)
		}
	}
	return out
}

func lookupElsewhere(name string) (elsewhereMetric, bool) {
	for _, m := range mustCatalogue().elsewhere {
		if m.name == name {
			return m, true
		}
	}
	return elsewhereMetric{}, false
}

func parseCatalogue(fsys fs.FS) (*catalogue, error) {
	files, err := fs.Glob(fsys, "metrics/*.csv")
	if err != nil {
		return nil, err
	}
	c := &catalogue{byName: map[string]int{}}
	if err := c.parseExporters(fsys); err != nil {
		return nil, err
	}
	for _, f := range files {
		rows, err := readCSV(fsys, f)
		if err != nil {
			return nil, err
		}
		if f == "metrics/elsewhere.csv" {
			for i, r := range rows {
				if len(r) != 4 {
					return nil, fmt.Errorf("%s: row %d: %d columns, want name,exporter,equivalent,provenance", f, i+1, len(r))
				}
				c.elsewhere = append(c.elsewhere, elsewhereMetric{name: r[0], exporter: r[1], equivalent: r[2]})
			}
			continue
		}
		for i, r := range rows {
			if len(r) != 6 {
				return nil, fmt.Errorf("%s: row %d: %d columns, want name,source,availability,unit,help,provenance", f, i+1, len(r))
			}
			m := Metric{Name: r[0], Source: r[1], Availability: r[2], Unit: r[3], Help: r[4], Provenance: r[5]}
			if m.Availability != AvailDefault && m.Availability != AvailOptIn {
				return nil, fmt.Errorf("%s: %s: availability %q, want default or opt-in", f, m.Name, m.Availability)
			}
			if len(c.exporters) > 0 && !slices.ContainsFunc(c.exporters, func(e Exporter) bool { return e.Name == m.Source }) {
				return nil, fmt.Errorf("%s: %s: source %q is not in exporters/exporters.csv", f, m.Name, m.Source)
			}
			if _, dup := c.byName[m.Name]; dup {
				return nil, fmt.Errorf("%s: %s listed twice", f, m.Name)
			}
			c.byName[m.Name] = len(c.known)
			c.known = append(c.known, m)
		}
	}
	for _, e := range c.elsewhere {
		if i, ok := c.byName[e.name]; ok && c.known[i].Source == "dcgm-exporter" {
			return nil, fmt.Errorf("elsewhere.csv: %s is a dcgm-exporter metric", e.name)
		}
		if _, ok := c.byName[e.equivalent]; e.equivalent != "" && !ok {
			return nil, fmt.Errorf("elsewhere.csv: %s: equivalent %s is not a known metric", e.name, e.equivalent)
		}
	}
	return c, nil
}

func (c *catalogue) parseExporters(fsys fs.FS) error {
	const f = "exporters/exporters.csv"
	rows, err := readCSV(fsys, f)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for i, r := range rows {
		if len(r) != 5 {
			return fmt.Errorf("%s: row %d: %d columns, want name,repository,declared,help,provenance", f, i+1, len(r))
		}
		e := Exporter{Name: r[0], Repository: r[1], Help: r[3], Provenance: r[4]}
		switch r[2] {
		case "yes":
			e.Declared = true
		case "no":
		default:
			return fmt.Errorf("%s: %s: declared is %q, want yes or no", f, e.Name, r[2])
		}
		c.exporters = append(c.exporters, e)
	}
	return nil
}

func readCSV(fsys fs.FS, name string) ([][]string, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comment = '#'
	r.FieldsPerRecord = -1
	var rows [][]string
	for {
		row, err := r.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, row)
	}
}
