package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/cli/command"
	"github.com/gpuchaos/gpuchaos/internal/fault/procfault"
)

// newPaceCmd is the child process the duty-cycle straggler starts: hidden,
// because its flags are the injector's private protocol, and a separate
// process so that it keeps its rhythm whatever the engine does and ends,
// continuing the rank, when a killed gpuchaos sends it its Pdeathsig.
func newPaceCmd() *cobra.Command {
	return &cobra.Command{
		Use:                procfault.PaceCommand,
		Short:              "Stop and continue a rank in a duty cycle for workload.straggler (internal)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := procfault.RunPace(cmd.Context(), args, cmd.ErrOrStderr()); code != 0 {
				// RunPace said why on stderr already.
				return command.Exit(code, fmt.Errorf("%s exited %d", procfault.PaceCommand, code))
			}
			return nil
		},
	}
}
