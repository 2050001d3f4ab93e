package cli

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/twin"
	"github.com/gpuchaos/gpuchaos/internal/twin/live"
)

// twinServeFlags are the flags of 'twin serve'.
type twinServeFlags struct {
	listen  string
	seed    uint64
	cluster string
	speed   float64
	warmup  time.Duration
}

func newTwinServeCmd() *cobra.Command {
	var fl twinServeFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the twin in real time and serve its metrics to Prometheus",
		Long: `Run the digital twin on the wall clock and serve what its exporters
export at /metrics, in the Prometheus text format: dcgm-exporter's GPU
series with their exact names and labels, kube-state-metrics' node series
and the training job's own. Point a Prometheus at it with a scrape interval
of a second or more; the twin samples every second. A GPU that falls off the
bus disappears from the page, as it does from dcgm-exporter's.

The twin first runs --warmup of fault-free virtual time, so rates and
baselines exist from the first scrape. /healthz answers 200 while the twin
runs. Stop with Ctrl-C.`,
		Example: `  gpuchaos twin serve
  gpuchaos twin serve --listen 0.0.0.0:9400 --cluster examples/twin/h200-2x8.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return fl.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&fl.listen, "listen", "127.0.0.1:9400", "address to serve on (dcgm-exporter's port; loopback unless you widen it)")
	f.Uint64Var(&fl.seed, "seed", 1, "seed of the twin; the same seed gives the same cluster")
	f.StringVar(&fl.cluster, "cluster", "", "twin cluster spec YAML (default: two 8-GPU H200 nodes)")
	f.Float64Var(&fl.speed, "speed", 1, "virtual seconds per wall second (at most "+strconv.Itoa(live.MaxSpeed)+")")
	f.DurationVar(&fl.warmup, "warmup", 20*time.Minute, "fault-free virtual time to run before serving (at most "+twin.MaxWarmup.String()+")")
	return cmd
}

func (fl twinServeFlags) run(cmd *cobra.Command) error {
	switch {
	case math.IsNaN(fl.speed) || fl.speed <= 0 || math.IsInf(fl.speed, 0):
		return fmt.Errorf("--speed: must be a positive number, got %v", fl.speed)
	case fl.speed > live.MaxSpeed:
		return fmt.Errorf("--speed: at most %d virtual seconds per wall second, got %v", live.MaxSpeed, fl.speed)
	}
	if err := twin.CheckWarmup("--warmup", fl.warmup); err != nil {
		return err
	}
	opts := live.Options{Twin: twin.Options{Seed: fl.seed}, Speed: fl.speed, Warmup: fl.warmup, Logger: logger(cmd).With("component", "live-twin")}
	if fl.cluster != "" {
		spec, err := loadCluster(fl.cluster)
		if err != nil {
			return err // already names --cluster
		}
		opts.Twin.Spec = spec
	}
	ctx := cmd.Context()
	r, err := live.New(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return failed(err)
	}
	ln, err := net.Listen("tcp", fl.listen)
	if err != nil {
		return failed(fmt.Errorf("--listen: %w", err))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "serving the twin's metrics at http://%s/metrics (Ctrl-C to stop)\n", ln.Addr())
	return failed(r.Serve(ctx, ln))
}
