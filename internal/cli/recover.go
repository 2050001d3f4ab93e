package cli

import (
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/run/target/localtarget"
)

func newRecoverCmd() *cobra.Command {
	var (
		f          format
		ledgerPath string
		list       bool
		forget     []string
	)
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "List and recover the injections local runs left on this node",
		Long: `Read the ledger that local runs journal every injection to, and recover
what a run killed before it could recover left behind (SIGKILL, power loss,
an OOM kill), without running anything new. Every 'run --target local' does
this first; this command does it on its own, for a node you want clean.

Each entry ends one of three ways:
  recovered      the fault was undone
  gone           its target no longer exists, and the fault with it; the
                 line says how that was proved (for a network namespace:
                 no process, thread, open file or bind mount holds it)
  still pending  neither could be done; the entry stays in the ledger and
                 the line says why (a process that could not be looked
                 into, a permission, an error)

--list shows the pending entries and touches nothing. --forget KEY drops an
entry from the ledger without recovering it: only for one you have checked
by hand is not in effect any more.

The exit code is 0 when nothing is left pending, 1 when something is, and 2
on a bad flag.`,
		Example: `  sudo gpuchaos recover --list
  sudo gpuchaos recover
  gpuchaos recover --ledger /tmp/gpuchaos/ledger.jsonl --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			if ledgerPath == "" {
				var err error
				if ledgerPath, err = defaultLedger(); err != nil {
					return err
				}
			}
			l, err := ledger.Open(ledgerPath)
			if err != nil {
				return failed(fmt.Errorf("--ledger: %w", err))
			}
			defer l.Close()
			pending, err := l.Pending(ctx)
			if err != nil {
				return failed(fmt.Errorf("--ledger: %w", err))
			}
			if len(forget) > 0 {
				for _, k := range forget {
					if !slices.ContainsFunc(pending, func(e ledger.Entry) bool { return e.Key == k }) {
						return fmt.Errorf("--forget: %q is not pending in ledger %s", k, ledgerPath)
					}
				}
				for _, k := range forget {
					if err := l.Done(ctx, k); err != nil {
						return failed(fmt.Errorf("--forget %s: %w", k, err))
					}
					fmt.Fprintf(out, "Forgot %s: no longer pending, and not recovered.\n", k)
				}
				return nil
			}
			if list {
				if f == "json" {
					return writeJSON(out, nonNil(pending))
				}
				if len(pending) == 0 {
					fmt.Fprintf(out, "Nothing pending in %s.\n", ledgerPath)
					return nil
				}
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "KEY\tWHAT\tRUN\tINJECTED\tEXPIRES")
				for _, e := range pending {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Key, ledger.Describe(e.Fault, e.Ref, e.Params), e.Run,
						e.InjectedAt.Format(time.RFC3339), e.Expires.Format(time.RFC3339))
				}
				return tw.Flush()
			}
			rs, err := ledger.RecoverPending(ctx, localtarget.NodeRecoverer(ledger.StateDir(ledgerPath)), l)
			if err != nil {
				return failed(fmt.Errorf("--ledger: %w", err))
			}
			if f == "json" {
				if err := writeJSON(out, nonNil(rs)); err != nil {
					return err
				}
			} else if len(rs) == 0 {
				fmt.Fprintf(out, "Nothing pending in %s.\n", ledgerPath)
			} else {
				localtarget.PrintRecoveries(out, rs)
			}
			if left := ledger.StillPendingIn(rs); len(left) > 0 {
				return failed(&ledger.PendingError{Ledger: ledgerPath, Entries: left})
			}
			return nil
		},
	}
	addFormatFlag(cmd, &f)
	cmd.Flags().StringVar(&ledgerPath, "ledger", "", "the injection journal (default "+rootLedger+" as root, else $XDG_STATE_HOME/gpuchaos/ledger.jsonl, ~/.local/state without it)")
	cmd.Flags().BoolVar(&list, "list", false, "list what is pending; recover nothing")
	cmd.Flags().StringSliceVar(&forget, "forget", nil, "drop this pending key from the ledger without recovering it (after checking by hand); repeatable")
	return cmd
}

// nonNil turns a nil slice into an empty one, so JSON says [] not null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
