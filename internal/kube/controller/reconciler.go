package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/kube/kubetarget"
)

// ExperimentReconciler admits, runs and cleans up Experiments. What it may
// do in the cluster is granted by the RBAC markers in deploy/rbac, the one
// place the chart's roles are generated from.
type ExperimentReconciler struct {
	client  client.Client
	api     client.Reader
	watcher *kubetarget.Watcher
	opts    Options
	log     *slog.Logger
	// events are what `kubectl describe experiment` shows: admission,
	// start, takeover and the end of each run.
	events events.EventRecorder

	mu   sync.Mutex
	runs map[types.UID]*run
	// stopped is set once the manager stops: no new runs start.
	stopped bool
}

// run is one Experiment's engine run in this process.
type run struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// Causes a run is cancelled with, which decide its final phase.
var (
	errAborted  = errors.New("aborted by the " + v1alpha1.AnnotationAbort + " annotation")
	errDeleted  = errors.New("the Experiment was deleted")
	errShutdown = errors.New("the controller is shutting down")
)

// Setup registers the Experiment reconciler with mgr and returns it.
func Setup(mgr manager.Manager, opts Options) (*ExperimentReconciler, error) {
	if opts.StatusInterval <= 0 {
		opts.StatusInterval = 2 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx := context.Background()
	w, err := kubetarget.NewWatcher(ctx, mgr.GetCache())
	if err != nil {
		return nil, err
	}
	r := &ExperimentReconciler{
		client: mgr.GetClient(), api: mgr.GetAPIReader(), watcher: w, opts: opts,
		log: log.With("component", "experiment-controller"), runs: map[types.UID]*run{},
		events: mgr.GetEventRecorder(EventSource),
	}
	// A NodeFault's change wakes its Experiment, found by its labels.
	toExperiment := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		l := o.GetLabels()
		if l[v1alpha1.LabelExperiment] == "" || l[v1alpha1.LabelExperimentNamespace] == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[v1alpha1.LabelExperimentNamespace], Name: l[v1alpha1.LabelExperiment]}}}
	})
	err = ctrl.NewControllerManagedBy(mgr).
		// Every update, status included: a takeover reads the phase.
		For(&v1alpha1.Experiment{}).
		Watches(&v1alpha1.NodeFault{}, toExperiment).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: &opts.SkipNameValidation}).
		Named("experiment").
		Complete(r)
	if err != nil {
		return nil, fmt.Errorf("experiment controller: %w", err)
	}
	// Runs end with the manager: the engine recovers what it injected.
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.stopAll()
		return nil
	}))
	return r, err
}

func (r *ExperimentReconciler) stopAll() {
	r.mu.Lock()
	r.stopped = true
	runs := make([]*run, 0, len(r.runs))
	for _, rn := range r.runs {
		runs = append(runs, rn)
	}
	r.mu.Unlock()
	for _, rn := range runs {
		rn.cancel(errShutdown)
	}
	for _, rn := range runs {
		<-rn.done
	}
}

// requeue is how soon a reconcile waiting on agents looks again, in case a
// NodeFault's event is missed.
const requeue = 5 * time.Second

// Reconcile moves one Experiment on: admit and start it, abort it, recover
// and clean up after it, or take over a run whose controller died.
func (r *ExperimentReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var exp v1alpha1.Experiment
	if err := r.client.Get(ctx, req.NamespacedName, &exp); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.mu.Lock()
	rn := r.runs[exp.UID]
	r.mu.Unlock()
	if rn != nil {
		select {
		case <-rn.done:
			// The run wrote its final phase before it ended; until the
			// cache shows it, this is not a run without a controller.
			if !exp.Status.Phase.Final() {
				return reconcile.Result{RequeueAfter: time.Second}, nil
			}
			r.mu.Lock()
			delete(r.runs, exp.UID)
			r.mu.Unlock()
		default:
			switch {
			case exp.DeletionTimestamp != nil:
				rn.cancel(errDeleted)
			case exp.Annotations[v1alpha1.AnnotationAbort] == "true":
				rn.cancel(errAborted)
			}
			// The run's last status write may wake this reconciler just
			// before the run is marked done: look again after it.
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
	}

	switch {
	case exp.Status.Phase.Final() || exp.DeletionTimestamp != nil && exp.Status.Phase == "" || exp.DeletionTimestamp != nil && exp.Status.Phase == v1alpha1.PhasePending:
		return r.cleanup(ctx, &exp)
	case exp.Status.Phase == v1alpha1.PhaseRunning || exp.Status.Phase == v1alpha1.PhaseRecovering:
		return r.takeover(ctx, &exp)
	case exp.Annotations[v1alpha1.AnnotationAbort] == "true":
		r.event(&exp, corev1.EventTypeWarning, "Aborted", "Run", "aborted before it started; nothing was injected")
		return reconcile.Result{}, r.finish(ctx, &exp, v1alpha1.PhaseAborted, metav1.Condition{
			Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "Aborted", Message: "aborted before it started; nothing was injected"})
	}
	return r.admitAndStart(ctx, &exp)
}

// cleanup recovers and deletes every NodeFault of a finished (or deleted)
// Experiment, then lets the Experiment go.
func (r *ExperimentReconciler) cleanup(ctx context.Context, exp *v1alpha1.Experiment) (reconcile.Result, error) {
	left, err := r.recoverAll(ctx, exp)
	if err != nil {
		return reconcile.Result{}, err
	}
	if left > 0 {
		return reconcile.Result{RequeueAfter: requeue}, nil
	}
	if controllerutil.ContainsFinalizer(exp, v1alpha1.FinalizerRecover) {
		patch := client.MergeFrom(exp.DeepCopy())
		controllerutil.RemoveFinalizer(exp, v1alpha1.FinalizerRecover)
		if err := r.client.Patch(ctx, exp, patch); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{}, nil
}

// recoverAll asks every NodeFault of exp to recover and deletes those
// reported recovered; it returns how many are left. It reads the API
// server, not the cache, so a NodeFault created just now is not missed.
func (r *ExperimentReconciler) recoverAll(ctx context.Context, exp *v1alpha1.Experiment) (int, error) {
	var nfs v1alpha1.NodeFaultList
	if err := r.api.List(ctx, &nfs, client.MatchingLabels{
		v1alpha1.LabelExperiment: exp.Name, v1alpha1.LabelExperimentNamespace: exp.Namespace}); err != nil {
		return 0, fmt.Errorf("list NodeFaults of %s/%s: %w", exp.Namespace, exp.Name, err)
	}
	left := 0
	for i := range nfs.Items {
		nf := &nfs.Items[i]
		if nf.Status.Phase == v1alpha1.NodeFaultRecovered {
			if err := r.client.Delete(ctx, nf); client.IgnoreNotFound(err) != nil {
				return 0, fmt.Errorf("delete NodeFault %s: %w", nf.Name, err)
			}
			continue
		}
		left++
		if err := kubetarget.SetRecover(ctx, r.client, nf); client.IgnoreNotFound(err) != nil {
			return 0, err
		}
	}
	return left, nil
}

// takeover finishes an Experiment this process did not start and that
// claims to be running: its controller died mid-run. The run cannot be
// judged (its observations died with it), so every NodeFault is
// recovered and the Experiment fails saying why.
func (r *ExperimentReconciler) takeover(ctx context.Context, exp *v1alpha1.Experiment) (reconcile.Result, error) {
	left, err := r.recoverAll(ctx, exp)
	if err != nil {
		return reconcile.Result{}, err
	}
	if left > 0 {
		if exp.Status.Phase != v1alpha1.PhaseRecovering {
			err := r.writeStatus(ctx, exp, func(s *v1alpha1.ExperimentStatus) {
				s.Phase = v1alpha1.PhaseRecovering
				meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: v1alpha1.ConditionRecovered, Status: metav1.ConditionFalse,
					Reason: ReasonControllerRestart, Message: fmt.Sprintf("the controller restarted mid-run; recovering %d NodeFaults", left)})
			})
			if err != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{RequeueAfter: requeue}, nil
	}
	r.event(exp, corev1.EventTypeWarning, ReasonControllerRestart, "Recover", "the controller restarted mid-run: every NodeFault was recovered and the run was not judged")
	return reconcile.Result{}, r.finish(ctx, exp, v1alpha1.PhaseFailed, metav1.Condition{Type: v1alpha1.ConditionRecovered, Status: metav1.ConditionTrue,
		Reason: ReasonControllerRestart, Message: "the controller restarted mid-run: every NodeFault was recovered and the run was not judged"})
}

// EventSource is the reporting controller of the Events the controller
// writes.
const EventSource = "gpuchaos-controller"

// maxNote is under the 1 kB the API server allows an Event's note.
const maxNote = 1000

// event records a Kubernetes Event about exp. Events are best effort (the
// recorder drops them when the API server is slow); the status is the
// record.
func (r *ExperimentReconciler) event(exp *v1alpha1.Experiment, typ, reason, action, note string) {
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	r.events.Eventf(exp, nil, typ, reason, action, "%s", note)
}

// finish writes a final phase with a condition.
func (r *ExperimentReconciler) finish(ctx context.Context, exp *v1alpha1.Experiment, phase v1alpha1.ExperimentPhase, c metav1.Condition) error {
	return r.writeStatus(ctx, exp, func(s *v1alpha1.ExperimentStatus) {
		s.Phase = phase
		now := metav1.Now()
		s.CompletionTime = &now
		s.ObservedGeneration = exp.Generation
		meta.SetStatusCondition(&s.Conditions, c)
	})
}

// writeStatus applies change to the newest status of exp and writes it
// through the status subresource, retrying on conflict.
func (r *ExperimentReconciler) writeStatus(ctx context.Context, exp *v1alpha1.Experiment, change func(*v1alpha1.ExperimentStatus)) error {
	key := client.ObjectKeyFromObject(exp)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur v1alpha1.Experiment
		if err := r.api.Get(ctx, key, &cur); err != nil {
			return err
		}
		change(&cur.Status)
		return r.client.Status().Update(ctx, &cur)
	})
	if err != nil {
		return fmt.Errorf("write status of %s: %w", key, client.IgnoreNotFound(err))
	}
	return nil
}

// namespaceOptedIn says whether ns carries the opt-in label.
func (r *ExperimentReconciler) namespaceOptedIn(ctx context.Context, ns string) (bool, error) {
	var n corev1.Namespace
	if err := r.client.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
		return false, fmt.Errorf("read namespace %s: %w", ns, err)
	}
	return n.Labels[v1alpha1.LabelChaos] == v1alpha1.ChaosEnabled, nil
}
