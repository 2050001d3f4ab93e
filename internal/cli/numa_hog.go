package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/cli/command"
	"github.com/gpuchaos/gpuchaos/internal/fault/numafault"
)

// newNUMAHogCmd is the child process the NUMA mechanisms start (memory
// pressure, CPU saturation): hidden, because its flags are the injector's
// private protocol, and a separate process so that a killed gpuchaos
// takes the load with it.
func newNUMAHogCmd() *cobra.Command {
	return &cobra.Command{
		Use:                numafault.HogCommand,
		Short:              "Hold memory or CPUs on a NUMA node for the NUMA faults (internal)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := numafault.RunHog(cmd.Context(), args, cmd.ErrOrStderr()); code != 0 {
				// RunHog said why on stderr already.
				return command.Exit(code, fmt.Errorf("%s exited %d", numafault.HogCommand, code))
			}
			return nil
		},
	}
}
