// Package cli holds the gpuchaos command tree: one file per subcommand with
// its flags beside it. main only calls Main.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// Main runs the command line and returns the process exit code: 0 on
// success, 1 on a failed run, 2 on bad input. Errors print as one line.
//
// SIGINT and SIGTERM cancel the command's context: every command stops
// on it (recovering what it injected) and one that then fails exits
// 128+signal (130, 143), as a shell reports a process the signal killed,
// so a script can tell an interrupted run from a failed one. A command
// that ends cleanly on the signal (a server, --follow) exits 0.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			cancel(&signalError{s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return execute(ctx, args, stdin, stdout, stderr)
}

// execute runs the command line under ctx and returns the exit code by
// Main's rule; a ctx whose cause is a *signalError stands for a signal.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var se *signalError
	if errors.As(context.Cause(ctx), &se) && (errors.Is(err, context.Canceled) || errors.As(err, new(*signalError))) {
		msg := strings.ReplaceAll(oneLine(err.Error()), context.Canceled.Error(), se.Error())
		if !strings.Contains(msg, se.Error()) {
			msg += " (" + se.Error() + ")"
		}
		fmt.Fprintf(stderr, "gpuchaos: %s\n", msg)
		return 128 + int(se.sig)
	}
	fmt.Fprintf(stderr, "gpuchaos: %s\n", oneLine(err.Error()))
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 2
}

// signalError is the cause of a context cancelled by a signal.
type signalError struct{ sig syscall.Signal }

func (e *signalError) Error() string { return "stopped by " + unix.SignalName(e.sig) }

// exitError carries an exit code other than 2 (bad input, the default).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// failed marks an error as a failed run (exit 1) rather than bad input.
func failed(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: 1, err: err}
}

func oneLine(s string) string {
	out := []rune{}
	for _, r := range s {
		if r == '\n' || r == '\r' {
			r = ' '
		}
		out = append(out, r)
	}
	return string(out)
}

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
	withLogger(root)
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
