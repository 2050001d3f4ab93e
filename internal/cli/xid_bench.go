package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/node/xidwatch/xidbench"
)

// newXIDBenchCmd is hidden: it writes real XID lines to this machine's
// kernel log, which is a test of the node, not something to run by habit.
func newXIDBenchCmd() *cobra.Command {
	var (
		o   xidbench.Options
		f   format
		pci string
	)
	cmd := &cobra.Command{
		Use:    "bench --pci BUS_ID",
		Hidden: true,
		Short:  "Measure how fast injected XID lines reach the XID watcher or an agent's /metrics (root; writes the kernel log)",
		Long: `Write XID lines for the GPU at --pci to /dev/kmsg and time each from just
before the write to the XID watcher's callback, then write a burst and count
what the watcher saw and what the kernel log lost. Needs root. The lines
are real XID lines (code 13 by default: an application error, which implies
no reset to anything that acts on it), so every watcher on the machine
sees them.

With --metrics URL the lines are looked for on a running gpuchaos agent's
/metrics page instead: each is timed until gpuchaos_xid_events_total for the
code has counted it, the page fetched back to back — the whole path a scrape
sees. Use a code nothing else logs meanwhile.`,
		Example: `  sudo gpuchaos xid bench --pci "$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)"
  sudo gpuchaos xid bench --pci 0000:18:00 --metrics http://127.0.0.1:9400/metrics`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.PCI = pci
			res, err := xidbench.Run(cmd.Context(), o)
			if err != nil {
				return failed(err)
			}
			if f == "json" {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			ms := func(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }
			fmt.Fprintf(tw, "seen by\t%s\n", res.Observer)
			fmt.Fprintf(tw, "level\t%d\n", res.Level)
			fmt.Fprintf(tw, "single injections\t%d, seen %d\n", res.Injections, res.Seen)
			fmt.Fprintf(tw, "latency p50\t%s\n", ms(res.P50))
			fmt.Fprintf(tw, "latency p99\t%s\n", ms(res.P99))
			fmt.Fprintf(tw, "latency max\t%s\n", ms(res.Max))
			fmt.Fprintf(tw, "burst\t%d lines written in %s, seen %d\n", res.Burst, ms(res.BurstWrite), res.BurstSeen)
			fmt.Fprintf(tw, "lost records\t%d\n", res.Lost)
			if res.Polls > 0 {
				fmt.Fprintf(tw, "metrics pages fetched\t%d\n", res.Polls)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if res.Seen != res.Injections || res.BurstSeen != res.Burst || res.Lost != 0 {
				return failed(fmt.Errorf("xid bench: %d of %d single lines and %d of %d burst lines seen, %d lost",
					res.Seen, res.Injections, res.BurstSeen, res.Burst, res.Lost))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&pci, "pci", "", "bus id of the GPU the lines name (any of 0000:18:00, 00000000:18:00.0)")
	cmd.Flags().IntVar(&o.Code, "code", 13, "XID code to write")
	cmd.Flags().IntVar(&o.Level, "level", 3, "syslog level to write at (3 is the driver's KERN_ERR)")
	cmd.Flags().IntVar(&o.Injections, "n", 200, "single injections to time")
	cmd.Flags().DurationVar(&o.Interval, "interval", 10*time.Millisecond, "pause between single injections")
	cmd.Flags().IntVar(&o.Burst, "burst", 1000, "lines in the burst")
	cmd.Flags().DurationVar(&o.BurstOver, "burst-over", time.Second, "time the burst is spread over")
	cmd.Flags().StringVar(&o.Metrics, "metrics", "", "look for the lines on this gpuchaos agent /metrics URL instead of a watcher of its own")
	_ = cmd.MarkFlagRequired("pci")
	addFormatFlag(cmd, &f)
	return cmd
}
