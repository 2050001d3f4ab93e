package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/agent"
	"github.com/gpuchaos/gpuchaos/internal/gpu"
	"github.com/gpuchaos/gpuchaos/internal/kmsg"
	"github.com/gpuchaos/gpuchaos/internal/twin"
	"github.com/gpuchaos/gpuchaos/internal/twin/live"
	"github.com/gpuchaos/gpuchaos/internal/twin/twingpu"
	"github.com/gpuchaos/gpuchaos/internal/xidwatch"
)

// agentFlags are the flags of 'agent'.
type agentFlags struct {
	listen   string
	interval time.Duration
	numa     time.Duration
	hostname string
	twin     bool
	twinGPUs int
	seed     uint64
	verbose  bool
	noXID    bool
	kmsgPath string
}

func newAgentCmd() *cobra.Command {
	var fl agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Serve this node's GPU telemetry as dcgm-exporter does, plus gpuchaos's own series",
		Long: `Sample this node's GPUs through NVML every --interval and serve the newest
reading at /metrics in the Prometheus text format, under dcgm-exporter's
metric names (DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_POWER_USAGE, ...), labels
(gpu, UUID, pci_bus_id, device, modelName, Hostname) and units, so the
alert rules you wrote for dcgm-exporter read it unchanged. gpuchaos_*
series beside them carry active faults, injections, XID events by code and
burn results.

It listens on port 9400 on every interface, as dcgm-exporter does, so a
Prometheus elsewhere can scrape it; pass --listen 127.0.0.1:9400 to keep it
on the node. It samples every second (dcgm-exporter: every 30 s) so an
injected fault shows within a probe's deadline; scripts/agent-cost.sh
measures what that costs.

It also follows the kernel log (/dev/kmsg; needs root or CAP_SYSLOG) for
the driver's NVRM Xid lines and exports each as DCGM_FI_DEV_XID_ERRORS
(the GPU's newest code, as DCGM reports it) and gpuchaos_xid_events_total
by GPU and code, the GPU found by the line's PCI bus id. Without access to
the kernel log it warns once and serves metrics without XIDs;
--no-xid-watch turns the watch off.

NVLink bandwidth and DCGM's profiling fields (DCGM_FI_PROF_*) need DCGM's
host engine and are not exported. A GPU that stops answering disappears
from the page. --twin serves a simulated node instead of NVML, for a
machine without a GPU. /healthz answers 200 while sampling runs. Stop with
Ctrl-C.`,
		Example: `  gpuchaos agent
  gpuchaos agent --listen 127.0.0.1:9400 --interval 1s
  gpuchaos agent --twin --twin-gpus 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return fl.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&fl.listen, "listen", ":9400", "address to serve on (dcgm-exporter's port, all interfaces like it)")
	f.DurationVar(&fl.interval, "interval", agent.DefaultInterval, "how often to sample the GPUs")
	f.DurationVar(&fl.numa, "numa-interval", agent.DefaultNUMAInterval, "how often to judge the NUMA alignment of every GPU process (gpuchaos_numa_*; 0: off)")
	f.StringVar(&fl.hostname, "hostname", "", "Hostname label (default: this machine's host name)")
	f.BoolVar(&fl.twin, "twin", false, "read a simulated node of the digital twin instead of NVML")
	f.IntVar(&fl.twinGPUs, "twin-gpus", 2, "GPUs of the simulated node (with --twin)")
	f.Uint64Var(&fl.seed, "seed", 1, "seed of the twin (with --twin)")
	f.BoolVarP(&fl.verbose, "verbose", "v", false, "log state changes to stderr (the same as --log-level info)")
	f.BoolVar(&fl.noXID, "no-xid-watch", false, "do not follow the kernel log for XID errors")
	f.StringVar(&fl.kmsgPath, "kmsg", kmsg.DefaultPath, "kernel log device to follow for XID errors")
	return cmd
}

func (fl agentFlags) run(cmd *cobra.Command) error {
	switch {
	case fl.interval < 10*time.Millisecond:
		return fmt.Errorf("--interval: must be at least 10ms, got %s", fl.interval)
	case fl.twin && (fl.twinGPUs < 1 || fl.twinGPUs > 64):
		return fmt.Errorf("--twin-gpus: must be 1..64, got %d", fl.twinGPUs)
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	log := logger(cmd)
	if fl.verbose && !log.Enabled(ctx, slog.LevelInfo) {
		// --verbose predates --log-level: it asks for info.
		log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}

	var (
		src     gpu.Source
		srcName string
		runner  *live.Runner
	)
	if fl.twin {
		spec := twin.ClusterSpec{
			Name:  "agent-twin",
			Nodes: twin.NodesSpec{Count: 1, GPUsPerNode: fl.twinGPUs, Model: "H200", NUMASockets: 1},
			Jobs:  []twin.JobSpec{{Name: "llm-pretrain", GPUs: "all"}},
		}
		r, err := live.New(ctx, live.Options{Twin: twin.Options{Spec: spec, Seed: fl.seed}, Warmup: 2 * time.Minute, Logger: log.With("component", "live-twin")})
		if err != nil {
			return failed(fmt.Errorf("agent: start the twin: %w", err))
		}
		s, err := twingpu.New(r.WithTwin, r.Inventory().Nodes[0].Name)
		if err != nil {
			return failed(fmt.Errorf("agent: %w", err))
		}
		src, srcName, runner = s, "twin", r
	} else {
		s, err := gpu.OpenNVML()
		if err != nil {
			return failed(fmt.Errorf("agent: %w (use --twin on a machine without a GPU)", err))
		}
		src, srcName = s, "nvml"
	}
	defer src.Close()

	a, err := agent.New(ctx, agent.Options{
		Source: src, SourceName: srcName, Interval: fl.interval, NUMAInterval: fl.numa,
		Hostname: fl.hostname, Version: buildVersion(), Logger: log.With("component", "agent"),
	})
	if err != nil {
		return failed(err)
	}
	if !fl.noXID {
		defer watchXIDs(ctx, a, fl.kmsgPath, cmd.ErrOrStderr())()
	}
	ln, err := net.Listen("tcp", fl.listen)
	if err != nil {
		return failed(fmt.Errorf("--listen: %w", err))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "serving %d GPUs (%s) at http://%s/metrics (Ctrl-C to stop)\n", len(a.Devices()), srcName, ln.Addr())
	return failed(serveAgent(ctx, a, runner, ln))
}

// watchXIDs follows the kernel log at path and records every XID in a,
// resolving the line's bus id to one of a's GPUs. When the log cannot be
// read (not root, no such device) it warns once on warn and returns: the
// agent still serves everything else. The returned func stops the watch.
func watchXIDs(ctx context.Context, a *agent.Agent, path string, warn io.Writer) (stop func()) {
	w, err := xidwatch.Start(ctx, xidwatch.Options{
		Kmsg:    kmsg.Options{Path: path},
		Resolve: xidwatch.GPUResolver(a.Devices()),
		OnXID:   func(ev xidwatch.Event) { a.RecordXID(ev.GPU, ev.Code) },
	})
	if err != nil {
		fmt.Fprintf(warn, "gpuchaos agent: warning: not watching for XIDs, serving metrics without them: %v\n", err)
		return func() {}
	}
	return func() {
		if err := w.Stop(); err != nil {
			fmt.Fprintf(warn, "gpuchaos agent: warning: the XID watch stopped early: %v\n", err)
		}
	}
}

// serveAgent runs the agent's sampling loop, the twin behind it (when
// there is one) and the HTTP server until ctx ends or one of them fails,
// then stops all and waits for them.
func serveAgent(ctx context.Context, a *agent.Agent, r *live.Runner, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second}
	loops := []func() error{
		func() error { return a.Start(ctx) },
		func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve metrics: %w", err)
			}
			return nil
		},
	}
	if r != nil {
		loops = append(loops, func() error { return r.Start(ctx) })
	}
	errc := make(chan error, len(loops))
	for _, loop := range loops {
		go func() {
			err := loop()
			cancel()
			errc <- err
		}()
	}
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), live.ShutdownGrace)
	defer scancel()
	shutErr := srv.Shutdown(sctx)
	var errs []error
	for range loops {
		errs = append(errs, <-errc)
	}
	err := errors.Join(errs...)
	if err == nil && shutErr != nil {
		err = fmt.Errorf("stop serving metrics: %w", shutErr)
	}
	return err
}

// buildVersion is the module version the binary was built from, or
// "devel" for a build from a work tree.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
