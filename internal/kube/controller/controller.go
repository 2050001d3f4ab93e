// Package controller is gpuchaos's Kubernetes controller: a controller-runtime
// manager, elected leader through a Lease, whose Experiment reconciler
// admits an Experiment, runs it with the engine on the k8s target (one
// NodeFault per injection, applied by node agents), writes its status as
// the run goes, and holds the Experiment with a finalizer until every
// NodeFault it made is recovered and deleted.
package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/kube/controller/schedule"
	"sigs.k8s.io/controller-runtime/pkg/config"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpuchaos/gpuchaos/internal/kube/kubetarget"
)

// Options configure the controller. Zero values take the defaults noted.
type Options struct {
	// Config reaches the API server.
	Config *rest.Config
	// Prometheus is the server prometheus probes ask when they name none.
	Prometheus string
	// LeaderElection runs the reconcilers only in the process holding the
	// Lease LeaderElectionID in LeaderElectionNamespace (default: the
	// namespace the controller runs in).
	LeaderElection          bool
	LeaderElectionNamespace string
	LeaderElectionID        string
	// MetricsBindAddress and HealthProbeBindAddress serve /metrics and
	// /healthz, /readyz; "0" turns one off.
	MetricsBindAddress     string
	HealthProbeBindAddress string
	// Logger receives the controller's logs (and controller-runtime's);
	// nil discards them.
	Logger *slog.Logger

	// PollInterval and RecoveryWindow pace each run (kubetarget defaults).
	PollInterval   time.Duration
	RecoveryWindow time.Duration
	// StatusInterval is the least time between two status writes of one
	// running Experiment (default 2 s): events and NodeFault phases are
	// gathered in between, so 500 nodes do not mean 1000 writes.
	StatusInterval time.Duration
	// Grace is how long past its run's window a NodeFault's agent waits
	// before recovering on its own (kubetarget default).
	Grace time.Duration
	// Concurrency is how many NodeFaults one run creates and waits on at
	// once (kubetarget default).
	Concurrency int
	// SkipNameValidation lets several managers live in one process
	// (tests); controller-runtime otherwise refuses a second controller
	// named experiment.
	SkipNameValidation bool
}

// DefaultLeaderElectionID is the Lease the controllers of one cluster
// share.
const DefaultLeaderElectionID = "gpuchaos-controller"

// New builds the manager with every gpuchaos controller registered: the
// Experiment reconciler, the Schedule controller and the reconciler that
// applies API-mechanism NodeFaults (cordon, drain, taint, pod deletes). The
// caller calls Start.
func New(opts Options) (manager.Manager, error) {
	if opts.Config == nil {
		return nil, errors.New("operator: a REST config is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	cfg := rest.CopyConfig(opts.Config)
	// A run of 500 nodes creates and patches 500 NodeFaults at once;
	// client-go's default of 5 requests a second would take minutes.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 200, 400
	}
	if opts.LeaderElectionID == "" {
		opts.LeaderElectionID = DefaultLeaderElectionID
	}
	if opts.MetricsBindAddress == "" {
		opts.MetricsBindAddress = "0"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        kubetarget.Scheme(),
		Logger:                        logr.FromSlogHandler(log.Handler()),
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsBindAddress},
		HealthProbeBindAddress:        opts.HealthProbeBindAddress,
		Controller:                    config.Controller{SkipNameValidation: &opts.SkipNameValidation},
	})
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	if opts.HealthProbeBindAddress != "" && opts.HealthProbeBindAddress != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return nil, err
		}
	}
	if _, err := Setup(mgr, opts); err != nil {
		return nil, err
	}
	if err := SetupNodeFaults(mgr, NodeFaultOptions{Logger: log.With("component", "kubefault")}); err != nil {
		return nil, fmt.Errorf("API-fault controller: %w", err)
	}
	if err := schedule.Setup(mgr, schedule.Options{}); err != nil {
		return nil, fmt.Errorf("schedule controller: %w", err)
	}
	return mgr, nil
}
