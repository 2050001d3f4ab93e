package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/cli/agentcmd"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/twin"
	"github.com/gpuchaos/gpuchaos/internal/twin/live"
	"github.com/gpuchaos/gpuchaos/internal/twin/twingpu"
)

// newAgentCmd is 'agent', the node agent's command (internal/cli/agentcmd,
// which gpuchaos-agent builds too), with --twin: this binary links the
// twin, gpuchaos-agent does not.
func newAgentCmd() *cobra.Command {
	return agentcmd.New(agentcmd.Options{Twin: startAgentTwin})
}

// startAgentTwin is agent --twin: one node of the twin in real time, its
// GPUs read through gpu.Source as NVML's would be.
func startAgentTwin(ctx context.Context, o agentcmd.TwinOptions) (gpu.Source, func(context.Context) error, error) {
	spec := twin.ClusterSpec{
		Name:  "agent-twin",
		Nodes: twin.NodesSpec{Count: 1, GPUsPerNode: o.GPUs, Model: "H200", NUMASockets: 1},
		Jobs:  []twin.JobSpec{{Name: "llm-pretrain", GPUs: "all"}},
	}
	r, err := live.New(ctx, live.Options{Twin: twin.Options{Spec: spec, Seed: o.Seed}, Warmup: 2 * time.Minute, Logger: o.Logger.With("component", "live-twin")})
	if err != nil {
		return nil, nil, fmt.Errorf("start the twin: %w", err)
	}
	s, err := twingpu.New(r.WithTwin, r.Inventory().Nodes[0].Name)
	if err != nil {
		return nil, nil, err
	}
	return s, r.Start, nil
}
