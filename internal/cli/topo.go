package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/model/topo"
)

func newTopoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topo",
		Short: "Read GPU topology (NVLink, PCIe, NUMA)",
		Long: `Work with the GPU topology of a node: how GPUs and NICs connect (NVLink
bonds or the PCIe path between them) and which CPUs and NUMA node each GPU
sits next to.`,
		Example: `  nvidia-smi topo -m | gpuchaos topo parse`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTopoParseCmd())
	return cmd
}

func newTopoParseCmd() *cobra.Command {
	var f format
	cmd := &cobra.Command{
		Use:   "parse [FILE|-]",
		Short: "Parse nvidia-smi topo -m output into JSON",
		Long: `Read the output of 'nvidia-smi topo -m' from FILE, or standard input when
FILE is - or absent, and print it as JSON: gpus (index, cpu_affinity,
numa_node, gpu_numa_id, and numa_nodes where NUMA Affinity is a list, as on
Grace systems, numa_node then being its first node), links ("i-j" with i < j to NV<n>, PIX, PXB, PHB,
NODE or SYS), and, when the box has NICs, nics and nic_links.

ANSI colour escapes, tabs turned into spaces, the legend after the matrix
and CPU and NUMA Affinity left blank (containers, cloud VMs) are all fine. Malformed input fails with the line at fault, and
input over 1 MiB is refused (nvidia-smi topo -m prints a few KiB).`,
		Example: `  nvidia-smi topo -m | gpuchaos topo parse
  gpuchaos topo parse internal/model/topo/testdata/h200x2-real.txt --format table
  nvidia-smi topo -m | gpuchaos topo parse - | jq '.links'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			in, err := openInput(ctx, cmd, args, false)
			if err != nil {
				if ctx.Err() != nil {
					return failed(fmt.Errorf("topo parse: stopped while opening the input: %w", err))
				}
				return err
			}
			defer in.Close()
			m, err := topo.Parse(in)
			if err != nil {
				if ctx.Err() != nil {
					return failed(fmt.Errorf("parse %s: stopped before the input ended: %w", in.name, context.Cause(ctx)))
				}
				return fmt.Errorf("parse %s: %w", in.name, err)
			}
			if f == "json" {
				return writeJSON(cmd.OutOrStdout(), m)
			}
			return printTopo(cmd, m)
		},
	}
	addFormatFlag(cmd, &f, "json", "table")
	return cmd
}

// printTopo prints the GPU part of the matrix as a grid, then the GPU-NIC
// links by GPU.
func printTopo(cmd *cobra.Command, m *topo.Matrix) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	head := []string{""}
	for _, g := range m.GPUs {
		head = append(head, "GPU"+strconv.Itoa(g.Index))
	}
	head = append(head, "CPU AFFINITY", "NUMA")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, g := range m.GPUs {
		row := []string{"GPU" + strconv.Itoa(g.Index)}
		for _, h := range m.GPUs {
			i, j := min(g.Index, h.Index), max(g.Index, h.Index)
			if i == j {
				row = append(row, "X")
				continue
			}
			row = append(row, m.Links[strconv.Itoa(i)+"-"+strconv.Itoa(j)])
		}
		numa := intOrNA(g.NUMANode)
		if g.NUMANodes != nil {
			numa = topo.FormatNodeList(g.NUMANodes)
		}
		row = append(row, orNA(g.CPUAffinity), numa)
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(m.NICs) == 0 {
		return nil
	}
	fmt.Fprintln(cmd.OutOrStdout(), "\nNICs:")
	tw = tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	for _, n := range m.NICs {
		var near []string
		for _, g := range m.GPUs {
			gl := "GPU" + strconv.Itoa(g.Index)
			near = append(near, gl+"="+m.NICLinks[gl+"-"+n.Label])
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", n.Label, orNA(n.Device), strings.Join(near, " "))
	}
	return tw.Flush()
}

func orNA(s string) string {
	if s == "" {
		return "N/A"
	}
	return s
}

func intOrNA(p *int) string {
	if p == nil {
		return "N/A"
	}
	return strconv.Itoa(*p)
}
