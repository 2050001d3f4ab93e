package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/node/colltrace"
)

func newTraceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Trace what a running workload does (eBPF)",
		Long: `Watch a running workload on this node with eBPF probes, without changing or
restarting it.`,
		Example: `  sudo gpuchaos trace collectives --pid "$(pgrep -d, -f train.py)"`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTraceCollectivesCmd())
	return cmd
}

// traceOutput is what trace collectives prints as JSON.
type traceOutput struct {
	Libs     []string         `json:"libs"`
	Attached []string         `json:"attached"`
	Skipped  []string         `json:"skipped,omitempty"`
	Seconds  float64          `json:"seconds"`
	Report   colltrace.Report `json:"report"`
}

func newTraceCollectivesCmd() *cobra.Command {
	var (
		o        colltrace.Options
		f        format
		duration time.Duration
	)
	cmd := &cobra.Command{
		Use:   "collectives --lib PATH | --pid PID...",
		Short: "Find the NCCL rank that enters collectives late or never (root)",
		Long: `Put uprobes on NCCL's collective entry points (ncclAllReduce, ncclAllGather,
ncclReduceScatter, ncclBroadcast, ncclReduce, ncclBcast) for --duration,
record when each process (one rank each, labelled by its RANK or LOCAL_RANK
environment variable when set) enters each call, and report per rank how
often it entered last and its median lag behind the first rank.

A straggler is a rank that entered last in at least --last-share of the
newest collectives with a median lag of at least --lag. A hung rank is one
whose call count has stayed behind another's for --hang-timeout.

Entry times are host-side: when the rank's thread enqueued the collective,
not when its GPU ran it. With --lib every process mapping that file is
traced; --pid keeps only those processes (and finds their library in
/proc/PID/maps when --lib is not given). Needs root, or CAP_BPF and
CAP_PERFMON, and a kernel with uprobes. An interrupt stops early and prints
what was seen.`,
		Example: `  sudo gpuchaos trace collectives --pid 4242,4243 --duration 30s
  sudo gpuchaos trace collectives --lib /usr/lib/x86_64-linux-gnu/libnccl.so.2 --format json`,
		Args: cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if o.Lib == "" && len(o.PIDs) == 0 {
				return errors.New("trace collectives: give --lib PATH or --pid PID")
			}
			if duration <= 0 {
				return fmt.Errorf("--duration: %v is not positive", duration)
			}
			for _, s := range o.Symbols {
				if !knownSymbol(s) {
					return fmt.Errorf("--symbols: %s is not an NCCL function the tracer knows (%s)", s, strings.Join(symbolNames(), ", "))
				}
			}
			if s := o.Analysis.LastShare; s < 0 || s > 1 {
				return fmt.Errorf("--last-share: %v is not between 0 and 1", s)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			tr, err := colltrace.Start(ctx, o)
			if err != nil {
				return failed(err)
			}
			defer tr.Close()
			start := time.Now()
			wait, cancel := context.WithTimeout(ctx, duration)
			<-wait.Done()
			cancel()
			out := traceOutput{Libs: tr.Libs(), Attached: tr.Attached(), Skipped: tr.Skipped(),
				Seconds: time.Since(start).Seconds(), Report: tr.Report()}
			if err := tr.Close(); err != nil {
				return failed(fmt.Errorf("trace collectives: detach: %w", err))
			}
			if f == "json" {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return printTrace(cmd.OutOrStdout(), out)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Lib, "lib", "", "libnccl.so.2 (or an executable linking NCCL statically) to probe")
	fl.IntSliceVar(&o.PIDs, "pid", nil, "process to trace, one rank each (repeat or comma-separate)")
	fl.StringSliceVar(&o.Symbols, "symbols", nil, "NCCL functions to trace (default the collectives: "+strings.Join(colltrace.DefaultSymbols(), ", ")+")")
	fl.DurationVar(&duration, "duration", 10*time.Second, "how long to trace")
	fl.DurationVar(&o.Analysis.LagThreshold, "lag", 5*time.Millisecond, "median lag above which a rank that is often last is a straggler")
	fl.Float64Var(&o.Analysis.LastShare, "last-share", 0.5, "share of recent collectives a straggler enters last")
	fl.DurationVar(&o.Analysis.HangTimeout, "hang-timeout", 10*time.Second, "how long a rank may stay behind before it is called hung")
	fl.IntVar(&o.Analysis.Window, "window", 64, "how many recent collectives the straggler verdict reads")
	addFormatFlag(cmd, &f)
	return cmd
}

func knownSymbol(name string) bool {
	for _, s := range colltrace.Symbols() {
		if s.Name == name {
			return true
		}
	}
	return false
}

func symbolNames() []string {
	var out []string
	for _, s := range colltrace.Symbols() {
		out = append(out, s.Name)
	}
	return out
}

// printTrace prints the per-rank table, then findings and notes.
func printTrace(w io.Writer, out traceOutput) error {
	r := out.Report
	fmt.Fprintf(w, "traced %s in %s for %.1f s\n", strings.Join(out.Attached, ", "), strings.Join(out.Libs, ", "), out.Seconds)
	if len(out.Skipped) > 0 {
		fmt.Fprintf(w, "not exported, skipped: %s\n", strings.Join(out.Skipped, ", "))
	}
	if len(r.Ranks) == 0 {
		fmt.Fprintln(w, "no traced process called a traced function")
		return nil
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tPID\tCALLS\tLAST\tMEDIAN LAG\tMAX LAG\tBEHIND\tVERDICT")
	for _, rr := range r.Ranks {
		verdict := "ok"
		switch {
		case rr.Hung:
			verdict = "hung"
		case rr.Straggler:
			verdict = "straggler"
		}
		behind := "0"
		if rr.Behind > 0 {
			behind = fmt.Sprintf("%d for %.1f s", rr.Behind, rr.BehindFor.Seconds())
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d/%d\t%s\t%s\t%s\t%s\n", rr.Label, rr.PID, rr.Calls, rr.Last, r.Collectives,
			ms(rr.MedianLag), ms(rr.MaxLag), behind, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "collectives judged: %d, spread median %s, max %s\n", r.Collectives, ms(r.MedianSpread), ms(r.MaxSpread))
	for _, f := range r.Findings {
		fmt.Fprintf(w, "%s: %s\n", f.Kind, f.Detail)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}
