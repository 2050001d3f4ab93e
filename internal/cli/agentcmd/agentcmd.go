// Package agentcmd is the node agent's command, which both binaries
// build: `gpuchaos agent`, whose binary links the twin and passes it in
// for --twin, and gpuchaos-agent, the chart DaemonSet's command, a binary
// of its own that links the exporter, the XID watch, the node's injectors
// and a Kubernetes client but not the engine, PromQL or the twin.
//
// The node agent's resident memory is mostly the binary's own pages, so
// it follows the code the binary links, not the work it does
// (scripts/agent-cost -m measures both binaries). cmd/gpuchaos-agent's
// test holds what that binary may link.
package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/cli/command"
	"github.com/gpuchaos/gpuchaos/internal/fault/nodeall"
	"github.com/gpuchaos/gpuchaos/internal/kube/nodeagent"
	"github.com/gpuchaos/gpuchaos/internal/node/exporter"
	"github.com/gpuchaos/gpuchaos/internal/node/exposition"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu/nvmlgpu"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
	"github.com/gpuchaos/gpuchaos/internal/node/xidwatch"
)

// DefaultLedger is where the agent journals the NodeFaults it applies: on
// the host (the DaemonSet mounts /var/lib/gpuchaos), so a restarted agent
// pod finds what its predecessor left.
const DefaultLedger = "/var/lib/gpuchaos/agent/ledger.jsonl"

// Options shape the command for the binary that builds it.
type Options struct {
	// Twin, when set, adds --twin, --twin-gpus and --seed, which read a
	// simulated node instead of NVML. Only a binary that links the twin
	// can set it.
	Twin StartTwin
	// OpenGPUs opens this node's GPUs; nil means nvmlgpu.Open. It fails
	// with an error wrapping gpu.ErrUnavailable on a node without them.
	OpenGPUs func() (gpu.Source, error)
}

// StartTwin starts the simulated node of --twin. It returns the node's
// GPUs and the twin's loop, which the agent runs beside its own until ctx
// ends; the source is closed when the agent stops.
type StartTwin func(ctx context.Context, o TwinOptions) (gpu.Source, func(context.Context) error, error)

// TwinOptions are the flags of --twin.
type TwinOptions struct {
	// GPUs is the simulated node's GPU count, 1..64 (--twin-gpus).
	GPUs int
	// Seed seeds the twin (--seed).
	Seed uint64
	// Logger is the agent's logger.
	Logger *slog.Logger
}

// flags are the command's flags.
type flags struct {
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
	// NodeFault mode (with --node-name).
	nodeName   string
	kubeconfig string
	ledger     string
	resync     time.Duration
	cgroupRoot string
	// gpuchaos is the binary the child-process faults run from; set by
	// gpuchaos-agent alone (empty: this process's own binary).
	gpuchaos string
}

// New returns `gpuchaos agent`: the command under gpuchaos's root, with
// --twin when o.Twin is set.
func New(o Options) *cobra.Command {
	var fl flags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Serve this node's GPU telemetry as dcgm-exporter does, plus gpuchaos's own series",
		Long:  long + longEnd(o.Twin != nil),
		Example: `  gpuchaos agent
  gpuchaos agent --listen 127.0.0.1:9400 --interval 1s
  gpuchaos agent --twin --twin-gpus 2
  gpuchaos agent --node-name gpu-node-0 --kubeconfig ~/.kube/config`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return fl.run(cmd, o, "") },
	}
	if o.Twin == nil {
		cmd.Example = `  gpuchaos agent
  gpuchaos agent --listen 127.0.0.1:9400 --interval 1s
  gpuchaos agent --node-name gpu-node-0 --kubeconfig ~/.kube/config`
	}
	fl.add(cmd, o)
	return cmd
}

// Main runs the command line of gpuchaos-agent and returns the process
// exit code by command.Main's rule.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return command.Main(newRoot(Options{}, stdin, stdout, stderr), args)
}

// newRoot returns gpuchaos-agent's root command: the agent command itself,
// with the log flags and --gpuchaos-binary.
func newRoot(o Options, stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var fl flags
	root := &cobra.Command{
		Use:   "gpuchaos-agent",
		Short: "The gpuchaos node agent: GPU telemetry as dcgm-exporter serves it, and this node's NodeFaults",
		Long: `gpuchaos-agent is gpuchaos's node agent on its own, the command the Helm
chart's DaemonSet runs: 'gpuchaos agent' without --twin, in a binary that
links only what a node needs (the exporter, the XID watch, the node's
injectors and a Kubernetes client), so that it stays small on every GPU
node. It takes the flags of 'gpuchaos agent' and behaves as it does.

` + long + `

The child processes of the exhaustion, NUMA and duty-cycle faults (burn,
exhaust, numa-hog, pace) are gpuchaos subcommands, which this binary does
not have: they run from --gpuchaos-binary, by default the gpuchaos beside
this binary (the image has both in /usr/local/bin).` + longEnd(o.Twin != nil),
		Example: `  gpuchaos-agent
  gpuchaos-agent --listen 127.0.0.1:9400 --interval 1s
  gpuchaos-agent --node-name gpu-node-0 --kubeconfig ~/.kube/config`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          func(cmd *cobra.Command, _ []string) error { return fl.run(cmd, o, "gpuchaos") },
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	command.WithLogger(root)
	fl.add(root, o)
	root.Flags().StringVar(&fl.gpuchaos, "gpuchaos-binary", "", "the gpuchaos binary the exhaustion, NUMA and duty-cycle faults run as child processes (with --node-name; empty: the gpuchaos beside this binary)")
	return root
}

func (fl *flags) add(cmd *cobra.Command, o Options) {
	f := cmd.Flags()
	f.StringVar(&fl.listen, "listen", ":9400", "address to serve on (dcgm-exporter's port, all interfaces like it)")
	f.DurationVar(&fl.interval, "interval", exporter.DefaultInterval, "how often to sample the GPUs")
	f.DurationVar(&fl.numa, "numa-interval", exporter.DefaultNUMAInterval, "how often to judge the NUMA alignment of every GPU process (gpuchaos_numa_*; 0: off)")
	f.StringVar(&fl.hostname, "hostname", "", "Hostname label (default: this machine's host name)")
	if o.Twin != nil {
		f.BoolVar(&fl.twin, "twin", false, "read a simulated node of the digital twin instead of NVML")
		f.IntVar(&fl.twinGPUs, "twin-gpus", 2, "GPUs of the simulated node (with --twin)")
		f.Uint64Var(&fl.seed, "seed", 1, "seed of the twin (with --twin)")
	}
	f.BoolVarP(&fl.verbose, "verbose", "v", false, "log state changes to stderr (the same as --log-level info)")
	f.BoolVar(&fl.noXID, "no-xid-watch", false, "do not follow the kernel log for XID errors")
	f.StringVar(&fl.kmsgPath, "kmsg", kmsg.DefaultPath, "kernel log device to follow for XID errors")
	f.StringVar(&fl.nodeName, "node-name", os.Getenv("NODE_NAME"), "apply the NodeFaults of this Kubernetes node (default $NODE_NAME; empty: serve metrics only)")
	f.StringVar(&fl.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (with --node-name; empty: in-cluster service account)")
	f.StringVar(&fl.ledger, "ledger", DefaultLedger, "journal of the NodeFaults applied on this node (with --node-name)")
	f.DurationVar(&fl.resync, "resync", 30*time.Second, "how often to list this node's NodeFaults besides watching them (with --node-name)")
	f.StringVar(&fl.cgroupRoot, "cgroup-root", "", "where the node's cgroup hierarchies are mounted, to find a pod's processes by its uid (with --node-name; empty: /sys/fs/cgroup)")
}

// long is the description both binaries give, bar its last paragraph.
const long = `Sample this node's GPUs through NVML every --interval and serve the newest
reading at /metrics in the Prometheus text format, under dcgm-exporter's
metric names (DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_POWER_USAGE, ...), labels
(gpu, UUID, pci_bus_id, device, modelName, Hostname) and units, so the
alert rules you wrote for dcgm-exporter read it unchanged. gpuchaos_*
series beside them carry active faults, injections, XID events by code and
burn results.

It listens on port 9400 on every interface, as dcgm-exporter does, so a
Prometheus elsewhere can scrape it; pass --listen 127.0.0.1:9400 to keep it
on the node. It samples every second (dcgm-exporter: every 30 s) so an
injected fault shows within a probe's deadline; scripts/agent-cost
measures what that costs.

It also follows the kernel log (/dev/kmsg; needs root or CAP_SYSLOG) for
the driver's NVRM Xid lines and exports each as DCGM_FI_DEV_XID_ERRORS
(the GPU's newest code, as DCGM reports it) and gpuchaos_xid_events_total
by GPU and code, the GPU found by the line's PCI bus id. Without access to
the kernel log it warns once and serves metrics without XIDs;
--no-xid-watch turns the watch off.

With --node-name (default: $NODE_NAME, which the DaemonSet sets from the
pod's spec.nodeName) it also applies the NodeFaults of that node that the
gpuchaos controller creates: it watches those labelled gpuchaos.dev/node=
NAME, injects each through this node's own mechanisms (kernel log,
network namespaces, cgroups, child processes), journalling it in --ledger
first, and reports Applied, Recovered or Failed in the NodeFault's status.
Faults through the API server (pod-delete, node-cordon, node-taint,
daemonset-pod-delete) are the controller's and are left alone. Each fault
is recovered when its action becomes Recover, when it is deleted, and at
its expiresAt on the agent's own timer, even while the API server is
unreachable; the status catches up when it returns. It reports this
node's GPUs on its Node as the gpuchaos.dev/gpus annotation (an empty
list without NVML). Without NVML it still applies NodeFaults, serving no
metrics. --kubeconfig names a kubeconfig; empty means the pod's
in-cluster service account.

On SIGTERM or Ctrl-C it stops without recovering: faults in effect stay
in effect and in the ledger, and the next agent on the node recovers each
when it expires, is set to Recover or is deleted (a rolling update of the
DaemonSet does not cut experiments short). 'gpuchaos recover --ledger'
recovers them at once by hand.`

// longEnd is the description's last paragraph, which names --twin where
// the command has it.
func longEnd(twin bool) string {
	if twin {
		return `

NVLink bandwidth and DCGM's profiling fields (DCGM_FI_PROF_*) need DCGM's
host engine and are not exported. A GPU that stops answering disappears
from the page. --twin serves a simulated node instead of NVML, for a
machine without a GPU. /healthz answers 200 while sampling runs. Stop with
Ctrl-C.`
	}
	return `

NVLink bandwidth and DCGM's profiling fields (DCGM_FI_PROF_*) need DCGM's
host engine and are not exported. A GPU that stops answering disappears
from the page. /healthz answers 200 while sampling runs. Stop with Ctrl-C.`
}

// run runs the agent. gpuchaos names the binary the child-process faults
// run from when fl.gpuchaos is empty: a name beside this binary, or empty
// for this binary itself.
func (fl flags) run(cmd *cobra.Command, o Options, gpuchaos string) error {
	switch {
	case fl.interval < 10*time.Millisecond:
		return fmt.Errorf("--interval: must be at least 10ms, got %s", fl.interval)
	case fl.twin && (fl.twinGPUs < 1 || fl.twinGPUs > 64):
		return fmt.Errorf("--twin-gpus: must be 1..64, got %d", fl.twinGPUs)
	case fl.nodeName != "" && fl.resync < 100*time.Millisecond:
		return fmt.Errorf("--resync: must be at least 100ms, got %s", fl.resync)
	case fl.nodeName != "" && fl.ledger == "":
		return fmt.Errorf("--ledger: the node agent journals every NodeFault it applies; name a ledger")
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	log := command.Logger(cmd)
	if fl.verbose && !log.Enabled(ctx, slog.LevelInfo) {
		// --verbose predates --log-level: it asks for info.
		log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	prog := cmd.CommandPath()

	var (
		src      gpu.Source
		srcName  string
		twinLoop func(context.Context) error
	)
	if fl.twin {
		s, loop, err := o.Twin(ctx, TwinOptions{GPUs: fl.twinGPUs, Seed: fl.seed, Logger: log})
		if err != nil {
			return command.Failed(fmt.Errorf("agent: %w", err))
		}
		src, srcName, twinLoop = s, "twin", loop
	} else {
		open := o.OpenGPUs
		if open == nil {
			open = nvmlgpu.Open
		}
		s, err := open()
		switch {
		case err == nil:
			src, srcName = s, "nvml"
		case fl.nodeName == "" && o.Twin != nil:
			return command.Failed(fmt.Errorf("agent: %w (use --twin on a machine without a GPU)", err))
		case fl.nodeName == "":
			return command.Failed(fmt.Errorf("agent: %w", err))
		default:
			// Network, storage and process faults need no GPU: the
			// node still takes its NodeFaults.
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: warning: no GPUs (%v): serving no metrics, reporting no GPUs on node %s\n", prog, err, fl.nodeName)
		}
	}
	if src != nil {
		defer src.Close()
	}

	var nodeAgent *nodeagent.Agent
	if fl.nodeName != "" {
		var devs []gpu.Device
		if src != nil {
			var err error
			if devs, err = src.Devices(ctx); err != nil {
				return command.Failed(fmt.Errorf("agent: list GPUs: %w", err))
			}
		}
		exec, err := childBinary(fl.gpuchaos, gpuchaos, cmd.ErrOrStderr(), prog)
		if err != nil {
			return command.Failed(err)
		}
		if nodeAgent, err = fl.newNodeAgent(devs, exec, log); err != nil {
			return err
		}
		if src == nil {
			fmt.Fprintf(cmd.OutOrStdout(), "applying the NodeFaults of node %s (ledger %s; Ctrl-C to stop)\n", fl.nodeName, fl.ledger)
			return command.Failed(nodeAgent.Start(ctx))
		}
	}

	a, err := exporter.New(ctx, exporter.Options{
		Source: src, SourceName: srcName, Interval: fl.interval, NUMAInterval: fl.numa,
		Hostname: fl.hostname, Version: buildVersion(), Logger: log.With("component", "agent"),
	})
	if err != nil {
		return command.Failed(err)
	}
	if !fl.noXID {
		defer watchXIDs(ctx, a, fl.kmsgPath, cmd.ErrOrStderr(), prog)()
	}
	ln, err := net.Listen("tcp", fl.listen)
	if err != nil {
		return command.Failed(fmt.Errorf("--listen: %w", err))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "serving %d GPUs (%s) at http://%s/metrics (Ctrl-C to stop)\n", len(a.Devices()), srcName, ln.Addr())
	var loops []func(context.Context) error
	if twinLoop != nil {
		loops = append(loops, twinLoop)
	}
	if nodeAgent != nil {
		fmt.Fprintf(cmd.OutOrStdout(), "applying the NodeFaults of node %s (ledger %s)\n", fl.nodeName, fl.ledger)
		loops = append(loops, nodeAgent.Start)
	}
	return command.Failed(serve(ctx, a, ln, loops...))
}

// childBinary is the gpuchaos binary the child-process faults run from:
// flag when set; else, when beside names one, the binary of that name
// beside this one, with a warning on warn when there is none (only those
// faults fail then); else empty, this process's own binary.
func childBinary(flag, beside string, warn io.Writer, prog string) (string, error) {
	if flag != "" || beside == "" {
		return flag, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("agent: find this binary, beside which gpuchaos is looked for (set --gpuchaos-binary): %w", err)
	}
	p := filepath.Join(filepath.Dir(self), beside)
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		fmt.Fprintf(warn, "%s: warning: no executable %s beside this binary: the exhaustion, NUMA and duty-cycle faults will fail (set --gpuchaos-binary)\n", prog, p)
	}
	return p, nil
}

// newNodeAgent connects to the cluster and opens the ledger of NodeFault
// mode; exec is the gpuchaos binary the child-process faults run from
// (empty: this one).
func (fl flags) newNodeAgent(devs []gpu.Device, exec string, log *slog.Logger) (*nodeagent.Agent, error) {
	cfg, err := nodeagent.Config(fl.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	c, err := nodeagent.NewClient(cfg)
	if err != nil {
		return nil, command.Failed(fmt.Errorf("agent: API client: %w", err))
	}
	name := os.Getenv("POD_NAME")
	if name == "" {
		name = "gpuchaos-agent/" + fl.nodeName
	}
	a, err := nodeagent.New(nodeagent.Options{
		Client: c, Node: fl.nodeName, Ledger: fl.ledger, GPUs: devs, Agent: name, Resync: fl.resync, CgroupRoot: fl.cgroupRoot,
		Env: nodeall.Env(nodeall.Node{Logger: log.With("component", "injector"), GPUNode: gpuNodes(devs), Exec: exec,
			Pod: &nodeall.Pod{CgroupRoot: fl.cgroupRoot}}),
		Logger: log.With("component", "nodeagent", "node", fl.nodeName),
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// watchXIDs follows the kernel log at path and records every XID in a,
// resolving the line's bus id to one of a's GPUs. When the log cannot be
// read (not root, no such device) it warns once on warn, after prog, and
// returns: the agent still serves everything else. The returned func stops
// the watch.
func watchXIDs(ctx context.Context, a *exporter.Agent, path string, warn io.Writer, prog string) (stop func()) {
	w, err := xidwatch.Start(ctx, xidwatch.Options{
		Kmsg:    kmsg.Options{Path: path},
		Resolve: xidwatch.GPUResolver(a.Devices()),
		OnXID:   func(ev xidwatch.Event) { a.RecordXID(ev.GPU, ev.Code) },
	})
	if err != nil {
		fmt.Fprintf(warn, "%s: warning: not watching for XIDs, serving metrics without them: %v\n", prog, err)
		return func() {}
	}
	return func() {
		if err := w.Stop(); err != nil {
			fmt.Fprintf(warn, "%s: warning: the XID watch stopped early: %v\n", prog, err)
		}
	}
}

// serve runs the agent's sampling loop, the HTTP server and more (the
// twin, the NodeFault applier) until ctx ends or one of them fails, then
// stops all and waits for them.
func serve(ctx context.Context, a *exporter.Agent, ln net.Listener, more ...func(context.Context) error) error {
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
	for _, m := range more {
		loops = append(loops, func() error { return m(ctx) })
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
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), exposition.ShutdownGrace)
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

// gpuNodes gives the NUMA injectors each GPU's node as NVML reported it
// (-1, unknown, for a GPU the node does not have): without it they know
// no GPU's node, and refuse on a machine of two sockets.
func gpuNodes(devs []gpu.Device) func(context.Context, int) (int, error) {
	return func(_ context.Context, i int) (int, error) {
		for _, d := range devs {
			if d.Index == i {
				return d.NUMANode, nil
			}
		}
		return -1, nil
	}
}
