package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/suggest"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
	"github.com/gpuchaos/gpuchaos/internal/run/report"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

func newCoverageCmd() *cobra.Command {
	var (
		f        format
		ruleArgs []string
		only     string
		seed     uint64
		cluster  string
		builtin  bool
		suggest  bool
		optIn    []string
		expArgs  []string
		parallel int
		output   string
		failOn   []string
		showProg bool
		scrape   time.Duration
		evalIv   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "coverage --rules FILE|DIR...",
		Short: "Which faults would your alert rules catch? Every fault × every rule, on the twin",
		Long: `Load Prometheus alert and recording rules (plain rule files or PrometheusRule
resources, several at once, or a directory for the .yaml, .yml, .rules and
.json files in it), analyse each (the metrics it reads, whether an
exporter produces them by default, only as an opt-in counter or not at all,
and so whether it can ever fire), then run every catalogue fault on the
embedded twin and evaluate the rules with the real PromQL engine on the
twin's virtual clock: detected or not, and the time to detect.

For every fault no rule catches, a rule from the bundled recommended pack is
proposed — and shown, by re-running the fault, to fire on it while staying
silent over a fault-free hour.

Bundled packs can be named instead of files: pack:seed, pack:typical,
pack:recommended.

Formats: table (default), json, junit (one test case per fault, failed when
nothing catches it within the deadline: a CI gate for alerting), html (a
self-contained page: heatmap and a timeline per fault).

A rule file may hold at most 4 MiB, and one run evaluates at most 20,000
rules. Rules that can never fire cost nothing per fault. While faults run, a
progress line is kept on standard error when it is a terminal; --progress
prints it as plain lines anywhere (CI logs).

Times to detect depend on how often series are scraped and rules
evaluated: by default the cluster spec's exporter.scrapeInterval (30s,
dcgm-exporter's collection interval) and 15s for groups that set no
interval. Give your Prometheus' scrape_interval and evaluation_interval
(--scrape-interval, --evaluation-interval) to predict what it will show. A
time is that of a fault starting just after a scrape and at an evaluation;
a real fault starts anywhere between them, which moves a real Prometheus'
time by up to one evaluation interval and one scrape interval (plus the
exporter's own sampling) either way.

Exit status: 0 once the report is written, whatever it found; 2 on bad
input. With --fail-on, 1 when the report has findings of a kind named (the
report is written in full first): missed (a fault no detector noticed
within the deadline, the JUnit report's failed cases), never-fires (a rule
the analysis says can never fire), opt-in-off (a rule that needs a metric
switched on in an exporter the fleet runs), noisy (a detector that fired on
the fault-free twin) or unknown (a rule that reads a metric no exporter
gpuchaos knows lists, so the twin cannot judge it: declare the metric with
--opt-in once your fleet has it).`,
		Example: `  gpuchaos coverage --rules examples/rules/gpu-alerts.yaml
  gpuchaos coverage --rules pack:typical --faults hardware,numa
  gpuchaos coverage --rules examples/rules/ --faults hardware --fail-on never-fires,unknown
  gpuchaos coverage --rules examples/rules/gpu-prometheusrule.yaml --format junit --fail-on missed,noisy > coverage.xml
  gpuchaos coverage --rules pack:typical --format html -o coverage.html
  gpuchaos coverage --rules pack:recommended --faults hardware.fallen-off-bus --scrape-interval 1s --evaluation-interval 1s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(ruleArgs) == 0 {
				return fmt.Errorf("--rules: name at least one rule file or pack (pack:typical)")
			}
			gate, err := parseFailOn(failOn)
			if err != nil {
				return err
			}
			if err := checkInterval("--scrape-interval", scrape); err != nil {
				return err
			}
			if err := checkInterval("--evaluation-interval", evalIv); err != nil {
				return err
			}
			if err := checkOptIn(optIn); err != nil {
				return err
			}
			exporters, counters, err := parseExporters(expArgs)
			if err != nil {
				return err
			}
			set, err := loadRules(ruleArgs)
			if err != nil {
				return err
			}
			for _, w := range set.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "gpuchaos coverage: warning: %v\n", w)
			}
			spec := twin.Default()
			if cluster != "" {
				if spec, err = loadCluster(cluster); err != nil {
					return err
				}
			}
			if scrape > 0 {
				spec.Exporter.ScrapeInterval = scrape
			}
			// A counters CSV's fields that the twin can export are switched
			// on there, as on the fleet.
			known := twin.OptInCounters()
			for _, c := range counters {
				if slices.Contains(known, c) && !slices.Contains(optIn, c) {
					optIn = append(optIn, c)
				}
			}
			// The twin switches on the counters it knows; the others (a
			// kube-state-metrics resource, node-exporter's systemd
			// collector) count for the static analysis only.
			var analysisOnly []string
			for _, c := range optIn {
				switch {
				case !slices.Contains(known, c):
					analysisOnly = append(analysisOnly, c)
				case !slices.Contains(spec.Exporter.OptIn, c):
					spec.Exporter.OptIn = append(spec.Exporter.OptIn, c)
				}
			}
			faults, err := pickFaults(only)
			if err != nil {
				return err
			}
			opts := coverage.Options{Spec: spec, Faults: faults, Seed: seed, Parallel: parallel, Rules: set, OptIn: append(slices.Clone(spec.Exporter.OptIn), analysisOnly...),
				Exporters: exporters, Counters: counters, EvalInterval: evalIv}
			if !builtin {
				opts.Detectors = []*probe.Detector{}
			}
			if suggest {
				if opts.Recommended, err = rules.Pack("recommended"); err != nil {
					return err
				}
			}
			prog := newProgress(cmd, "coverage", showProg)
			if prog != nil {
				opts.Progress = prog.report
			}
			res, err := coverage.Run(cmd.Context(), opts)
			prog.end()
			if tm := (*coverage.TooManyRulesError)(nil); errors.As(err, &tm) {
				return fmt.Errorf("--rules: %w", err)
			}
			if err != nil {
				return failed(fmt.Errorf("coverage: %w", err))
			}
			if err := writeCoverage(cmd, res, f, output, "gpuchaos coverage of "+strings.Join(ruleArgs, ", ")); err != nil {
				return failed(err)
			}
			return gate.check(report.CoverageFindings(res))
		},
	}
	addFormatFlag(cmd, &f, "table", "json", "junit", "html")
	cmd.Flags().StringSliceVar(&ruleArgs, "rules", nil, "rule files (plain or PrometheusRule), directories of them, or bundled packs (pack:seed, pack:typical, pack:recommended); repeat or separate with commas")
	cmd.Flags().StringVar(&only, "faults", "", "comma-separated fault ids or families (default: the whole catalogue)")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the twin")
	cmd.Flags().StringVar(&cluster, "cluster", "", "twin cluster spec YAML (default: two 8-GPU H200 nodes)")
	cmd.Flags().BoolVar(&builtin, "builtin", false, "also judge gpuchaos' built-in detectors (kernel-log watcher, workload and node signals)")
	cmd.Flags().BoolVar(&suggest, "suggest", true, "propose and verify recommended rules for the faults nothing catches")
	cmd.Flags().StringSliceVar(&optIn, "opt-in", nil, "opt-in counters your exporters have enabled (e.g. DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, node_systemd_unit_state); the twin exports the dcgm-exporter ones")
	cmd.Flags().StringSliceVar(&expArgs, "exporter", nil, "exporters the fleet runs, NAME or dcgm-exporter=COUNTERS.csv (its counters file, taken as the exact list of what it exports); repeat or separate with commas (default: "+strings.Join(rules.DefaultExporters(), ", ")+"; known: "+strings.Join(exporterNames(), ", ")+")")
	cmd.Flags().IntVar(&parallel, "parallel", 0, "twins run at once (default: one per CPU)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the report to this file instead of standard output")
	cmd.Flags().StringSliceVar(&failOn, "fail-on", nil, "exit 1 when the report has these findings: missed, never-fires, opt-in-off, noisy, unknown; repeat or separate with commas (default: exit 0 whatever it found)")
	cmd.Flags().DurationVar(&scrape, "scrape-interval", 0, "how often the twin's series are sampled, as your Prometheus scrapes them, 1s to 10m (default: the cluster spec's exporter.scrapeInterval, 30s)")
	cmd.Flags().DurationVar(&evalIv, "evaluation-interval", 0, "evaluation interval of rule groups that set no interval: as Prometheus' global evaluation_interval, 1s to 10m (default 15s)")
	cmd.Flags().BoolVar(&showProg, "progress", false, "print progress lines on standard error even when it is not a terminal (default: only on a terminal)")
	return cmd
}

// checkInterval checks a scrape or evaluation interval given by flag: zero
// (not given) or from a second, the twin's finest sampling, to ten
// minutes, the default deadline, past which a detection could not count.
func checkInterval(flag string, d time.Duration) error {
	if d == 0 || d >= time.Second && d <= 10*time.Minute {
		return nil
	}
	return fmt.Errorf("%s: must be between 1s and 10m, got %s", flag, d)
}

// writeCoverage writes the report in format f to the file named output, or
// to standard output when it is empty.
func writeCoverage(cmd *cobra.Command, res *coverage.Result, f format, output, title string) error {
	w := cmd.OutOrStdout()
	var file *os.File
	if output != "" {
		var err error
		if file, err = os.Create(output); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		w = file
	}
	var err error
	switch f {
	case "json":
		err = report.CoverageJSON(w, res)
	case "junit":
		err = report.CoverageJUnit(w, res)
	case "html":
		err = report.CoverageHTML(w, res, title)
	default:
		err = report.CoverageTable(w, res)
	}
	if file != nil {
		// A full disk shows at Close; the report is not written until it
		// succeeds.
		if cerr := file.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// The findings --fail-on takes, in the order a failure lists them.
var failOnKinds = []string{"missed", "never-fires", "opt-in-off", "noisy", "unknown"}

// failGate is the set of findings --fail-on named.
type failGate map[string]bool

func parseFailOn(vals []string) (failGate, error) {
	g := failGate{}
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if !slices.Contains(failOnKinds, v) {
			return nil, fmt.Errorf("--fail-on: %q is not one of %s", v, joinOr(failOnKinds))
		}
		g[v] = true
	}
	return g, nil
}

// check fails the run (exit 1) when the findings hold a kind the gate
// names, with one line saying how many of each and the first few.
func (g failGate) check(f report.Findings) error {
	var parts []string
	add := func(kind string, list []string, noun string) {
		if g[kind] && len(list) > 0 {
			if len(list) > 1 {
				noun += "s"
			}
			parts = append(parts, fmt.Sprintf("%s: %d %s (%s)", kind, len(list), noun, firstFew(list, 3)))
		}
	}
	add("missed", f.Missed, "fault")
	add("never-fires", f.NeverFires, "rule")
	add("opt-in-off", f.OptInOff, "rule")
	add("noisy", f.Noisy, "detector")
	add("unknown", f.Unknown, "rule")
	if len(parts) == 0 {
		return nil
	}
	return failed(fmt.Errorf("--fail-on: %s", strings.Join(parts, "; ")))
}

func firstFew(list []string, n int) string {
	if len(list) <= n {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:n], ", "), len(list)-n)
}

// checkOptIn refuses --opt-in values that are not opt-in metrics, before
// any twin is built: the twin's spec would refuse them later with an error
// chain that names no flag. The twin exports every dcgm-exporter opt-in
// counter the rules analysis tells users to pass, so that advice can be
// followed; another exporter's opt-in metric (kube-state-metrics' opt-in
// series, node-exporter's systemd collector) is accepted for the analysis
// only. A refusal is a default metric or a name gpuchaos does not know,
// with the nearest known one when a typo is likely.
func checkOptIn(vals []string) error {
	known := twin.OptInCounters()
	for _, c := range vals {
		if slices.Contains(known, c) {
			continue
		}
		list := strings.Join(known, ", ")
		if m, ok := rules.LookupMetric(c); ok {
			if m.Availability == rules.AvailDefault {
				return fmt.Errorf("--opt-in: %s is exported by default (%s); --opt-in takes counters the default set leaves off (known: %s)", c, m.Source, list)
			}
			if m.Source != "dcgm-exporter" {
				continue
			}
			return fmt.Errorf("--opt-in: %s is a DCGM field the twin does not export; list it in dcgm-exporter's counters CSV and pass that with --exporter dcgm-exporter=FILE", c)
		}
		if s, d := suggest.Closest(c, known); d <= len(c)/3 {
			return fmt.Errorf("--opt-in: %s is not a dcgm-exporter opt-in counter gpuchaos knows; did you mean %s?", c, s)
		}
		return fmt.Errorf("--opt-in: %s is not a dcgm-exporter opt-in counter gpuchaos knows (known: %s)", c, list)
	}
	return nil
}

// exporterNames lists the exporters --exporter takes.
func exporterNames() []string {
	var out []string
	for _, e := range rules.Exporters() {
		out = append(out, e.Name)
	}
	return out
}

// parseExporters reads --exporter values: the exporters' names (nil when
// none was given: the default set) and, for dcgm-exporter=FILE, the fields
// of that counters CSV (nil without one). Every error names the flag, so a
// wrong value fails before any twin runs.
func parseExporters(vals []string) (names, counters []string, err error) {
	known := exporterNames()
	for _, v := range vals {
		name, file, withFile := strings.Cut(strings.TrimSpace(v), "=")
		if !slices.Contains(known, name) {
			if s, d := suggest.Closest(name, known); d <= len(name)/3 {
				return nil, nil, fmt.Errorf("--exporter: %q is not an exporter gpuchaos knows; did you mean %s? (known: %s)", name, s, strings.Join(known, ", "))
			}
			return nil, nil, fmt.Errorf("--exporter: %q is not an exporter gpuchaos knows (known: %s)", name, strings.Join(known, ", "))
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		if !withFile {
			continue
		}
		if name != "dcgm-exporter" {
			return nil, nil, fmt.Errorf("--exporter: %s=%s: only dcgm-exporter takes a counters file", name, file)
		}
		cs, err := readCounters(file)
		if err != nil {
			return nil, nil, fmt.Errorf("--exporter: %w", err)
		}
		counters = append(counters, cs...)
	}
	if counters == nil && slices.ContainsFunc(vals, func(v string) bool { return strings.Contains(v, "=") }) {
		counters = []string{}
	}
	return names, counters, nil
}

// maxCountersFile bounds a counters CSV; dcgm-exporter's own are under 10 KiB.
const maxCountersFile = 1 << 20

// readCounters reads the fields of a counters CSV in dcgm-exporter's own
// format: one "FIELD, type, help" line per counter, # comments, blank lines.
func readCounters(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) > maxCountersFile {
		return nil, fmt.Errorf("%s: %d bytes, over the %d a counters file may hold", path, len(b), maxCountersFile)
	}
	var out []string
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		field, _, _ := strings.Cut(line, ",")
		field = strings.TrimSpace(field)
		if !countersField.MatchString(field) {
			return nil, fmt.Errorf("%s:%d: %q is not a DCGM field name (DCGM_FI_… or DCGM_EXP_…)", path, i+1, field)
		}
		out = append(out, field)
	}
	return out, nil
}

var countersField = regexp.MustCompile(`^DCGM_(FI|EXP)_[A-Z0-9_]+$`)

// loadRules reads rule files and bundled packs into one set.
func loadRules(args []string) (*rules.Set, error) {
	var files []string
	set := &rules.Set{}
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "pack:"); ok {
			p, err := rules.Pack(name)
			if err != nil {
				return nil, fmt.Errorf("--rules: %w", err)
			}
			set.Rules = append(set.Rules, p.Rules...)
			continue
		}
		files = append(files, a)
	}
	if len(files) > 0 {
		fs, err := rules.LoadFiles(files...)
		if err != nil {
			return nil, err
		}
		set.Rules = append(set.Rules, fs.Rules...)
		set.Warnings = append(set.Warnings, fs.Warnings...)
	}
	return set, nil
}

// progressLine shows how far a coverage run is: on a terminal one line
// rewritten in place and erased at the end; in plain lines when forced, as
// CI logs want them; not at all otherwise. A nil *progressLine is off.
type progressLine struct {
	w       io.Writer
	name    string
	inPlace bool
	start   time.Time
	shown   bool
}

func newProgress(cmd *cobra.Command, name string, force bool) *progressLine {
	w := cmd.ErrOrStderr()
	tty := isTerminal(w)
	if !tty && !force {
		return nil
	}
	return &progressLine{w: w, name: name, inPlace: !force, start: time.Now()}
}

// report is a coverage.Options.Progress; calls never overlap.
func (p *progressLine) report(stage string, done, total int) {
	what := "faults"
	if stage == coverage.StageSuggestions {
		what = "suggestions verified"
	}
	line := fmt.Sprintf("%s: %d/%d %s, %.1f s", p.name, done, total, what, time.Since(p.start).Seconds())
	if p.inPlace {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.shown = true
		return
	}
	fmt.Fprintln(p.w, line)
}

// end erases the in-place line, so the report starts on a clean one.
func (p *progressLine) end() {
	if p != nil && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
