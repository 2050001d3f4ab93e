package controller

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/kubefault"
	"github.com/gpuchaos/gpuchaos/internal/kube/nodefault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// NodeFaultAgent is the name the controller writes in the status of the
// NodeFaults it applies.
const NodeFaultAgent = "controller"

// DefaultDrainTimeout bounds one drain: pods a disruption budget still
// holds after it are reported in the status message and stay, so one
// budget cannot hold up the other NodeFaults.
const DefaultDrainTimeout = 2 * time.Minute

// NodeFaultOptions configure SetupNodeFaults; the zero value is the
// default.
type NodeFaultOptions struct {
	// Logger receives the applier's logs; nil discards them.
	Logger *slog.Logger
	// Retry is the wait between evictions a disruption budget refused
	// (kubefault.Options.Retry).
	Retry time.Duration
	// DrainTimeout bounds a drain; zero means DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// SetupNodeFaults registers with mgr the controller that applies the
// NodeFaults of the API mechanisms (kubefault: cordon, drain, taint, pod
// deletes) through the NodeFault applier, as agent "controller"; node
// agents apply every other mechanism.
func SetupNodeFaults(mgr ctrl.Manager, opts NodeFaultOptions) error {
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	inj := &apiInjectors{opts: kubefault.Options{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Retry: opts.Retry, Logger: opts.Logger}}
	a, err := nodefault.New(nodefault.Options{
		API: nodeFaultAPI{mgr.GetClient()}, Injector: inj.get, Agent: NodeFaultAgent,
		InjectTimeout: opts.DrainTimeout, FailRecovery: true,
		Partial: func(err error) bool { var de *kubefault.DrainError; return errors.As(err, &de) },
		Logger:  opts.Logger, Now: opts.Now,
	})
	if err != nil {
		return err
	}
	r := &nodeFaultReconciler{client: mgr.GetClient(), applier: a}
	return ctrl.NewControllerManagedBy(mgr).
		// The name is the controller label of controller-runtime's
		// metrics, which dashboards read.
		Named("kubefault").
		For(&v1alpha1.NodeFault{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			nf, ok := o.(*v1alpha1.NodeFault)
			return ok && apiMechanism(nf)
		}))).
		// A drain can wait on a disruption budget; others go on meanwhile.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

func apiMechanism(nf *v1alpha1.NodeFault) bool {
	return slices.Contains(kubefault.Mechanisms(), nf.Spec.Mechanism)
}

// nodeFaultReconciler hands each API-mechanism NodeFault to the applier.
type nodeFaultReconciler struct {
	client  client.Client
	applier *nodefault.Applier
}

// Reconcile makes the cluster match one NodeFault and reports it.
func (r *nodeFaultReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var nf v1alpha1.NodeFault
	if err := r.client.Get(ctx, req.NamespacedName, &nf); err != nil {
		if apierrors.IsNotFound(err) {
			r.applier.Forget(req.Name) // the applier's key is the name
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !apiMechanism(&nf) {
		return ctrl.Result{}, nil
	}
	res, err := r.applier.Reconcile(ctx, &nf)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: res.RequeueAfter}, nil
}

// apiInjectors builds kubefault's injectors once per fault and mechanism,
// so that what one remembers (the pods a key killed) lasts.
type apiInjectors struct {
	opts kubefault.Options

	mu sync.Mutex
	by map[string]fault.Injector
}

func (c *apiInjectors) get(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := f.ID + "/" + m.Name
	if in, ok := c.by[k]; ok {
		return in, nil
	}
	in, err := kubefault.New(f, m, c.opts)
	if err != nil {
		return nil, err
	}
	if c.by == nil {
		c.by = map[string]fault.Injector{}
	}
	c.by[k] = in
	return in, nil
}

// nodeFaultAPI is the applier's API on a controller-runtime client.
type nodeFaultAPI struct{ c client.Client }

func (a nodeFaultAPI) Patch(ctx context.Context, nf *v1alpha1.NodeFault, patch []byte) error {
	return a.c.Patch(ctx, nf, client.RawPatch(types.MergePatchType, patch))
}

func (a nodeFaultAPI) PatchStatus(ctx context.Context, nf *v1alpha1.NodeFault, patch []byte) error {
	return a.c.Status().Patch(ctx, nf, client.RawPatch(types.MergePatchType, patch))
}
