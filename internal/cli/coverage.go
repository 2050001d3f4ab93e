package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/coverage"
	"github.com/gpuchaos/gpuchaos/internal/probe"
	"github.com/gpuchaos/gpuchaos/internal/report"
	"github.com/gpuchaos/gpuchaos/internal/rules"
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
		parallel int
		output   string
	)
	cmd := &cobra.Command{
		Use:   "coverage --rules FILE...",
		Short: "Which faults would your alert rules catch? Every fault × every rule, on the twin",
		Long: `Load Prometheus alert and recording rules (plain rule files or PrometheusRule
resources, several at once), analyse each (the metrics it reads, whether an
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
self-contained page: heatmap and a timeline per fault).`,
		Example: `  gpuchaos coverage --rules alerts/gpu.yaml
  gpuchaos coverage --rules pack:typical --faults hardware,numa
  gpuchaos coverage --rules prometheusrule.yaml --format junit > coverage.xml
  gpuchaos coverage --rules pack:typical --format html -o coverage.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(ruleArgs) == 0 {
				return fmt.Errorf("--rules: name at least one rule file or pack (pack:typical)")
			}
			set, err := loadRules(ruleArgs)
			if err != nil {
				return err
			}
			spec := twin.Default()
			if cluster != "" {
				if spec, err = twin.LoadClusterSpec(cluster); err != nil {
					return err
				}
			}
			spec.Exporter.OptIn = append(spec.Exporter.OptIn, optIn...)
			faults, err := pickFaults(only)
			if err != nil {
				return err
			}
			opts := coverage.Options{Spec: spec, Faults: faults, Seed: seed, Parallel: parallel, Rules: set, OptIn: spec.Exporter.OptIn}
			if !builtin {
				opts.Detectors = []*probe.Detector{}
			}
			if suggest {
				if opts.Recommended, err = rules.Pack("recommended"); err != nil {
					return err
				}
			}
			opts.Progress = progress(cmd)
			res, err := coverage.Run(cmd.Context(), opts)
			if err != nil {
				return failed(fmt.Errorf("coverage: %w", err))
			}
			w := cmd.OutOrStdout()
			if output != "" {
				file, err := os.Create(output)
				if err != nil {
					return failed(err)
				}
				defer file.Close()
				w = file
			}
			switch f {
			case "json":
				err = writeJSON(w, report.NewCoverageDoc(res))
			case "junit":
				err = report.CoverageJUnit(w, res)
			case "html":
				err = report.CoverageHTML(w, res, "gpuchaos coverage of "+strings.Join(ruleArgs, ", "))
			default:
				err = report.CoverageTable(w, res)
			}
			if err != nil {
				return failed(err)
			}
			return nil
		},
	}
	addFormatFlag(cmd, &f, "table", "json", "junit", "html")
	cmd.Flags().StringSliceVar(&ruleArgs, "rules", nil, "rule files (plain or PrometheusRule) or bundled packs (pack:seed, pack:typical, pack:recommended); repeat or separate with commas")
	cmd.Flags().StringVar(&only, "faults", "", "comma-separated fault ids or families (default: the whole catalogue)")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the twin")
	cmd.Flags().StringVar(&cluster, "cluster", "", "twin cluster spec YAML (default: two 8-GPU H200 nodes)")
	cmd.Flags().BoolVar(&builtin, "builtin", false, "also judge gpuchaos' built-in detectors (kernel-log watcher, workload and node signals)")
	cmd.Flags().BoolVar(&suggest, "suggest", true, "propose and verify recommended rules for the faults nothing catches")
	cmd.Flags().StringSliceVar(&optIn, "opt-in", nil, "dcgm-exporter opt-in counters your exporter has enabled (e.g. DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)")
	cmd.Flags().IntVar(&parallel, "parallel", 0, "twins run at once (default: one per CPU)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the report to this file instead of standard output")
	return cmd
}

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
	}
	return set, nil
}

// progress reports each finished fault on a terminal's stderr.
func progress(cmd *cobra.Command) func(done, total int, id string) {
	stderr := cmd.ErrOrStderr()
	if !isTerminal(stderr) {
		return nil
	}
	return func(done, total int, id string) {
		fmt.Fprintf(stderr, "\r\033[K[%d/%d] %s", done, total, id)
		if done == total {
			fmt.Fprint(stderr, "\r\033[K")
		}
	}
}
