package coverage_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
)

// corpusDir holds public rule files kept as their authors published them;
// its README.md gives each file's repository, path, commit and licence.
const corpusDir = "../../detect/rules/testdata/public"

// corpusGolden pins the coverage verdict of every rule of the corpus under
// the default exporters; fleetsGolden under the exporters each file's
// upstream assumes (fleetsFile).
const (
	corpusGolden = "testdata/corpus.golden"
	fleetsGolden = "testdata/corpus-fleets.golden"
	fleetsFile   = corpusDir + "/fleets.csv"
)

// fleet is the exporters a corpus file's upstream assumes.
type fleet struct {
	file      string
	exporters []string
	reason    string
}

// corpusFleets reads fleetsFile and holds it to the corpus and the
// registry: one row per corpus file, known exporters, a reason each.
func corpusFleets(t testing.TB) []fleet {
	t.Helper()
	f, err := os.Open(fleetsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comment = '#'
	r.FieldsPerRecord = 3
	recs, err := r.ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", fleetsFile, err)
	}
	known := map[string]bool{}
	for _, e := range rules.Exporters() {
		known[e.Name] = true
	}
	var out []fleet
	seen := map[string]bool{}
	for _, rec := range recs {
		fl := fleet{file: rec[0], exporters: strings.Fields(rec[1]), reason: rec[2]}
		if seen[fl.file] {
			t.Errorf("%s: %s listed twice", fleetsFile, fl.file)
		}
		seen[fl.file] = true
		if len(fl.exporters) == 0 || len(fl.reason) < 10 {
			t.Errorf("%s: %s needs exporters and a reason", fleetsFile, fl.file)
		}
		for _, e := range fl.exporters {
			if !known[e] {
				t.Errorf("%s: %s: %q is not an exporter of the registry", fleetsFile, fl.file, e)
			}
		}
		out = append(out, fl)
	}
	for _, p := range corpusFiles(t) {
		if !seen[filepath.Base(p)] {
			t.Errorf("%s: no fleet for %s", fleetsFile, filepath.Base(p))
		}
		delete(seen, filepath.Base(p))
	}
	for f := range seen {
		t.Errorf("%s: %s is not in the corpus", fleetsFile, f)
	}
	return out
}

func corpusFiles(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(corpusDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no rule files in %s", corpusDir)
	}
	slices.Sort(paths)
	return paths
}

// promtoolInputs returns the plain rule files promtool should check for
// path. `promtool check rules` reads only plain rule files, so each
// PrometheusRule resource's spec is written to a file of its own: the groups
// the Prometheus Operator hands Prometheus. A plain file is checked as it
// is.
func promtoolInputs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []string
	for i := 0; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// Not YAML: promtool refuses it as it stands.
			return []string{path}
		}
		if doc["kind"] != "PrometheusRule" {
			if _, ok := doc["groups"]; ok || doc["kind"] == nil {
				return []string{path}
			}
			continue
		}
		spec, err := yaml.Marshal(doc["spec"])
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), fmt.Sprintf("%s.spec%d.yaml", filepath.Base(path), i))
		if err := os.WriteFile(p, spec, 0o600); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// ruleErrors flattens the joined errors of rules.LoadFiles into the
// *rules.Error values it holds, and the others.
func ruleErrors(err error) (found []*rules.Error, other []error) {
	var walk func(error)
	walk = func(err error) {
		if re, ok := err.(*rules.Error); ok {
			found = append(found, re)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		other = append(other, err)
	}
	walk(err)
	return found, other
}

// knownRefusals lists corpus files promtool accepts that the loader still
// refuses, each with a note of what the loader lacks. They are logged, not
// failed, until the loader is fixed; a file listed here that loads fails
// the test, so the list shrinks with the fixes.
var knownRefusals = map[string]string{}

// TestCorpusLoadsAsPromtool holds the loader to `promtool check rules` on
// every public rule file: a file promtool accepts loads; a file promtool
// rejects is refused, each problem naming its file, group, rule and line.
func TestCorpusLoadsAsPromtool(t *testing.T) {
	t.Parallel()
	promtool := testutil.Promtool(t)
	for _, path := range corpusFiles(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			set, loadErr := rules.LoadFiles(path)
			if loadErr == nil && len(set.Rules) == 0 {
				t.Errorf("loaded no rules and no error")
			}
			accepted, why := true, ""
			for _, in := range promtoolInputs(t, path) {
				out, err := exec.Command(promtool, "check", "rules", in).CombinedOutput()
				if err != nil {
					accepted, why = false, strings.TrimSpace(string(out))
				}
			}
			note, known := knownRefusals[name]
			switch {
			case accepted && loadErr != nil && known:
				t.Logf("known mismatch (%s): promtool accepts, the loader refuses: %v", note, loadErr)
			case accepted && loadErr != nil:
				t.Errorf("promtool accepts it, the loader refuses it: %v", loadErr)
			case accepted && known:
				t.Errorf("loads now: take it out of knownRefusals (%s)", note)
			case !accepted && loadErr == nil:
				t.Errorf("promtool rejects it, the loader loads %d rules:\n%s", len(set.Rules), why)
			case !accepted:
				found, other := ruleErrors(loadErr)
				for _, e := range other {
					t.Errorf("problem without file, group, rule and line: %v", e)
				}
				for _, e := range found {
					if e.Source != path || e.Line <= 0 || (e.RuleIndex >= 0 && e.Group == "") {
						t.Errorf("problem does not name file, group, rule and line: %v", e)
					}
				}
			}
		})
	}
}

// TestCorpusCoverage runs the whole catalogue against every rule of the
// corpus on the twin and pins each rule's verdict and the faults it
// detects in testdata/corpus.golden (refresh with -update; VERDICTS.md
// beside the corpus says by hand whether each verdict is right, and
// TestCorpusVerdictsMatchGoldens holds its counts to the goldens).
func TestCorpusCoverage(t *testing.T) {
	set, err := rules.LoadFiles(corpusFiles(t)...)
	if err != nil {
		t.Fatalf("load the corpus: %v", err)
	}
	start := time.Now()
	res, err := coverage.Run(context.Background(), coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rules, %d faults in %v", len(res.Rules), len(res.Faults), time.Since(start).Round(time.Millisecond))
	compareGolden(t, corpusGolden, corpusReport(res))

	// Each file again under the exporters its upstream assumes: files of
	// one fleet run together, so a recording rule and the alerts that read
	// it stay in one run.
	start = time.Now()
	groups := map[string][]string{}
	var order []string
	for _, fl := range corpusFleets(t) {
		key := strings.Join(fl.exporters, " ")
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], filepath.Join(corpusDir, fl.file))
	}
	slices.Sort(order)
	var fleets bytes.Buffer
	for _, key := range order {
		set, err := rules.LoadFiles(groups[key]...)
		if err != nil {
			t.Fatalf("load %v: %v", groups[key], err)
		}
		res, err := coverage.Run(context.Background(), coverage.Options{Seed: 1, Detectors: []*probe.Detector{}, Rules: set,
			Exporters: strings.Fields(key)})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&fleets, "## exporters: %s\n", key)
		fleets.Write(corpusReport(res))
	}
	t.Logf("%d fleets in %v", len(order), time.Since(start).Round(time.Millisecond))
	compareGolden(t, fleetsGolden, fleets.Bytes())
}

// verdictsFile is the hand check of the corpus' verdicts: each rule's
// status read against its reason, so a golden refreshed with -update
// cannot move a verdict that nobody read.
const verdictsFile = corpusDir + "/VERDICTS.md"

// TestCorpusVerdictsMatchGoldens holds VERDICTS.md to the goldens: its two
// counts lines ("default exporters: …", "own fleets: …") must equal the
// goldens' counts lines (the fleets' summed), and its table by file must
// give each corpus file's rule count and statuses in both runs. A golden
// refreshed with -update that moves a verdict fails here until the hand
// check is read again.
func TestCorpusVerdictsMatchGoldens(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(verdictsFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	runs := []struct{ name, golden string }{
		{"default exporters", corpusGolden},
		{"own fleets", fleetsGolden},
	}
	perFile := map[string][2]map[string]int{}
	for i, run := range runs {
		data, err := os.ReadFile(run.golden)
		if err != nil {
			t.Fatal(err)
		}
		total := map[string]int{}
		for _, l := range strings.Split(string(data), "\n") {
			if counts, ok := strings.CutPrefix(l, "# counts by status: "); ok {
				for _, kv := range strings.Fields(counts) {
					k, v, _ := strings.Cut(kv, "=")
					n, err := strconv.Atoi(v)
					if err != nil {
						t.Fatalf("%s: bad count %q", run.golden, kv)
					}
					total[k] += n
				}
				continue
			}
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			f := strings.Split(l, " | ")
			if len(f) != 6 {
				t.Fatalf("%s: bad line %q", run.golden, l)
			}
			file := f[0][:strings.LastIndex(f[0], ":")]
			c := perFile[file]
			if c[i] == nil {
				c[i] = map[string]int{}
			}
			c[i][f[4]]++
			perFile[file] = c
		}
		want := run.name + ": " + renderCounts(total)
		if !slices.Contains(lines, want) {
			t.Errorf("%s lacks the line %q (the counts of %s)", verdictsFile, want, run.golden)
		}
	}
	rows := map[string]string{}
	for _, l := range lines {
		f := strings.Split(l, " | ")
		if len(f) == 4 && strings.HasPrefix(f[0], "| ") && strings.HasSuffix(f[0], ".yaml") && strings.HasSuffix(f[3], " |") {
			rows[strings.TrimPrefix(f[0], "| ")] = l
		}
	}
	for _, p := range corpusFiles(t) {
		file := filepath.Base(p)
		c := perFile[file]
		n := 0
		for _, v := range c[0] {
			n += v
		}
		want := fmt.Sprintf("| %s | %d | %s | %s |", file, n, renderCounts(c[0]), renderCounts(c[1]))
		if got, ok := rows[file]; !ok {
			t.Errorf("%s: no row for %s in the table by file; want %q", verdictsFile, file, want)
		} else if got != want {
			t.Errorf("%s: row for %s\n got %q\nwant %q", verdictsFile, file, got, want)
		}
		delete(rows, file)
	}
	for file := range rows {
		t.Errorf("%s: %s is not in the corpus", verdictsFile, file)
	}
}

// renderCounts writes counts as the goldens' counts lines do: status=n,
// sorted by status, separated by spaces.
func renderCounts(counts map[string]int) string {
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", s, counts[s]))
	}
	return strings.Join(parts, " ")
}

// compareGolden compares got with the golden file at path, or writes it
// under -update.
func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: corpus verdicts moved; if that is right, run TestCorpusCoverage -update and say why in the commit\n%s", path, lineDiff(string(want), string(got)))
	}
}

// corpusReport renders one line per rule, then the count of each status.
func corpusReport(res *coverage.Result) []byte {
	var b bytes.Buffer
	b.WriteString("# file:line | group | rule | kind | status | faults detected (- none); written by TestCorpusCoverage -update\n")
	counts := map[string]int{}
	for _, r := range res.Rules {
		counts[r.Status]++
		detects := "-"
		if len(r.Detects) > 0 {
			detects = strings.Join(r.Detects, ",")
		}
		fmt.Fprintf(&b, "%s | %s | %s | %s | %s | %s\n", strings.TrimPrefix(r.Source, corpusDir+"/"), r.Group, r.Name, r.Kind, r.Status, detects)
	}
	fmt.Fprintf(&b, "# counts by status: %s\n", renderCounts(counts))
	return b.Bytes()
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
