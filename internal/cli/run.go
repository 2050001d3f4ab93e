package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/colltrace"
	"github.com/gpuchaos/gpuchaos/internal/engine"
	"github.com/gpuchaos/gpuchaos/internal/gpu"
	"github.com/gpuchaos/gpuchaos/internal/ledger"
	"github.com/gpuchaos/gpuchaos/internal/probe"
	"github.com/gpuchaos/gpuchaos/internal/twin"
	"github.com/gpuchaos/gpuchaos/internal/twin/live"
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
		local      localFlags
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
  sudo gpuchaos run examples/local/xid-kernel-log.yaml --target local`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			exp, err := loadExperiment(args[0])
			if err != nil {
				return err
			}
			if targetName != "twin" && targetName != "live" && targetName != "local" {
				return fmt.Errorf("--target: %s is not available in this build; use twin, live or local", targetName)
			}
			if err := twin.CheckWarmup("--warmup", warmup); err != nil {
				return err
			}
			spec := twin.Default()
			if cluster != "" {
				if spec, err = loadCluster(cluster); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			progress := func(ev engine.Event) {
				if f == "table" {
					fmt.Fprintf(out, "%+8.0fs  %-12s %s %s\n", ev.Offset, ev.Kind, ev.Name, ev.Detail)
				}
			}
			opts := engine.Options{Seed: seed, OnEvent: progress}
			var tw *twin.Twin
			// A dry run of twin or live plans on a virtual twin of the same
			// cluster: the inventory is the same and nothing is served. One
			// of local lists this node's GPUs and touches nothing.
			switch {
			case targetName == "local":
				local.ledger, local.prometheus = ledgerPath, promURL
				if local.ledger == "" && !dryRun {
					if local.ledger, err = defaultLedger(); err != nil {
						return err
					}
				}
				stop, lt, l, err := startLocalTarget(cmd, local, dryRun, f == "table")
				if err != nil {
					return err
				}
				defer stop()
				// A kernel log line never leaves the log, so kmsg-xid cannot
				// clear: waiting for detectors to clear would only wait out
				// the window. Time to recover is not measured on local.
				opts.Target, opts.Ledger, opts.PollInterval, opts.RecoveryWindow = lt, l, time.Second, -1
			case targetName == "live" && !dryRun:
				if f == "table" {
					fmt.Fprintf(out, "Warming the twin up for %s of virtual time.\n", warmup)
				}
				stop, lt, err := startLive(cmd, spec, seed, warmup, listen, promURL)
				if err != nil {
					return err
				}
				defer stop()
				opts.Target, opts.PollInterval = lt, time.Second
			default:
				if tw, err = twin.New(twin.Options{Spec: spec, Seed: seed}); err != nil {
					return err
				}
				opts.Target = engine.TwinTarget{Twin: tw}
			}
			eng := engine.New(opts)
			if dryRun {
				plan, err := eng.Plan(cmd.Context(), exp)
				if err != nil {
					return locate(exp, args[0], err)
				}
				if f == "json" {
					return writeJSON(out, plan)
				}
				return printPlan(out, plan)
			}
			if _, err := eng.Plan(cmd.Context(), exp); err != nil {
				return locate(exp, args[0], err)
			}
			if tw != nil {
				if f == "table" {
					fmt.Fprintf(out, "Warming the twin up for %s of virtual time.\n", warmup)
				}
				if err := tw.Sleep(cmd.Context(), warmup); err != nil {
					return failed(err)
				}
			} else if settle > 0 && targetName == "live" {
				if f == "table" {
					fmt.Fprintf(out, "Letting Prometheus scrape the fault-free twin for %s.\n", settle)
				}
				if err := opts.Target.Sleep(cmd.Context(), settle); err != nil {
					return failed(err)
				}
			}
			rec, runErr := eng.Run(cmd.Context(), exp)
			if rec == nil {
				return fmt.Errorf("%s: %w", args[0], runErr)
			}
			// Whatever stopped the run, and whatever fails after it, the
			// error names what it left injected.
			var pendingErr error
			if l, ok := opts.Ledger.(*ledger.File); ok {
				pendingErr = stillPending(cmd.Context(), l, local.ledger)
			}
			withPending := func(err error) error {
				if pendingErr != nil {
					err = fmt.Errorf("%w; experiment %s: %w", err, exp.Metadata.Name, pendingErr)
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
				return failed(fmt.Errorf("experiment %s: %w", exp.Metadata.Name, pendingErr))
			}
			if runErr != nil {
				return failed(runErr)
			}
			if !rec.Passed() {
				return failed(fmt.Errorf("experiment %s: not every expectation passed", exp.Metadata.Name))
			}
			return nil
		},
	}
	addFormatFlag(cmd, &f)
	cmd.Flags().StringVar(&targetName, "target", "twin", "where to run: twin (virtual clock), live (real time, metrics served for a real Prometheus) or local (this node); k8s arrives with the controller")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9400", "live: where to serve the twin's /metrics")
	cmd.Flags().StringVar(&promURL, "prometheus", "http://127.0.0.1:9090", "live, local: the Prometheus that prometheus probes ask")
	cmd.Flags().StringVar(&ledgerPath, "ledger", "", "local: injection journal (default "+rootLedger+" as root, else $XDG_STATE_HOME/gpuchaos/ledger.jsonl, ~/.local/state without it)")
	cmd.Flags().StringSliceVar(&local.exporters, "exporter", []string{engine.DefaultExporter}, "local: /metrics pages threshold probes and built-in detectors read, scraped as Prometheus would (a gpuchaos agent or dcgm-exporter; repeat for a job's ranks and supervisor)")
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
	ledger, prometheus, traceLib string
	exporters, jobs              []string
	tracePIDs                    []int
	scrapeInterval               time.Duration
}

// startLocalTarget recovers what killed runs left in the ledger (fl.ledger,
// which a run that is not dry must have set), then opens
// NVML and starts following the kernel log. Recovery comes first and needs
// neither: a node whose driver is gone must still get its network back. A
// dry run gets no ledger: it must not touch anything. What it recovers is
// printed on stdout for table output, else on stderr. stop closes all.
func startLocalTarget(cmd *cobra.Command, fl localFlags, dryRun, table bool) (stop func(), _ *engine.LocalTarget, _ ledger.Ledger, _ error) {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	if !table {
		// JSON output is one document on stdout; the notes go aside.
		out = cmd.ErrOrStderr()
	}
	var (
		l          *ledger.File
		ledgerPath = fl.ledger
		err        error
	)
	if !dryRun {
		if l, err = recoverLedger(ctx, out, ledgerPath); err != nil {
			return nil, nil, nil, err
		}
	}
	closeLedger := func() {
		if l != nil {
			l.Close()
		}
	}
	src, err := gpu.OpenNVML()
	if err != nil {
		// Network, storage and checkpoint faults act on the node, and a
		// training job on CPUs (gloo) still has ranks to break: only GPU
		// faults need NVML.
		fmt.Fprintf(cmd.ErrOrStderr(), "note: no GPUs listed (%v); GPU faults cannot be selected, node, job, rank and checkpoint faults can\n", err)
		src = noGPUs{}
	}
	opts := engine.LocalOptions{Source: src, Prometheus: fl.prometheus, JobNames: fl.jobs, ScrapeInterval: fl.scrapeInterval}
	if len(fl.exporters) > 0 {
		opts.Exporter, opts.MoreExporters = fl.exporters[0], fl.exporters[1:]
	}
	if !dryRun {
		opts.StateDir = stateDir(ledgerPath)
	}
	if fl.traceLib != "" || len(fl.tracePIDs) > 0 {
		opts.Collectives = &colltrace.Options{Lib: fl.traceLib, PIDs: fl.tracePIDs}
	}
	lt, err := engine.StartLocal(ctx, opts)
	if err != nil {
		src.Close()
		closeLedger()
		return nil, nil, nil, failed(fmt.Errorf("--target local: %w", err))
	}
	stop = func() { lt.Close(); src.Close(); closeLedger() }
	if dryRun {
		return stop, lt, nil, nil
	}
	return stop, lt, l, nil
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
	pe := &engine.PendingError{Ledger: path}
	for _, e := range left {
		pe.Entries = append(pe.Entries, engine.Recovery{Entry: e, Status: engine.StillPending,
			What: engine.Describe(e.Fault, e.Ref, e.Params), Detail: "its recovery failed (see the timeline)"})
	}
	return pe
}

// stateDir is where mechanisms record what they did to the node: with the
// ledger that says it was done, so one directory holds a node's recovery.
func stateDir(ledgerPath string) string { return filepath.Join(filepath.Dir(ledgerPath), "state") }

// recoverLedger opens the ledger at path and recovers every injection it
// still holds, printing one line for each on out. It fails, naming every
// entry left pending, when some cannot be recovered or proved gone: a run
// must not add faults on top of ones it cannot account for.
func recoverLedger(ctx context.Context, out io.Writer, path string) (*ledger.File, error) {
	l, err := ledger.Open(path)
	if err != nil {
		return nil, failed(fmt.Errorf("--ledger: %w", err))
	}
	rs, err := engine.RecoverPending(ctx, engine.NodeRecoverer(stateDir(path)), l)
	if err != nil {
		l.Close()
		return nil, failed(fmt.Errorf("--ledger: %w", err))
	}
	printRecoveries(out, rs)
	if left := engine.StillPendingIn(rs); len(left) > 0 {
		l.Close()
		return nil, failed(fmt.Errorf("nothing new was injected: %w", &engine.PendingError{Ledger: path, Entries: left}))
	}
	return l, nil
}

// printRecoveries says, one line each, what became of a killed run's
// injections.
func printRecoveries(w io.Writer, rs []engine.Recovery) {
	for _, r := range rs {
		left := fmt.Sprintf("left by run %s at %s", r.Entry.Run, r.Entry.InjectedAt.Format(time.RFC3339))
		switch r.Status {
		case engine.Recovered:
			fmt.Fprintf(w, "Recovered %s, %s.\n", r.What, left)
		case engine.Gone:
			fmt.Fprintf(w, "Gone: %s, %s: %s.\n", r.What, left, oneLine(r.Detail))
		default:
			fmt.Fprintf(w, "STILL PENDING: %s, %s: %s.\n", r.What, left, oneLine(r.Detail))
		}
	}
}

// loadExperiment reads, defaults and validates an experiment file against the
// catalogue and the built-in detectors.
func loadExperiment(path string) (*v1alpha1.Experiment, error) {
	exp, err := v1alpha1.LoadFile(path)
	if err != nil {
		return nil, err
	}
	exp.Default()
	err = exp.Validate(v1alpha1.ValidateOptions{
		CheckFault: catalog.CheckSpec,
		KnownDetector: func(name string) bool {
			_, ok := probe.LookupDetector(name)
			return ok || name == colltrace.DetectorName
		},
	})
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

// startLive runs the twin in real time and serves its metrics on listen in
// the background, for --target live. stop ends both and waits for them.
func startLive(cmd *cobra.Command, spec twin.ClusterSpec, seed uint64, warmup time.Duration, listen, promURL string) (stop func(), _ engine.LiveTarget, _ error) {
	ctx, cancel := context.WithCancel(cmd.Context())
	r, err := live.New(ctx, live.Options{Twin: twin.Options{Spec: spec, Seed: seed}, Warmup: warmup})
	if err != nil {
		cancel()
		return nil, engine.LiveTarget{}, failed(err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		cancel()
		return nil, engine.LiveTarget{}, fmt.Errorf("--listen: %w", err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Serving the twin's metrics at http://%s/metrics; probes ask %s.\n", ln.Addr(), promURL)
	done := make(chan error, 1)
	go func() { done <- serveTwin(ctx, r, ln) }()
	return func() { cancel(); <-done }, engine.LiveTarget{Runner: r, Prometheus: promURL}, nil
}

// noGPUs is the GPU source of a node without NVML: it lists none.
type noGPUs struct{}

func (noGPUs) Devices(context.Context) ([]gpu.Device, error) { return nil, nil }
func (noGPUs) Sample(_ context.Context, i int) (gpu.Sample, error) {
	return gpu.Sample{}, fmt.Errorf("gpu %d: %w", i, gpu.ErrNoDevice)
}
func (noGPUs) Close() error { return nil }
