package cli

import (
	"cmp"
	// Every target kind registers itself: --target opens one by name.
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
	"github.com/gpuchaos/gpuchaos/internal/run/target/localtarget"
)

func newRunCmd() *cobra.Command {
	var (
		f          format
		targetName string
		dryRun     bool
		seed       uint64
		cluster    string
		warmup     time.Duration
		recordPath string
		listen     string
		promURL    string
		settle     time.Duration
		ledgerPath string
		kubeconfig string
		local      localFlags
		namespace  string
	)
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Run one experiment file and judge its expectations",
		Long: `Load an Experiment (apiVersion gpuchaos.dev/v1alpha1), validate it, resolve its
selector against the target and check the blast radius, then: check the
steady state, inject every fault, watch the probes until each expectation is
met or the fault window closes, recover (always, also on error or Ctrl-C),
and print a verdict per expectation: pass, late, missed or error, with the
time to detect; failed for a workload check measured outside its bound;
interrupted for one still undecided, before its deadline, when the run was
stopped (Ctrl-C, SIGTERM).

Targets: twin (default) runs on the embedded twin's virtual clock, minutes in
milliseconds. live runs the twin in real time, serves its metrics on --listen
for your Prometheus to scrape, and runs the experiment on the wall clock, so
expectations can be probes of that Prometheus (alerts firing, or any query):
the observability loop against a real server. local runs on this node, on
the wall clock: faults go through the node's mechanisms (kernel-log writes
the driver's XID line to /dev/kmsg; needs root) and probes read the real
kernel log (the kmsg-xid detector, log probes), the exporter page at
--exporter (threshold probes, the built-in dcgm-* detectors and workload
checks, scraped every --scrape-interval; start 'gpuchaos agent' for it),
NCCL collectives traced with uprobes (the collective-trace detector, with
--trace-pid or --trace-lib), or ask --prometheus (prometheus probes).
Exhaustion faults run as child processes of gpuchaos (burn, exhaust). local
lists the GPUs with NVML; without it only job, rank and checkpoint faults of
the jobs named with --job (found by their ranks' GPUCHAOS_JOB) can be
selected. Workload checks wait, before injecting, until the pages have been
scraped for their baseline.

k8s hands the experiment to the cluster: the command creates the Experiment
(in a namespace labelled gpuchaos.dev/chaos=enabled), the gpuchaos
controller installed by the Helm chart plans it, creates one NodeFault per
node and injection, the node agents apply them, and the command follows the
Experiment's status and prints its timeline and verdicts. Its probes are
kubernetes checks, prometheus probes, and the built-in detectors and
threshold probes, whose rules the controller evaluates on its --prometheus;
kernel-log probes are refused (the dcgm-xid-errors detector reads the
agents' XID series instead). Ctrl-C aborts the
experiment through the API and waits until the controller has recovered
every fault. With --dry-run it lists the nodes and GPUs of the live cluster
the experiment would touch.

On local, every injection is journalled to --ledger before it acts. A run
that was killed before it could recover (SIGKILL, power loss) leaves its
entries there; the next local run recovers them first, before it lists the
GPUs, and says of each: recovered, gone (with the proof) or still pending
(with why; then nothing new is injected and the run exits 1).
'gpuchaos recover' does the same on its own.

--dry-run prints exactly what would be touched and injects nothing.
The exit code is 0 when every expectation passed, 1 when one did not, and 2
on a bad file or flag.`,
		Example: `  gpuchaos run examples/xid-79-fallen-off-bus.yaml
  gpuchaos run examples/xid-79-fallen-off-bus.yaml --dry-run
  gpuchaos run examples/thermal-throttle.yaml --format json --record run.json
  gpuchaos run examples/live-gpu-missing.yaml --target live --prometheus http://127.0.0.1:9090
  sudo gpuchaos run examples/local/xid-kernel-log.yaml --target local
  gpuchaos run examples/k8s/nvsentinel-xid-79.yaml --target k8s -n gpu-chaos`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			exp, err := loadExperiment(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			notes := out
			if f != "table" {
				// JSON output is one document on stdout; the notes go aside.
				notes = cmd.ErrOrStderr()
			}
			if target.Kind(targetName) == target.K8s && !dryRun {
				return clusterRun{kubeconfig: kubeconfig, namespace: namespace, format: string(f), out: out, notes: notes,
					poll: time.Second, abortWait: 5 * time.Minute}.run(cmd.Context(), exp, args[0])
			}
			cfg := target.Config{
				Seed: seed, Cluster: cluster, Warmup: warmup, Listen: listen, Settle: settle,
				Prometheus: promURL, Ledger: ledgerPath, Exporters: local.exporters, Jobs: local.jobs,
				ScrapeInterval: local.scrapeInterval, TraceLib: local.traceLib, TracePIDs: local.tracePIDs,
				DryRun: dryRun, Notes: notes, Warn: cmd.ErrOrStderr(), Logger: logger(cmd), Kubeconfig: kubeconfig,
				Namespace: cmp.Or(namespace, exp.Namespace),
			}
			if target.Kind(targetName) == target.Local && cfg.Ledger == "" && !dryRun {
				if cfg.Ledger, err = defaultLedger(); err != nil {
					return err
				}
			}
			tgt, err := targets().Open(cmd.Context(), target.Kind(targetName), cfg)
			if err != nil {
				return openError(err)
			}
			defer tgt.Close()
			progress := func(ev engine.Event) {
				if f == "table" {
					fmt.Fprintf(out, "%+8.0fs  %-12s %s %s\n", ev.Offset, ev.Kind, ev.Name, ev.Detail)
				}
			}
			eng := engine.New(engine.Options{Target: tgt, Seed: seed, OnEvent: progress, Logger: logger(cmd).With("component", "engine")})
			plan, err := eng.Plan(cmd.Context(), exp)
			if err != nil {
				return locate(exp, args[0], err)
			}
			if dryRun {
				pods, err := podsReached(tgt, exp, plan)
				if err != nil {
					return locate(exp, args[0], err)
				}
				if f == "json" {
					if pods != nil {
						return writeJSON(out, plannedPods{plan, pods})
					}
					return writeJSON(out, plan)
				}
				if err := printPlan(out, plan); err != nil {
					return err
				}
				return printPods(out, plan, pods)
			}
			if err := tgt.Prepare(cmd.Context()); err != nil {
				return failed(err)
			}
			rec, runErr := eng.Run(cmd.Context(), exp)
			if rec == nil {
				return fmt.Errorf("%s: %w", args[0], runErr)
			}
			// Whatever stopped the run, and whatever fails after it, the
			// error names what it left injected.
			var pendingErr error
			if set := tgt.Settings(); set.Ledger != nil {
				pendingErr = stillPending(cmd.Context(), set.Ledger, set.LedgerPath)
			}
			withPending := func(err error) error {
				if pendingErr != nil {
					err = fmt.Errorf("%w; experiment %s: %w", err, exp.ObjectMeta.Name, pendingErr)
				}
				return failed(err)
			}
			if recordPath != "" {
				if err := writeRecord(recordPath, rec); err != nil {
					return withPending(err)
				}
			}
			if f == "json" {
				if err := writeJSON(out, rec); err != nil {
					return withPending(err)
				}
			} else {
				printVerdicts(out, rec)
			}
			if pendingErr != nil {
				return failed(fmt.Errorf("experiment %s: %w", exp.ObjectMeta.Name, pendingErr))
			}
			if runErr != nil {
				return failed(runErr)
			}
			if !rec.Passed() {
				return failed(fmt.Errorf("experiment %s: not every expectation passed", exp.ObjectMeta.Name))
			}
			return nil
		},
	}
	addFormatFlag(cmd, &f)
	cmd.Flags().StringVar(&targetName, "target", "twin", "where to run: twin (virtual clock), live (real time, metrics served for a real Prometheus), local (this node) or k8s (the cluster's gpuchaos controller runs it)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "k8s: kubeconfig of the cluster (default $KUBECONFIG, ~/.kube/config, then in-cluster)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "k8s: namespace of the Experiment (default the file's, else the kubeconfig context's); it must carry the label "+v1alpha1.LabelChaos+"="+v1alpha1.ChaosEnabled)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9400", "live: where to serve the twin's /metrics")
	cmd.Flags().StringVar(&promURL, "prometheus", "http://127.0.0.1:9090", "live, local: the Prometheus that prometheus probes ask (on k8s the controller's --prometheus, chart value controller.prometheus, answers prometheus, detector and threshold probes)")
	cmd.Flags().StringVar(&ledgerPath, "ledger", "", "local: injection journal (default "+rootLedger+" as root, else $XDG_STATE_HOME/gpuchaos/ledger.jsonl, ~/.local/state without it)")
	cmd.Flags().StringSliceVar(&local.exporters, "exporter", []string{localtarget.DefaultExporter}, "local: /metrics pages threshold probes and built-in detectors read, scraped as Prometheus would (a gpuchaos agent or dcgm-exporter; repeat for a job's ranks and supervisor)")
	cmd.Flags().StringSliceVar(&local.jobs, "job", nil, "local: a training job on this node, found by its ranks' GPUCHAOS_JOB (gpuchaos workload run sets it), for job and rank faults and workload checks; repeatable")
	cmd.Flags().DurationVar(&local.scrapeInterval, "scrape-interval", time.Second, "local: how often the --exporter pages are scraped in the background, the history workload checks take their baseline from")
	cmd.Flags().StringVar(&local.traceLib, "trace-lib", "", "local: trace NCCL collectives in every process using this libnccl.so.2 (collective-trace detector; needs root)")
	cmd.Flags().IntSliceVar(&local.tracePIDs, "trace-pid", nil, "local: trace NCCL collectives of these processes, one per rank (collective-trace detector; needs root)")
	cmd.Flags().DurationVar(&settle, "settle", 15*time.Second, "live: wall time to let Prometheus scrape before the experiment")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be touched; inject nothing")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the twin and of target selection")
	cmd.Flags().StringVar(&cluster, "cluster", "", "twin cluster spec YAML (default: two 8-GPU H200 nodes)")
	cmd.Flags().DurationVar(&warmup, "warmup", 20*time.Minute, "fault-free twin time before the experiment, so baselines exist")
	cmd.Flags().StringVar(&recordPath, "record", "", "also write the run record (JSON evidence) to this file")
	return cmd
}

// rootLedger is where a root run keeps its ledger: with the node's state,
// so that any later run on the node recovers what a killed one left.
const rootLedger = "/var/lib/gpuchaos/ledger.jsonl"

// defaultLedger returns the ledger path of a run without --ledger.
func defaultLedger() (string, error) {
	if os.Geteuid() == 0 {
		return rootLedger, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "gpuchaos", "ledger.jsonl"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("--ledger: no default without a home directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "gpuchaos", "ledger.jsonl"), nil
}

// localFlags are run's flags for the local target.
type localFlags struct {
	traceLib       string
	exporters      []string
	jobs           []string
	tracePIDs      []int
	scrapeInterval time.Duration
}

// stillPending returns a PendingError naming every injection the ledger
// still holds after a run, nil when it holds none.
func stillPending(ctx context.Context, l ledger.Ledger, path string) error {
	left, err := l.Pending(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("--ledger: %w", err)
	}
	if len(left) == 0 {
		return nil
	}
	pe := &ledger.PendingError{Ledger: path}
	for _, e := range left {
		pe.Entries = append(pe.Entries, ledger.Recovery{Entry: e, Status: ledger.StillPending,
			What: ledger.Describe(e.Fault, e.Ref, e.Params), Detail: "its recovery failed (see the timeline)"})
	}
	return pe
}

// loadExperiment reads, defaults and validates an experiment file against the
// catalogue and the built-in detectors.
func loadExperiment(path string) (*v1alpha1.Experiment, error) {
	exp, err := v1alpha1.LoadFile(path)
	if err != nil {
		return nil, err
	}
	exp.Default()
	// The same checks as the controller's admission.
	err = exp.Validate(engine.ValidateOptions())
	if err != nil {
		return nil, locate(exp, path, err)
	}
	return exp, nil
}

// locate puts the file (and the line, where the error names a field) in
// front of an error about an experiment.
func locate(exp *v1alpha1.Experiment, path string, err error) error {
	if located := exp.Locate(err); located != err {
		return located
	}
	return fmt.Errorf("%s: %w", path, err)
}

func printPlan(w interface{ Write([]byte) (int, error) }, plan *engine.Plan) error {
	fmt.Fprintf(w, "Dry run of %s on %s: %d injections on %d nodes, %d GPUs. Nothing was injected.\n",
		plan.Experiment, plan.Target, len(plan.Injections), len(plan.Nodes), plan.GPUs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tMECHANISM\tSAFETY\tTARGET\tPARAMS")
	for _, in := range plan.Injections {
		var ps []string
		for k, v := range in.Params {
			ps = append(ps, k+"="+v)
		}
		sortStrings(ps)
		r := in.Ref
		tgt := r.Node
		switch r.Kind {
		case catalog.ScopeGPU:
			tgt = fmt.Sprintf("%s gpu %d (%s, %s)", r.Node, r.GPU, r.UUID, r.PCI)
		case catalog.ScopeRank:
			tgt = fmt.Sprintf("%s rank %d on %s gpu %d", r.Job, r.Rank, r.Node, r.GPU)
		case catalog.ScopeJob:
			tgt = "job " + r.Job
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", in.Fault, in.Mechanism, in.Safety, tgt, strings.Join(ps, " "))
	}
	return tw.Flush()
}

func printVerdicts(w interface{ Write([]byte) (int, error) }, rec *engine.Record) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EXPECTATION\tVERDICT\tTIME TO DETECT\tDEADLINE\tCLEARED AFTER RECOVERY")
	for _, v := range rec.Verdicts {
		ttd, clr := "-", "-"
		if v.TTDSeconds != nil {
			ttd = fmt.Sprintf("%.0fs", *v.TTDSeconds)
		}
		if v.ClearedSeconds != nil {
			clr = fmt.Sprintf("%.0fs", *v.ClearedSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0fs\t%s\n", v.Name, strings.ToUpper(v.Verdict), ttd, v.Within, clr)
	}
	tw.Flush()
	// A measured expectation's figure is in its detail (steps lost, the
	// step resumed from, a goodput): print it, the table has no room.
	for _, v := range rec.Verdicts {
		if v.Detail != "" && (v.Value != nil || strings.HasPrefix(v.Detail, "not measured")) {
			fmt.Fprintf(w, "  %s: %s\n", v.Name, v.Detail)
		}
	}
	if rec.Aborted != "" {
		fmt.Fprintf(w, "Aborted early: %s\n", rec.Aborted)
	}
	fired := false
	for _, v := range rec.Verdicts {
		fired = fired || v.ClearedSeconds != nil
	}
	if rec.TTRSeconds != nil && fired {
		fmt.Fprintf(w, "Every detector cleared %.0fs after recovery.\n", *rec.TTRSeconds)
	}
}

func writeRecord(path string, rec *engine.Record) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	if err := writeJSON(f, rec); err != nil {
		f.Close()
		return fmt.Errorf("write record %s: %w", path, err)
	}
	return f.Close()
}

// openError classifies an error opening a target: a refused flag or file is
// bad input (exit 2), anything else a failed run (exit 1).
func openError(err error) error {
	if ce := (*target.ConfigError)(nil); errors.As(err, &ce) {
		return err
	}
	return failed(err)
}
