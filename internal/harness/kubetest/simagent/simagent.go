// Package simagent plays the gpuchaos agents of many fake nodes in one
// process, for the scale benchmark (internal/harness/scale) only: thousands of
// kwok nodes have no agent pods, yet the controller under measurement
// waits for every NodeFault's status, so something has to acknowledge
// them through the real API as agents would.
//
// It acknowledges and nothing more: it applies no fault and checks
// nothing on any node. Where a real agent applies, it writes Phase
// Applied with AppliedAt; where a real agent recovers, Phase Recovered
// with RecoveredAt, through the status subresource with the
// resourceVersion it read, re-reading on a conflict, as the real agent
// (internal/kube/nodeagent) does. Do not use it to test the controller's
// behaviour: a controller test needs the real agent or the real API
// reconciler; this only gives the benchmark a load shaped like theirs.
//
// All simulated agents share one NodeFault informer (one watch), where
// real agents each run their own filtered by node label: a thousand
// watches from one test process would measure the test, not the
// controller.
package simagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
)

// Options configure [New].
type Options struct {
	// Nodes are the node names whose agents are simulated; NodeFaults
	// for any other node are left alone, as their own agent's.
	Nodes []string
	// Concurrency bounds status writes in flight; 0 means 32. Real agents
	// write in parallel, one each, but 5,000 writers at once from one
	// process would only queue in the client.
	Concurrency int
	// Agent is written to Status.Agent; "" means "simagent".
	Agent string
}

// Stats count what the agents wrote.
type Stats struct {
	// Applied and Recovered count status writes of that phase.
	Applied, Recovered int64
	// Conflicts counts writes refused for a stale resourceVersion and
	// retried after reading the NodeFault again.
	Conflicts int64
	// Errors counts writes that failed otherwise and were queued again.
	Errors int64
}

// Agents are the simulated agents of a set of nodes.
type Agents struct {
	opts   Options
	nodes  map[string]bool
	cache  cache.Cache
	client client.Client // uncached: a conflict is resolved by reading the API

	synced chan struct{}
	stats  struct{ applied, recovered, conflicts, errors atomic.Int64 }
}

// New returns agents for opts.Nodes acknowledging through cfg's API
// server; scheme must hold gpuchaos's kinds. They do nothing until
// [Agents.Start].
func New(cfg *rest.Config, scheme *runtime.Scheme, opts Options) (*Agents, error) {
	if len(opts.Nodes) == 0 {
		return nil, errors.New("simagent: Options.Nodes is empty")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 32
	}
	if opts.Agent == "" {
		opts.Agent = "simagent"
	}
	a := &Agents{opts: opts, nodes: make(map[string]bool, len(opts.Nodes)), synced: make(chan struct{})}
	for _, n := range opts.Nodes {
		a.nodes[n] = true
	}
	// Enough client-side rate for Concurrency writers; the default of 5
	// a second would measure client-go's limiter, not the API server.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(20*opts.Concurrency), 40*opts.Concurrency
	var err error
	if a.cache, err = cache.New(cfg, cache.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("simagent: NodeFault cache: %w", err)
	}
	if a.client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("simagent: client: %w", err)
	}
	return a, nil
}

// Synced is closed once the informer has listed every NodeFault, so
// NodeFaults created afterwards are seen by the watch.
func (a *Agents) Synced() <-chan struct{} { return a.synced }

// Stats returns the counts so far.
func (a *Agents) Stats() Stats {
	return Stats{
		Applied:   a.stats.applied.Load(),
		Recovered: a.stats.recovered.Load(),
		Conflicts: a.stats.conflicts.Load(),
		Errors:    a.stats.errors.Load(),
	}
}

// Start watches NodeFaults and acknowledges those of its nodes until ctx
// ends, then returns nil once its writes in flight have finished; it
// returns an error if the informer cannot start.
func (a *Agents) Start(ctx context.Context) error {
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "simagent"},
	)
	defer queue.ShutDown()
	informer, err := a.cache.GetInformer(ctx, &v1alpha1.NodeFault{})
	if err != nil {
		return fmt.Errorf("simagent: NodeFault informer: %w", err)
	}
	enqueue := func(obj any) {
		if nf, ok := obj.(*v1alpha1.NodeFault); ok && a.nodes[nf.Spec.NodeName] {
			queue.Add(types.NamespacedName{Name: nf.Name})
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return fmt.Errorf("simagent: NodeFault handler: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- a.cache.Start(ctx) }()
	if !a.cache.WaitForCacheSync(ctx) {
		cancel()
		if err := <-cacheDone; err != nil {
			return fmt.Errorf("simagent: NodeFault informer: %w", err)
		}
		return ctx.Err()
	}
	close(a.synced)

	var wg sync.WaitGroup
	for range a.opts.Concurrency {
		wg.Go(func() {
			for {
				key, shutdown := queue.Get()
				if shutdown {
					return
				}
				if err := a.acknowledge(ctx, key); err != nil && ctx.Err() == nil {
					a.stats.errors.Add(1)
					queue.AddRateLimited(key)
				} else {
					queue.Forget(key)
				}
				queue.Done(key)
			}
		})
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
	return <-cacheDone
}

// acknowledge brings one NodeFault's status in line with its action,
// reading it from the informer first and from the API after a conflict.
func (a *Agents) acknowledge(ctx context.Context, key types.NamespacedName) error {
	first := true
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var nf v1alpha1.NodeFault
		var err error
		if first {
			err = a.cache.Get(ctx, key, &nf)
		} else {
			a.stats.conflicts.Add(1)
			err = a.client.Get(ctx, key, &nf)
		}
		first = false
		if apierrors.IsNotFound(err) {
			return nil // deleted: nothing left to report on
		}
		if err != nil {
			return err
		}
		if !a.nodes[nf.Spec.NodeName] {
			return nil
		}
		now := metav1.NewTime(time.Now())
		s := &nf.Status
		switch nf.Spec.Action {
		case v1alpha1.ActionApply:
			if s.Phase == v1alpha1.NodeFaultApplied && s.ObservedGeneration == nf.Generation {
				return nil
			}
			s.Phase = v1alpha1.NodeFaultApplied
			if s.AppliedAt == nil {
				s.AppliedAt = &now
			}
		case v1alpha1.ActionRecover:
			if s.Phase == v1alpha1.NodeFaultRecovered && s.ObservedGeneration == nf.Generation {
				return nil
			}
			s.Phase = v1alpha1.NodeFaultRecovered
			s.RecoveredAt = &now
		default:
			return nil // the CRD admits no other action
		}
		s.Agent = a.opts.Agent
		s.ObservedGeneration = nf.Generation
		s.Message = ""
		if err := a.client.Status().Update(ctx, &nf); err != nil {
			return err
		}
		if s.Phase == v1alpha1.NodeFaultApplied {
			a.stats.applied.Add(1)
		} else {
			a.stats.recovered.Add(1)
		}
		return nil
	})
}
