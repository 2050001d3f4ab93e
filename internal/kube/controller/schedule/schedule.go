package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
)

// Clock tells the time. The controller reads all time from it, so a test
// can move it.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Defaults of the history limits, as a Schedule without them gets.
const (
	DefaultSuccessfulHistoryLimit = 3
	DefaultFailedHistoryLimit     = 1
)

// DefaultStartingDeadline is how late a run may start after its due
// time. Later than that it is skipped: a chaos experiment that starts
// hours after it was planned (the controller was down, the Schedule
// suspended) would surprise whoever planned around it.
const DefaultStartingDeadline = 5 * time.Minute

// MinInterval is the shortest @every a Schedule may use: runs are named by
// their due minute, so two in one minute would share a name.
const MinInterval = time.Minute

// AnnotationScheduledAt on an Experiment a Schedule started is its due
// time (RFC 3339), the order history is pruned in.
const AnnotationScheduledAt = "gpuchaos.dev/scheduled-at"

// Condition reasons of ScheduleConditionValid.
const (
	ReasonInvalidSchedule = "InvalidSchedule"
	ReasonInvalidTimeZone = "InvalidTimeZone"
	ReasonValid           = "Valid"
)

// Options configure the controller. The zero value is the real clock and
// DefaultStartingDeadline.
type Options struct {
	// Clock is the time source; nil is the system clock.
	Clock Clock
	// StartingDeadline is how late after its due time a run may still
	// start; 0 is DefaultStartingDeadline.
	StartingDeadline time.Duration
	// Events records what `kubectl describe schedule` shows (runs
	// started and skipped, a spec that cannot be read); nil records
	// none. Setup uses the manager's.
	Events events.EventRecorder
}

// Reconciler reconciles Schedules. Build it with New.
type Reconciler struct {
	client   client.Client
	scheme   *runtime.Scheme
	clock    Clock
	deadline time.Duration
	events   events.EventRecorder
}

// New returns a Reconciler that reads and writes through c; scheme must
// know the gpuchaos kinds (for owner references).
func New(c client.Client, scheme *runtime.Scheme, opts Options) *Reconciler {
	r := &Reconciler{client: c, scheme: scheme, clock: opts.Clock, deadline: opts.StartingDeadline, events: opts.Events}
	if r.clock == nil {
		r.clock = realClock{}
	}
	if r.deadline <= 0 {
		r.deadline = DefaultStartingDeadline
	}
	return r
}

// Setup registers the Schedule controller with mgr: it reconciles
// Schedules, and a Schedule again whenever an Experiment it owns changes
// (a run finishing frees Forbid and prunes history).
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Events == nil {
		opts.Events = mgr.GetEventRecorder(EventSource)
	}
	r := New(mgr.GetClient(), mgr.GetScheme(), opts)
	return ctrl.NewControllerManagedBy(mgr).
		Named("schedule").
		For(&v1alpha1.Schedule{}).
		Owns(&v1alpha1.Experiment{}).
		Complete(r)
}

// Parse reads a Schedule's cron expression (five fields or a descriptor:
// @hourly, @every 2h) and time zone (IANA name; empty is UTC). The error
// names the field.
func Parse(spec v1alpha1.ScheduleSpec) (cron.Schedule, *time.Location, error) {
	loc, err := time.LoadLocation(spec.TimeZone)
	if err != nil || strings.EqualFold(spec.TimeZone, "Local") {
		// Local would be the controller's zone, which no one writing
		// the Schedule can know.
		return nil, nil, &specError{reason: ReasonInvalidTimeZone, msg: fmt.Sprintf("spec.timeZone: %q is not an IANA time zone name", spec.TimeZone)}
	}
	expr := strings.TrimSpace(spec.Schedule)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, nil, &specError{reason: ReasonInvalidSchedule, msg: "spec.schedule: a time zone goes in spec.timeZone, not in the expression"}
	}
	s, err := cron.ParseStandard(expr)
	if err != nil {
		return nil, nil, &specError{reason: ReasonInvalidSchedule, msg: fmt.Sprintf("spec.schedule: %q: %v", spec.Schedule, err)}
	}
	if every, ok := s.(cron.ConstantDelaySchedule); ok && every.Delay < MinInterval {
		return nil, nil, &specError{reason: ReasonInvalidSchedule, msg: fmt.Sprintf("spec.schedule: %q: runs must be at least %s apart", spec.Schedule, MinInterval)}
	}
	return s, loc, nil
}

// specError is a Schedule whose spec cannot be acted on, with the
// condition reason it is reported under.
type specError struct {
	reason, msg string
}

func (e *specError) Error() string { return e.msg }

// maxSteps bounds the walk from the last handled time to now: a minutely
// schedule untouched for a year is half a million steps, microseconds
// each; beyond the bound the walk restarts close to now.
const maxSteps = 1 << 20

// dueTimes returns the newest time of s after from and at or before now
// (zero if none), and the first time after now (zero if s never fires
// again).
func dueTimes(s cron.Schedule, loc *time.Location, from, now time.Time) (due, next time.Time) {
	t := from.In(loc)
	for range maxSteps {
		n := s.Next(t)
		if n.IsZero() || n.After(now) {
			return due, n
		}
		due, t = n, n
	}
	// Too many missed times to walk: only the newest could start, and
	// it is within a day of now for any schedule that fired this often.
	return dueTimes(s, loc, now.Add(-24*time.Hour), now)
}

// Reconcile brings one Schedule up to date at the clock's now: prunes
// history, starts or skips the due run, writes status and asks to be
// requeued at the next due time.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var sched v1alpha1.Schedule
	if err := r.client.Get(ctx, req.NamespacedName, &sched); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if sched.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // its runs go with it (owner references)
	}
	now := r.clock.Now()
	orig := sched.DeepCopy()

	runs, err := r.runs(ctx, &sched)
	if err != nil {
		return ctrl.Result{}, err
	}
	var active, succeeded, failed []*v1alpha1.Experiment
	for _, e := range runs {
		switch e.Status.Phase {
		case v1alpha1.PhaseSucceeded:
			succeeded = append(succeeded, e)
		case v1alpha1.PhaseFailed, v1alpha1.PhaseAborted:
			failed = append(failed, e)
		default:
			active = append(active, e)
		}
	}
	if err := r.prune(ctx, succeeded, limit(sched.Spec.SuccessfulHistoryLimit, DefaultSuccessfulHistoryLimit)); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.prune(ctx, failed, limit(sched.Spec.FailedHistoryLimit, DefaultFailedHistoryLimit)); err != nil {
		return ctrl.Result{}, err
	}

	s, loc, err := Parse(sched.Spec)
	if err != nil {
		var se *specError
		if !errors.As(err, &se) {
			return ctrl.Result{}, err
		}
		meta.SetStatusCondition(&sched.Status.Conditions, metav1.Condition{
			Type: v1alpha1.ScheduleConditionValid, Status: metav1.ConditionFalse,
			Reason: se.reason, Message: se.msg, ObservedGeneration: sched.Generation,
		})
		if !meta.IsStatusConditionFalse(orig.Status.Conditions, v1alpha1.ScheduleConditionValid) {
			r.event(&sched, corev1.EventTypeWarning, se.reason, "Parse", se.msg)
		}
		sched.Status.Active = names(active)
		// No requeue: only a spec change can fix it, and that is an event.
		return ctrl.Result{}, r.writeStatus(ctx, orig, &sched)
	}
	meta.SetStatusCondition(&sched.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ScheduleConditionValid, Status: metav1.ConditionTrue,
		Reason: ReasonValid, Message: "schedule and time zone read", ObservedGeneration: sched.Generation,
	})

	due, next := dueTimes(s, loc, handledUntil(&sched), now)
	switch {
	case due.IsZero():
	case slices.ContainsFunc(runs, func(e *v1alpha1.Experiment) bool { return e.Name == RunName(sched.Name, due) }):
		// Started by an earlier reconcile whose status write this one
		// does not see yet (a stale cache): it is not another run to
		// forbid or replace.
		sched.Status.LastScheduleTime = &metav1.Time{Time: due}
	case sched.Spec.Suspend:
		// Left unhandled: on resume it starts if still within the
		// deadline, as a CronJob's missed run does.
	case now.Sub(due) > r.deadline:
		logger.Info("skipping a run found past its starting deadline", "due", due, "deadline", r.deadline)
		r.event(&sched, corev1.EventTypeWarning, "Skipped", "Run", fmt.Sprintf("the run due at %s was found %s late, past the starting deadline of %s", due.UTC().Format(time.RFC3339), now.Sub(due).Round(time.Second), r.deadline))
		sched.Status.LastSkippedTime = &metav1.Time{Time: due}
	case len(active) > 0 && policy(&sched) == v1alpha1.ForbidConcurrent:
		logger.Info("skipping a run: concurrency policy Forbid and runs are active", "due", due, "active", names(active))
		r.event(&sched, corev1.EventTypeNormal, "Skipped", "Run", fmt.Sprintf("the run due at %s did not start: concurrency policy Forbid, and %s still running", due.UTC().Format(time.RFC3339), strings.Join(names(active), ", ")))
		sched.Status.LastSkippedTime = &metav1.Time{Time: due}
	default:
		if policy(&sched) == v1alpha1.ReplaceConcurrent {
			for _, e := range active {
				if err := r.client.Delete(ctx, e, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
					return ctrl.Result{}, fmt.Errorf("replace experiment %s: %w", e.Name, err)
				}
				logger.Info("deleted an active run to replace it", "experiment", e.Name)
				r.event(&sched, corev1.EventTypeNormal, "Replaced", "Run", "deleted the active run "+e.Name+" to start the next (concurrency policy Replace)")
			}
			active = nil
		}
		e, err := r.start(ctx, &sched, due)
		if err != nil {
			return ctrl.Result{}, err
		}
		active = append(active, e)
		sched.Status.LastScheduleTime = &metav1.Time{Time: due}
	}
	sched.Status.Active = names(active)
	if err := r.writeStatus(ctx, orig, &sched); err != nil {
		return ctrl.Result{}, err
	}
	if next.IsZero() {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: next.Sub(now)}, nil
}

// handledUntil is the newest due time already acted on, or the Schedule's
// creation: due times at or before it are never looked at again.
func handledUntil(s *v1alpha1.Schedule) time.Time {
	t := s.CreationTimestamp.Time
	for _, m := range []*metav1.Time{s.Status.LastScheduleTime, s.Status.LastSkippedTime} {
		if m != nil && m.After(t) {
			t = m.Time
		}
	}
	return t
}

func policy(s *v1alpha1.Schedule) v1alpha1.ConcurrencyPolicy {
	if s.Spec.ConcurrencyPolicy == "" {
		return v1alpha1.ForbidConcurrent
	}
	return s.Spec.ConcurrencyPolicy
}

func limit(p *int32, def int) int {
	if p == nil {
		return def
	}
	return int(*p)
}

// runs lists the Experiments this Schedule started: its label, and owned
// by this very object (a Schedule deleted and made again under the same
// name does not adopt the old one's runs).
func (r *Reconciler) runs(ctx context.Context, s *v1alpha1.Schedule) ([]*v1alpha1.Experiment, error) {
	var list v1alpha1.ExperimentList
	if err := r.client.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{v1alpha1.LabelSchedule: s.Name}); err != nil {
		return nil, fmt.Errorf("list experiments of schedule %s: %w", s.Name, err)
	}
	var out []*v1alpha1.Experiment
	for i := range list.Items {
		e := &list.Items[i]
		if owner := metav1.GetControllerOf(e); owner != nil && owner.UID == s.UID {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *v1alpha1.Experiment) int {
		return cmp.Or(scheduledAt(a).Compare(scheduledAt(b)), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

// scheduledAt is a run's due time, from its annotation, or its creation
// for one without.
func scheduledAt(e *v1alpha1.Experiment) time.Time {
	if t, err := time.Parse(time.RFC3339, e.Annotations[AnnotationScheduledAt]); err == nil {
		return t
	}
	return e.CreationTimestamp.Time
}

// prune deletes the oldest of finished (sorted oldest first) beyond keep.
func (r *Reconciler) prune(ctx context.Context, finished []*v1alpha1.Experiment, keep int) error {
	for _, e := range finished[:max(0, len(finished)-keep)] {
		if e.DeletionTimestamp != nil {
			continue
		}
		if err := r.client.Delete(ctx, e, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("prune experiment %s: %w", e.Name, err)
		}
	}
	return nil
}

// EventSource is the reporting controller of the Schedule's Events.
const EventSource = "gpuchaos-schedule"

func (r *Reconciler) event(s *v1alpha1.Schedule, typ, reason, action, note string) {
	if r.events != nil {
		r.events.Eventf(s, nil, typ, reason, action, "%s", note)
	}
}

// RunName is the name of the run of schedule due at t: the same due time
// always gives the same name, so a run is never started twice.
func RunName(schedule string, t time.Time) string {
	return schedule + "-" + strconv.FormatInt(t.Unix()/60, 10)
}

// start creates the run due at due. One that exists already (a previous
// reconcile created it and then failed to write status) is the run.
func (r *Reconciler) start(ctx context.Context, s *v1alpha1.Schedule, due time.Time) (*v1alpha1.Experiment, error) {
	e := &v1alpha1.Experiment{
		ObjectMeta: metav1.ObjectMeta{
			Name:        RunName(s.Name, due),
			Namespace:   s.Namespace,
			Labels:      map[string]string{v1alpha1.LabelSchedule: s.Name},
			Annotations: map[string]string{AnnotationScheduledAt: due.UTC().Format(time.RFC3339)},
		},
		Spec: *s.Spec.Experiment.DeepCopy(),
	}
	if err := controllerutil.SetControllerReference(s, e, r.scheme); err != nil {
		return nil, fmt.Errorf("own experiment %s: %w", e.Name, err)
	}
	if err := r.client.Create(ctx, e); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("start experiment %s: %w", e.Name, err)
		}
	} else {
		log.FromContext(ctx).Info("started a run", "experiment", e.Name, "due", due)
		r.event(s, corev1.EventTypeNormal, "Started", "Run", fmt.Sprintf("started Experiment %s, due at %s", e.Name, due.UTC().Format(time.RFC3339)))
	}
	return e, nil
}

func (r *Reconciler) writeStatus(ctx context.Context, orig, s *v1alpha1.Schedule) error {
	if err := r.client.Status().Patch(ctx, s, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("write status of schedule %s: %w", s.Name, err)
	}
	return nil
}

func names(es []*v1alpha1.Experiment) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.Name)
	}
	slices.Sort(out)
	return out
}
