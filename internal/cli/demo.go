package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/run/coverage"
	"github.com/gpuchaos/gpuchaos/internal/run/report"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

func newDemoCmd() *cobra.Command {
	var (
		f        format
		seed     uint64
		htmlPath string
		cluster  string
		only     string
		parallel int
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole catalogue against the embedded twin and print the coverage matrix",
		Long: `Build a digital twin of two 8-GPU H200 nodes running one data-parallel
training job, run every fault of the catalogue against it as an experiment,
and judge, on whether and how fast each noticed: the built-in detectors (a
kernel-log XID watcher, dcgm-exporter metric checks, workload and Kubernetes
signals) and the bundled alert packs — the seed document's rule and a pack
typical of what GPU teams deploy — evaluated with the real PromQL engine.
Print the coverage matrix, what each fault cost the job in goodput, the
rules that can never fire and why, and for every fault no rule caught a rule
from the recommended pack, proven on a re-run and on a fault-free hour.

Everything runs on the twin's virtual clock: about 50 simulated minutes per
fault, seconds in all. No GPU or cluster is needed. An HTML heatmap of the
matrix is written to --html.`,
		Example: `  gpuchaos demo
  gpuchaos demo --format json | jq '.summary'
  gpuchaos demo --faults hardware,numa.remote-memory --html ""`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec := twin.Default()
			if cluster != "" {
				var err error
				if spec, err = loadCluster(cluster); err != nil {
					return err
				}
			}
			faults, err := pickFaults(only)
			if err != nil {
				return err
			}
			set, err := loadRules([]string{"pack:seed", "pack:typical"})
			if err != nil {
				return err
			}
			recommended, err := rules.Pack("recommended")
			if err != nil {
				return err
			}
			opts := coverage.Options{Spec: spec, Faults: faults, Seed: seed, Parallel: parallel,
				Rules: set, Recommended: recommended}
			prog := newProgress(cmd, "demo", false)
			if prog != nil {
				opts.Progress = prog.report
			}
			start := time.Now()
			res, err := coverage.Run(cmd.Context(), opts)
			prog.end()
			if err != nil {
				return failed(fmt.Errorf("demo: %w", err))
			}
			elapsed := time.Since(start)
			if htmlPath != "" {
				if err := writeHTML(htmlPath, res); err != nil {
					return failed(err)
				}
			}
			out := cmd.OutOrStdout()
			if f == "json" {
				return report.CoverageJSON(out, res)
			}
			fmt.Fprintf(out, "Twin: %s. %d faults × %d detectors, seed %d.\n\n", describe(spec), len(res.Faults), len(res.Detectors), seed)
			if err := report.CoverageTable(out, res); err != nil {
				return err
			}
			fmt.Fprintf(out, "Ran in %.1fs of wall time.", elapsed.Seconds())
			if htmlPath != "" {
				fmt.Fprintf(out, " Heatmap: %s", htmlPath)
			}
			fmt.Fprintln(out)
			return nil
		},
	}
	addFormatFlag(cmd, &f)
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the twin (same seed, same result)")
	cmd.Flags().StringVar(&htmlPath, "html", "gpuchaos-demo.html", `write the HTML heatmap here ("" to skip)`)
	cmd.Flags().StringVar(&cluster, "cluster", "", "twin cluster spec YAML (default: two 8-GPU H200 nodes)")
	cmd.Flags().StringVar(&only, "faults", "", "comma-separated fault ids or families to run (default: all)")
	cmd.Flags().IntVar(&parallel, "parallel", 0, "twins run at once (default: one per CPU)")
	return cmd
}

// pickFaults resolves a comma-separated list of fault ids and family names.
func pickFaults(list string) ([]*catalog.Fault, error) {
	if list == "" {
		return nil, nil
	}
	var out []*catalog.Fault
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		var hit []*catalog.Fault
		if f, ok := catalog.Lookup(name); ok {
			hit = []*catalog.Fault{f}
		} else {
			for _, f := range catalog.All() {
				if string(f.Family) == name {
					hit = append(hit, f)
				}
			}
		}
		if len(hit) == 0 {
			return nil, fmt.Errorf("--faults: %q is neither a fault id nor a family (%s)", name, familyNames())
		}
		for _, f := range hit {
			if !seen[f.ID] {
				seen[f.ID] = true
				out = append(out, f)
			}
		}
	}
	return out, nil
}

func describe(spec twin.ClusterSpec) string {
	inv, err := twin.New(twin.Options{Spec: spec})
	if err != nil {
		return "custom cluster"
	}
	in := inv.Inventory()
	gpus := 0
	model := ""
	for _, n := range in.Nodes {
		gpus += len(n.GPUs)
		if len(n.GPUs) > 0 {
			model = n.GPUs[0].Model
		}
	}
	jobs := make([]string, len(in.Jobs))
	for i, j := range in.Jobs {
		jobs[i] = fmt.Sprintf("%s (%d ranks)", j.Name, len(j.Ranks))
	}
	return fmt.Sprintf("%d nodes, %d × %s, job %s", len(in.Nodes), gpus, model, strings.Join(jobs, ", "))
}

func writeHTML(path string, res *coverage.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write heatmap: %w", err)
	}
	if err := report.CoverageHTML(f, res, "gpuchaos coverage: every fault × every detector"); err != nil {
		f.Close()
		return fmt.Errorf("write heatmap %s: %w", path, err)
	}
	return f.Close()
}

// isTerminal reports whether w is a terminal. A character device is not
// enough: /dev/null is one, and `2>/dev/null` must not get progress lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
