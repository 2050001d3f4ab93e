// Package cli holds the gpuchaos command tree: one file per subcommand with
// its flags beside it. main only calls Main.
package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/cli/command"
)

// Main runs the command line and returns the process exit code by
// command.Main's rule: 0 on success, 1 on a failed run, 2 on bad input,
// 128+signal for a run SIGINT or SIGTERM stopped. Errors print as one line.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return command.Main(newRoot(stdin, stdout, stderr), args)
}

// execute runs the command line under ctx and returns the exit code by
// Main's rule; a ctx whose cause is a *command.SignalError stands for a
// signal.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return command.Execute(ctx, newRoot(stdin, stdout, stderr), args)
}

// failed marks an error as a failed run (exit 1) rather than bad input.
func failed(err error) error { return command.Failed(err) }

// logger returns the command's logger (command.Logger).
func logger(cmd *cobra.Command) *slog.Logger { return command.Logger(cmd) }

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "gpuchaos",
		Short: "Chaos engineering and resilience validation for GPU clusters",
		Long: `gpuchaos injects GPU-specific faults (XID, ECC, thermal, power, NVLink,
burn, VRAM, NCCL, network, eBPF, checkpoints, NUMA, workload), checks that
your monitoring notices them, and tells you how fast.

Start with 'gpuchaos demo': it runs the whole catalogue against an embedded
digital twin of two 8-GPU H200 nodes, no GPU or cluster needed.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	command.WithLogger(root)
	root.AddCommand(
		newDemoCmd(),
		newRunCmd(),
		newRecoverCmd(),
		newCoverageCmd(),
		newFaultsCmd(),
		newXIDCmd(),
		newTopoCmd(),
		newTwinCmd(),
		newAgentCmd(),
		newControllerCmd(),
		newBurnCmd(),
		newExhaustCmd(),
		newNCCLCmd(),
		newTraceCmd(),
		newExecCmd(),
		newNUMAHogCmd(),
		newPaceCmd(),
		newWorkloadCmd(),
	)
	return root
}

// format is the --format flag shared by commands that print data.
type format string

func addFormatFlag(cmd *cobra.Command, f *format, allowed ...string) {
	if len(allowed) == 0 {
		allowed = []string{"table", "json"}
	}
	*f = format(allowed[0])
	cmd.Flags().StringVar((*string)(f), "format", allowed[0], "output format: "+joinOr(allowed))
	cmd.PreRunE = chainPreRun(cmd.PreRunE, func(*cobra.Command, []string) error {
		for _, a := range allowed {
			if string(*f) == a {
				return nil
			}
		}
		return fmt.Errorf("--format: %q is not one of %s", *f, joinOr(allowed))
	})
}

func chainPreRun(prev, next func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	if prev == nil {
		return next
	}
	return func(c *cobra.Command, a []string) error {
		if err := prev(c, a); err != nil {
			return err
		}
		return next(c, a)
	}
}

func joinOr(s []string) string {
	out := ""
	for i, x := range s {
		switch {
		case i == 0:
		case i == len(s)-1:
			out += " or "
		default:
			out += ", "
		}
		out += x
	}
	return out
}

// writeJSON prints v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func sortStrings(s []string) { slices.Sort(s) }
