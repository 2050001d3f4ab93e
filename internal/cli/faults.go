package cli

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

func newFaultsCmd() *cobra.Command {
	var f format
	var family string
	cmd := &cobra.Command{
		Use:   "faults [ID]",
		Short: "List the fault catalogue, or show one fault in full",
		Long: `List every fault gpuchaos knows: id, scope, safety class and, for each
target (twin, local, k8s), the mechanisms built for it and how many are
only planned there. With an ID, show that fault's parameters (type, default,
bounds) and each mechanism's targets, built and planned, and the monitoring
layers it reaches. In JSON each mechanism has "targets" (built) and
"planned" (declared, not built yet).`,
		Example: `  gpuchaos faults
  gpuchaos faults --family nccl
  gpuchaos faults hardware.xid
  gpuchaos faults --format json | jq '.[].id'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			list := catalog.All()
			if family != "" {
				var keep []*catalog.Fault
				for _, x := range list {
					if string(x.Family) == family {
						keep = append(keep, x)
					}
				}
				if keep == nil {
					return fmt.Errorf("--family: %q is not a family (%s)", family, familyNames())
				}
				list = keep
			}
			if len(args) == 1 {
				x, ok := catalog.Lookup(args[0])
				if !ok {
					return fmt.Errorf("fault %q is not in the catalogue (see 'gpuchaos faults')", args[0])
				}
				if f == "json" {
					return writeJSON(cmd.OutOrStdout(), x)
				}
				return printFault(cmd, x)
			}
			if f == "json" {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSCOPE\tSAFETY\tTWIN\tLOCAL\tK8S\tSUMMARY")
			for _, x := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.ID, x.Scope, x.Safety,
					onTarget(x, "twin"), onTarget(x, "local"), onTarget(x, "k8s"), x.Summary)
			}
			return tw.Flush()
		},
	}
	addFormatFlag(cmd, &f)
	cmd.Flags().StringVar(&family, "family", "", "only faults of this family ("+familyNames()+")")
	return cmd
}

// onTarget is a fault's cell of the table for one target: the mechanisms
// built for it and how many are only planned there ("kernel-log, 1
// planned"), or "-" for none. 'gpuchaos faults ID' names the planned ones.
func onTarget(x *catalog.Fault, target string) string {
	var built []string
	planned := 0
	for _, m := range x.Mechanisms {
		switch {
		case slices.Contains(m.Targets, target):
			built = append(built, m.Name)
		case slices.Contains(m.Planned, target):
			planned++
		}
	}
	if planned > 0 {
		built = append(built, fmt.Sprintf("%d planned", planned))
	}
	if len(built) == 0 {
		return "-"
	}
	return strings.Join(built, ", ")
}

// where says where a mechanism is built and planned: "on local; planned
// for k8s", "planned for local, k8s (not built)".
func where(m catalog.Mechanism) string {
	switch {
	case len(m.Planned) == 0:
		return "on " + strings.Join(m.Targets, ", ")
	case len(m.Targets) == 0:
		return "planned for " + strings.Join(m.Planned, ", ") + " (not built)"
	}
	return "on " + strings.Join(m.Targets, ", ") + "; planned for " + strings.Join(m.Planned, ", ")
}

func familyNames() string {
	var s []string
	for _, f := range catalog.Families() {
		s = append(s, string(f))
	}
	return strings.Join(s, ", ")
}

func printFault(cmd *cobra.Command, x *catalog.Fault) error {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%s (%s, scope %s, %s)\n  %s\n", x.ID, x.Family, x.Scope, x.Safety, x.Summary)
	if len(x.Params) > 0 {
		fmt.Fprintln(w, "\nParameters:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, p := range x.Params {
			bounds := ""
			switch {
			case len(p.Enum) > 0:
				bounds = strings.Join(p.Enum, "|")
			case p.Min != "" || p.Max != "":
				bounds = "[" + p.Min + ", " + p.Max + "]"
			}
			fmt.Fprintf(tw, "  %s\t%s\tdefault %s\t%s\t%s\n", p.Name, p.Type, p.Default, bounds, p.Help)
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\nMechanisms:")
	for _, m := range x.Mechanisms {
		fmt.Fprintf(w, "  %s [%s] %s: reaches %s", m.Name, m.Safety, where(m), layers(m.Reaches))
		if len(m.Misses) > 0 {
			fmt.Fprintf(w, "; misses %s", layers(m.Misses))
		}
		fmt.Fprintf(w, "\n    %s\n", m.Description)
	}
	s := x.Signature
	fmt.Fprintln(w, "\nSignature:")
	if len(s.Series) > 0 {
		fmt.Fprintf(w, "  series: %s\n", strings.Join(s.Series, ", "))
	}
	for _, l := range s.Logs {
		fmt.Fprintf(w, "  log: %s\n", l)
	}
	if s.Workload != "" {
		fmt.Fprintf(w, "  workload: %s\n", s.Workload)
	}
	if s.Silent {
		fmt.Fprintln(w, "  silent: no GPU metric changes")
	}
	return nil
}

func layers(ls []catalog.Layer) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = string(l)
	}
	return strings.Join(s, ",")
}
