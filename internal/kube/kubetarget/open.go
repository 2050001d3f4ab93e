package kubetarget

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/kube/kubeclient"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
)

// Scheme holds the built-in kinds and gpuchaos's, for clients and caches
// of this target and the controller.
func Scheme() *runtime.Scheme { return kubeclient.Scheme }

// RESTConfig loads the cluster's config as kubectl finds it (see
// kubeclient.Config); a failure is a --kubeconfig ConfigError.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	cfg, _, err := kubeclient.Config(kubeconfig)
	if err != nil {
		return nil, &target.ConfigError{Field: "--kubeconfig", Err: err}
	}
	return cfg, nil
}

// Open opens the target from a kubeconfig for one command-line run: it
// starts its own NodeFault cache, and names its NodeFaults after a run
// uid of its own, since no Experiment object exists in the cluster.
func Open(ctx context.Context, cfg target.Config) (target.Target, error) {
	rc, ns, err := kubeclient.Config(cfg.Kubeconfig)
	if err != nil {
		return nil, &target.ConfigError{Field: "--kubeconfig", Err: err}
	}
	scheme := Scheme()
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return nil, &target.ConfigError{Field: "--kubeconfig", Err: err}
	}
	exp := &v1alpha1.Experiment{}
	exp.UID = types.UID(uuid.NewUUID())
	exp.Namespace = cmp.Or(cfg.Namespace, ns)
	t, err := New(Options{Client: c, Watcher: &Watcher{}, Experiment: exp, Prometheus: cfg.Prometheus, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	if cfg.DryRun {
		// Planning reads nodes and pods only.
		return t, nil
	}
	ca, err := cache.New(rc, cache.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("k8s target: %w", err)
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := NewWatcher(cctx, ca)
	if err != nil {
		cancel()
		return nil, err
	}
	go func() { _ = ca.Start(cctx) }()
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if !ca.WaitForCacheSync(sctx) {
		cancel()
		return nil, fmt.Errorf("k8s target: the NodeFault cache did not sync within a minute")
	}
	t.opts.Watcher = w
	t.stop = cancel
	return t, nil
}
