package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/xid"
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
	return &cobra.Command{
		Use:   "parse [FILE|-]",
		Short: "Print the XID and SXid events in kernel log text as JSON lines",
		Long: `Read kernel log text from FILE, or standard input when FILE is - or
absent, and print one JSON object per XID or NVSwitch SXid line:
kind (xid or sxid), code, pci (domain:bus:device), pid and process (null
when the driver could not attribute the error), message, the recommended
action, and time (the line's stamp as written, when it has one).

Accepted shapes: raw /dev/kmsg records, dmesg with [seconds] or dmesg -T
[ctime] stamps, journalctl and syslog lines, and bare NVRM text. Lines that
are not XIDs print nothing. XID 154 takes its action from its own text
(GPU Reset Required, Node Reboot Required, Drain and Reset).`,
		Example: `  sudo dmesg | gpuchaos xid parse
  sudo journalctl -k -o short --since today | gpuchaos xid parse -
  gpuchaos xid parse /var/log/kern.log | jq 'select(.action == "reset-gpu")'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, name, closeIn, err := openInput(cmd, args)
			if err != nil {
				return err
			}
			defer closeIn()
			enc := json.NewEncoder(cmd.OutOrStdout())
			if err := xid.Parse(r, func(ev xid.Event) error { return enc.Encode(ev) }); err != nil {
				return fmt.Errorf("parse %s: %w", name, err)
			}
			return nil
		},
	}
}

func newXIDCodesCmd() *cobra.Command {
	var f format
	cmd := &cobra.Command{
		Use:   "codes",
		Short: "List the XID codes gpuchaos knows, with their actions",
		Long: `List the XID table: code, name, recommended action and the catalogue
message the driver prints. The table follows NVIDIA's XID catalogue; the
same table drives the lines gpuchaos injects and the actions 'xid parse'
reports. The action "see-text" (XID 154) means the line itself says what
to do.`,
		Example: `  gpuchaos xid codes
  gpuchaos xid codes --format json | jq '.[] | select(.action == "reset-gpu") | .code'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all := xid.All()
			if f == "json" {
				return writeJSON(cmd.OutOrStdout(), all)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "CODE\tACTION\tNAME\tDESCRIPTION")
			for _, in := range all {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", in.Code, in.Action, in.Name, in.Description)
			}
			return tw.Flush()
		},
	}
	addFormatFlag(cmd, &f)
	return cmd
}

// openInput opens the FILE argument of a parse command, standard input for
// "-" or no argument. The name it returns is for error messages.
func openInput(cmd *cobra.Command, args []string) (io.Reader, string, func(), error) {
	if len(args) == 0 || args[0] == "-" {
		return cmd.InOrStdin(), "standard input", func() {}, nil
	}
	f, err := os.Open(args[0])
	if err != nil {
		// *PathError already reads "open FILE: reason".
		return nil, "", nil, err
	}
	return f, args[0], func() { f.Close() }, nil
}
