package cli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/kube/controller"
	"github.com/gpuchaos/gpuchaos/internal/kube/kubetarget"
)

func newControllerCmd() *cobra.Command {
	var opts controller.Options
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the Kubernetes controller that runs Experiments in the cluster",
		Long: `Run gpuchaos's Kubernetes controller. It watches Experiment objects
(gpuchaos.dev/v1alpha1) and, for each, in this order:

  admits it, or refuses it with phase Failed and condition Admitted=False
  before anything is created: its namespace must carry the label
  gpuchaos.dev/chaos=enabled, its spec must validate as 'gpuchaos run'
  validates a file, each fault needs a mechanism that runs on target k8s,
  the selection must stay within spec.blastRadius and match something;

  runs it: one NodeFault per injection, applied by the node's agent
  ('gpuchaos agent' as a DaemonSet), probes observed, every NodeFault set to
  Recover at the end, verdicts and the timeline written to its status;

  holds it with the finalizer gpuchaos.dev/recover until every NodeFault it
  made is recovered, so deleting a running Experiment recovers first.
  'kubectl annotate experiment NAME gpuchaos.dev/abort=true' stops a run:
  everything is recovered and the phase becomes Aborted.

One controller acts at a time, the holder of a Lease (--leader-elect). A
controller that finds an Experiment Running without a run of its own (the
previous one died) recovers its NodeFaults and marks it Failed.

Logs are JSON lines on stderr at level info, unless --log-format or
--log-level say otherwise.`,
		Example: `  gpuchaos controller --prometheus http://prometheus.monitoring:9090
  gpuchaos controller --kubeconfig ~/.kube/config --leader-elect=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger(cmd)
			if !cmd.Flags().Changed("log-format") && !cmd.Flags().Changed("log-level") {
				log = slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
			}
			cfg, err := kubetarget.RESTConfig(kubeconfig)
			if err != nil {
				return err
			}
			opts.Config, opts.Logger = cfg, log
			mgr, err := controller.New(opts)
			if err != nil {
				return failed(err)
			}
			log.Info("starting", "leader_elect", opts.LeaderElection, "prometheus", opts.Prometheus)
			if err := mgr.Start(cmd.Context()); err != nil {
				return failed(fmt.Errorf("controller: %w", err))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: the in-cluster config, else $KUBECONFIG or ~/.kube/config)")
	f.BoolVar(&opts.LeaderElection, "leader-elect", true, "act only while holding the Lease "+controller.DefaultLeaderElectionID+", so that one of several replicas runs Experiments")
	f.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the namespace the controller runs in)")
	f.StringVar(&opts.Prometheus, "prometheus", "", "Prometheus server that prometheus probes ask when they name no url")
	f.StringVar(&opts.MetricsBindAddress, "metrics-bind-address", "0", "where to serve the controller's /metrics (0: off)")
	f.StringVar(&opts.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "where to serve /healthz and /readyz (0: off)")
	return cmd
}
