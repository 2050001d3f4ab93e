package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/model/xid"
)

func newXIDCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "xid",
		Short: "Read NVIDIA XID errors from kernel logs, and list the XID table",
		Long: `Work with NVIDIA XID errors: the codes the GPU driver writes to the
kernel log when something goes wrong, each with a recommended action
(restart the application, reset the GPU, reboot the node, investigate).

'xid parse' turns kernel log text into one JSON object per XID or
NVSwitch SXid; 'xid codes' lists the table both gpuchaos' injector and its
parser use.`,
		Example: `  sudo dmesg | gpuchaos xid parse
  gpuchaos xid codes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newXIDParseCmd(), newXIDCodesCmd(), newXIDBenchCmd())
	return cmd
}

func newXIDParseCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "parse [FILE|-]",
		Short: "Print the XID and SXid events in kernel log text as JSON lines",
		Long: `Read kernel log text from FILE, or standard input when FILE is - or
absent, and print one JSON object per XID or NVSwitch SXid line:
kind (xid or sxid), code, pci (domain:bus:device; null when the line's
address was redacted, PCI:0000:xx:00), pid and process (null when the
driver could not attribute the error), message, the recommended
action, and time (the line's stamp as written, when it has one).

Accepted shapes: raw /dev/kmsg records, dmesg with [seconds] or dmesg -T
[ctime] stamps, journalctl and syslog lines, and bare NVRM text. Lines that
are not XIDs print nothing. XID 154 takes its action from its own text
(GPU Reset Required, Node Reboot Required, Drain and Reset).

/dev/kmsg (reading it needs root) is read from its oldest record to its
newest, and the command ends there; with --follow it keeps printing new
records until interrupted. Lines longer than 64 KiB are parsed from their
first 64 KiB only; a line on stderr counts them.

Exit status: 0 when the input ended, or when --follow was stopped by
SIGINT or SIGTERM; 1 when a signal stopped it before the input ended
(the events read until then are printed); 2 on bad input.`,
		Example: `  sudo dmesg | gpuchaos xid parse
  sudo gpuchaos xid parse /dev/kmsg
  sudo gpuchaos xid parse --follow /dev/kmsg | jq -c 'select(.action != "none")'
  sudo journalctl -k -o short --since today | gpuchaos xid parse -
  gpuchaos xid parse /var/log/kern.log | jq 'select(.action == "reset-gpu")'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			in, err := openInput(ctx, cmd, args, follow)
			if err != nil {
				if ctx.Err() != nil {
					return failed(fmt.Errorf("xid parse: stopped while opening the input: %w", err))
				}
				return err
			}
			defer in.Close()
			enc := json.NewEncoder(cmd.OutOrStdout())
			st, err := xid.Parse(in, func(ev xid.Event) error { return enc.Encode(ev) })
			reportXIDParse(cmd.ErrOrStderr(), in, st)
			switch {
			case err == nil:
				return nil
			case ctx.Err() != nil && follow:
				// Following ends only this way.
				return nil
			case ctx.Err() != nil:
				return failed(fmt.Errorf("parse %s: stopped after %s: %w", in.name, plural(st.Lines, "line"), context.Cause(ctx)))
			}
			return fmt.Errorf("parse %s: %w", in.name, err)
		},
	}
	cmd.Flags().BoolVar(&follow, "follow", false, "with /dev/kmsg: after the records in the kernel's buffer, keep reading new ones until interrupted")
	return cmd
}

// reportXIDParse says on stderr, one line each, what xid parse read but
// could not use whole: cut lines, and kernel log records lost to the ring
// buffer's overrun.
func reportXIDParse(w io.Writer, in *input, st xid.Stats) {
	if st.Cut > 0 {
		verb := "were"
		if st.Cut == 1 {
			verb = "was"
		}
		fmt.Fprintf(w, "xid parse: %s over %d bytes %s cut\n", plural(st.Cut, "line"), xid.MaxLine, verb)
	}
	if in.klog != nil {
		if n := in.klog.Overruns(); n > 0 {
			fmt.Fprintf(w, "xid parse: %s: the kernel overwrote records before they were read (%s)\n", in.name, plural(int64(n), "time"))
		}
	}
}

// plural writes "1 line", "3 lines".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}

func newXIDCodesCmd() *cobra.Command {
	var f format
	cmd := &cobra.Command{
		Use:   "codes",
		Short: "List the XID codes gpuchaos knows, with their actions",
		Long: `List the XID table: code, recommended action, NVIDIA's resolution
bucket, name and description. The table is NVIDIA's XID catalogue (codes
1-172, internal/model/xid/catalog.csv names the version), with each resolution
bucket mapped onto an action; the same table drives the lines gpuchaos
injects and the actions 'xid parse' reports. The action "see-text"
(XID 154) means the line itself says what to do; a code not in the table
parses with action "unknown".`,
		Example: `  gpuchaos xid codes
  gpuchaos xid codes --format json | jq '.[] | select(.action == "reset-gpu") | .code'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all := xid.All()
			if f == "json" {
				return writeJSON(cmd.OutOrStdout(), all)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "CODE\tACTION\tNVIDIA\tNAME\tDESCRIPTION")
			for _, in := range all {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", in.Code, in.Action, in.Resolution, in.Name, in.Description)
			}
			return tw.Flush()
		},
	}
	addFormatFlag(cmd, &f)
	return cmd
}
