package kubefault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// Agent is the name the reconciler writes in NodeFault.Status.Agent.
const Agent = "controller"

// DefaultDrainTimeout bounds one reconcile's drain: pods a disruption
// budget still holds after it are reported in the status message and
// stay, so one budget cannot hold up the other NodeFaults.
const DefaultDrainTimeout = 2 * time.Minute

// SetupOptions configure the reconciler; the zero value is the default.
type SetupOptions struct {
	// Logger receives the reconciler's logs; nil discards them.
	Logger *slog.Logger
	// Retry is Options.Retry for drains.
	Retry time.Duration
	// DrainTimeout bounds a drain; zero means DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Setup registers with mgr the reconciler of NodeFaults whose mechanism is
// one of Mechanisms: it applies them on Action Apply, recovers them on
// Action Recover, at ExpiresAt and on deletion (finalizer
// gpuchaos.dev/recover), and writes their status as agent "controller".
func Setup(mgr ctrl.Manager, opts SetupOptions) error {
	r := newReconciler(mgr.GetClient(), mgr.GetAPIReader(), opts)
	return ctrl.NewControllerManagedBy(mgr).
		Named("kubefault").
		For(&v1alpha1.NodeFault{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			nf, ok := o.(*v1alpha1.NodeFault)
			return ok && slices.Contains(Mechanisms(), nf.Spec.Mechanism)
		}))).
		// A drain can wait on a disruption budget; others go on meanwhile.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

// Reconciler applies and recovers API-mechanism NodeFaults.
type Reconciler struct {
	client client.Client
	reader client.Reader
	opts   SetupOptions

	mu        sync.Mutex
	injectors map[string]fault.Injector // by fault/mechanism, so one-shot state lasts
}

func newReconciler(c client.Client, r client.Reader, opts SetupOptions) *Reconciler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Reconciler{client: c, reader: r, opts: opts, injectors: map[string]fault.Injector{}}
}

func (r *Reconciler) injector(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := f.ID + "/" + m.Name
	if in, ok := r.injectors[k]; ok {
		return in, nil
	}
	in, err := New(f, m, Options{Client: r.client, Reader: r.reader, Retry: r.opts.Retry, Logger: r.opts.Logger})
	if err != nil {
		return nil, err
	}
	r.injectors[k] = in
	return in, nil
}

// Reconcile makes the cluster match one NodeFault and reports it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var nf v1alpha1.NodeFault
	if err := r.client.Get(ctx, req.NamespacedName, &nf); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !slices.Contains(Mechanisms(), nf.Spec.Mechanism) {
		return ctrl.Result{}, nil
	}
	log := r.opts.Logger.With("nodefault", nf.Name, "node", nf.Spec.NodeName, "fault", nf.Spec.Fault)
	f, ok := catalog.Lookup(nf.Spec.Fault)
	var m *catalog.Mechanism
	if ok {
		m = f.Mechanism(nf.Spec.Mechanism)
	}
	if m == nil {
		// Nothing was applied, so nothing holds the deletion.
		if controllerutil.RemoveFinalizer(&nf, v1alpha1.FinalizerRecover) {
			if err := r.client.Update(ctx, &nf); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, r.status(ctx, &nf, v1alpha1.NodeFaultFailed, fmt.Sprintf("mechanism %s of %s is not in the catalogue", nf.Spec.Mechanism, nf.Spec.Fault))
	}
	in, err := r.injector(f, m)
	if err != nil {
		return ctrl.Result{}, r.status(ctx, &nf, v1alpha1.NodeFaultFailed, err.Error())
	}
	key := nf.Name
	now := r.opts.Now()

	if !nf.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(&nf, v1alpha1.FinalizerRecover) {
			return ctrl.Result{}, nil
		}
		if err := in.Recover(ctx, key); err != nil && !errors.Is(err, fault.ErrTargetGone) {
			log.Warn("recovery on deletion failed", "err", err)
			return ctrl.Result{}, err
		}
		controllerutil.RemoveFinalizer(&nf, v1alpha1.FinalizerRecover)
		return ctrl.Result{}, r.client.Update(ctx, &nf)
	}

	expired := !nf.Spec.ExpiresAt.IsZero() && !now.Before(nf.Spec.ExpiresAt.Time)
	if nf.Spec.Action == v1alpha1.ActionRecover || expired {
		if nf.Status.Phase == v1alpha1.NodeFaultRecovered {
			return ctrl.Result{}, nil
		}
		err := in.Recover(ctx, key)
		if err != nil && !errors.Is(err, fault.ErrTargetGone) {
			if serr := r.status(ctx, &nf, v1alpha1.NodeFaultFailed, "recover: "+err.Error()); serr != nil {
				return ctrl.Result{}, serr
			}
			return ctrl.Result{}, err
		}
		msg := ""
		switch {
		case err != nil:
			msg = err.Error()
		case nf.Spec.Action != v1alpha1.ActionRecover:
			msg = "recovered on expiry"
		}
		log.Info("recovered", "msg", msg)
		return ctrl.Result{}, r.status(ctx, &nf, v1alpha1.NodeFaultRecovered, msg)
	}

	// Applied once per generation: pod deletions are not repeated on
	// every resync.
	if nf.Status.Phase == v1alpha1.NodeFaultApplied && nf.Status.ObservedGeneration == nf.Generation {
		return r.untilExpiry(&nf, now), nil
	}
	if controllerutil.AddFinalizer(&nf, v1alpha1.FinalizerRecover) {
		// Before anything changes in the cluster, so a deletion waits
		// for recovery.
		if err := r.client.Update(ctx, &nf); err != nil {
			return ctrl.Result{}, err
		}
	}
	v, err := f.Resolve(nf.Spec.Params)
	if err != nil {
		return ctrl.Result{}, r.status(ctx, &nf, v1alpha1.NodeFaultFailed, "params: "+err.Error())
	}
	ictx, cancel := context.WithTimeout(ctx, r.opts.DrainTimeout)
	if !nf.Spec.ExpiresAt.IsZero() {
		ictx, cancel = context.WithDeadline(ictx, nf.Spec.ExpiresAt.Time)
	}
	err = in.Inject(ictx, key, ref(&nf), v)
	cancel()
	var de *DrainError
	switch {
	case errors.As(err, &de):
		log.Warn("drain partial", "err", err)
		if err := r.status(ctx, &nf, v1alpha1.NodeFaultApplied, err.Error()); err != nil {
			return ctrl.Result{}, err
		}
	case err != nil:
		log.Warn("apply failed", "err", err)
		if serr := r.status(ctx, &nf, v1alpha1.NodeFaultFailed, "apply: "+err.Error()); serr != nil {
			return ctrl.Result{}, serr
		}
		return ctrl.Result{}, err
	default:
		log.Info("applied")
		if err := r.status(ctx, &nf, v1alpha1.NodeFaultApplied, ""); err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.untilExpiry(&nf, r.opts.Now()), nil
}

// untilExpiry requeues at ExpiresAt, when the fault recovers on its own.
func (r *Reconciler) untilExpiry(nf *v1alpha1.NodeFault, now time.Time) ctrl.Result {
	if nf.Spec.ExpiresAt.IsZero() {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: max(nf.Spec.ExpiresAt.Sub(now), time.Millisecond)}
}

// ref is the inventory reference of a NodeFault's target.
func ref(nf *v1alpha1.NodeFault) inventory.Ref {
	r := inventory.Ref{Kind: catalog.Scope(nf.Spec.Target.Kind), Node: nf.Spec.NodeName, UUID: nf.Spec.Target.UUID, Job: nf.Spec.Target.Job}
	if nf.Spec.Target.GPU != nil {
		r.GPU = *nf.Spec.Target.GPU
	}
	if nf.Spec.Target.Rank != nil {
		r.Rank = *nf.Spec.Target.Rank
	}
	return r
}

// status writes the NodeFault's status: phase with its time, the message,
// and this agent.
func (r *Reconciler) status(ctx context.Context, nf *v1alpha1.NodeFault, phase v1alpha1.NodeFaultPhase, msg string) error {
	now := metav1.NewTime(r.opts.Now())
	nf.Status.Phase = phase
	nf.Status.Message = msg
	nf.Status.Agent = Agent
	nf.Status.ObservedGeneration = nf.Generation
	switch phase {
	case v1alpha1.NodeFaultApplied:
		nf.Status.AppliedAt = &now
	case v1alpha1.NodeFaultRecovered:
		nf.Status.RecoveredAt = &now
	}
	if err := r.client.Status().Update(ctx, nf); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("status of nodefault %s (generation %s): %w", nf.Name, strconv.FormatInt(nf.Generation, 10), err)
	}
	return nil
}
