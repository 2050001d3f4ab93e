package schedule_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/kube/controller/schedule"
)

func TestMain(m *testing.M) {
	// controller-runtime warns after 30 s when no logger is set.
	log.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// fakeClock is the time the reconciler reads; tests move it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// fixture is one Schedule on the real API server, in a namespace of its
// own, and a reconciler reading the fake clock.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	c     client.Client
	clock *fakeClock
	r     *schedule.Reconciler
	key   client.ObjectKey
}

// experimentSpec is a real example experiment's spec, the run every test
// schedule starts.
func experimentSpec(t *testing.T) v1alpha1.ExperimentSpec {
	t.Helper()
	e, err := v1alpha1.LoadFile("../../../../examples/thermal-throttle.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return e.Spec
}

var nsCount int

// newFixture creates the Schedule spec describes and sets the clock to its
// creation time as the API server stamped it.
func newFixture(t *testing.T, env *kubetest.Env, spec v1alpha1.ScheduleSpec) *fixture {
	t.Helper()
	ctx := context.Background()
	nsCount++
	ns := fmt.Sprintf("s%d", nsCount)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	spec.Experiment = experimentSpec(t)
	s := &v1alpha1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: "chaos", Namespace: ns}, Spec: spec}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatalf("create schedule: %v", err)
	}
	clock := &fakeClock{t: s.CreationTimestamp.Time}
	return &fixture{
		t: t, ctx: ctx, c: env.Client, clock: clock,
		r:   schedule.New(env.Client, env.Client.Scheme(), schedule.Options{Clock: clock}),
		key: client.ObjectKeyFromObject(s),
	}
}

// reconcile runs one reconcile at the clock's now and returns how long
// the reconciler asked to wait.
func (f *fixture) reconcile() time.Duration {
	f.t.Helper()
	res, err := f.r.Reconcile(f.ctx, ctrl.Request{NamespacedName: f.key})
	if err != nil {
		f.t.Fatalf("reconcile at %s: %v", f.clock.Now().Format(time.RFC3339), err)
	}
	return res.RequeueAfter
}

func (f *fixture) schedule() *v1alpha1.Schedule {
	f.t.Helper()
	var s v1alpha1.Schedule
	if err := f.c.Get(f.ctx, f.key, &s); err != nil {
		f.t.Fatal(err)
	}
	return &s
}

func (f *fixture) update(mutate func(*v1alpha1.ScheduleSpec)) {
	f.t.Helper()
	s := f.schedule()
	mutate(&s.Spec)
	if err := f.c.Update(f.ctx, s); err != nil {
		f.t.Fatal(err)
	}
}

// runs returns the names of the Experiments in the fixture's namespace.
func (f *fixture) runs() []string {
	f.t.Helper()
	var list v1alpha1.ExperimentList
	if err := f.c.List(f.ctx, &list, client.InNamespace(f.key.Namespace)); err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Name)
	}
	slices.Sort(out)
	return out
}

func (f *fixture) finish(name string, phase v1alpha1.ExperimentPhase) {
	f.t.Helper()
	var e v1alpha1.Experiment
	if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.key.Namespace, Name: name}, &e); err != nil {
		f.t.Fatal(err)
	}
	e.Status.Phase = phase
	if err := f.c.Status().Update(f.ctx, &e); err != nil {
		f.t.Fatalf("set %s to %s: %v", name, phase, err)
	}
}

// dueAfter returns the first time of expr (UTC) after t.
func dueAfter(t *testing.T, expr string, after time.Time) time.Time {
	t.Helper()
	s, loc, err := schedule.Parse(v1alpha1.ScheduleSpec{Schedule: expr})
	if err != nil {
		t.Fatal(err)
	}
	return s.Next(after.In(loc))
}

func names(ns ...string) []string {
	slices.Sort(ns)
	if len(ns) == 0 {
		return nil
	}
	return ns
}

func eq(a, b []string) bool { return slices.Equal(names(a...), names(b...)) }

// TestScheduleOnRealAPIServer runs the reconciler against a real
// kube-apiserver with the CRDs installed, moving a fake clock: every
// object it reads and writes is the API server's.
func TestScheduleOnRealAPIServer(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	const every5 = "*/5 * * * *"

	t.Run("starts one run at each due time and requeues for the next", func(t *testing.T) {
		f := newFixture(t, env, v1alpha1.ScheduleSpec{Schedule: every5})
		due1 := dueAfter(t, every5, f.clock.Now())
		if wait := f.reconcile(); wait != due1.Sub(f.clock.Now()) {
			t.Errorf("before the first due time: requeue after %s, want %s", wait, due1.Sub(f.clock.Now()))
		}
		if got := f.runs(); len(got) != 0 {
			t.Fatalf("runs before the due time: %v", got)
		}
		f.clock.Set(due1.Add(30 * time.Second))
		wait := f.reconcile()
		due2 := dueAfter(t, every5, due1)
		if want := due2.Sub(f.clock.Now()); wait != want {
			t.Errorf("requeue after %s, want %s (the next due time)", wait, want)
		}
		run1 := schedule.RunName("chaos", due1)
		if got := f.runs(); !eq(got, []string{run1}) {
			t.Fatalf("runs %v, want [%s]", got, run1)
		}
		var e v1alpha1.Experiment
		if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.key.Namespace, Name: run1}, &e); err != nil {
			t.Fatal(err)
		}
		s := f.schedule()
		if e.Labels[v1alpha1.LabelSchedule] != "chaos" {
			t.Errorf("label %s = %q, want chaos", v1alpha1.LabelSchedule, e.Labels[v1alpha1.LabelSchedule])
		}
		if o := metav1.GetControllerOf(&e); o == nil || o.UID != s.UID || o.Kind != v1alpha1.KindSchedule {
			t.Errorf("controller of the run = %+v, want the Schedule %s", o, s.UID)
		}
		if !equality.Semantic.DeepEqual(e.Spec, s.Spec.Experiment) {
			t.Errorf("run spec differs from spec.experiment")
		}
		if s.Status.LastScheduleTime == nil || !s.Status.LastScheduleTime.Equal(&metav1.Time{Time: due1}) {
			t.Errorf("lastScheduleTime %v, want %s", s.Status.LastScheduleTime, due1)
		}
		if !eq(s.Status.Active, []string{run1}) {
			t.Errorf("active %v, want [%s]", s.Status.Active, run1)
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ScheduleConditionValid); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("condition Valid = %+v, want True", c)
		}
		// The same due time, reconciled again, starts nothing more.
		f.reconcile()
		if got := f.runs(); !eq(got, []string{run1}) {
			t.Errorf("after a second reconcile: runs %v, want [%s]", got, run1)
		}
	})

	// Each policy with run 1 still active when run 2 is due.
	policies := []struct {
		policy     v1alpha1.ConcurrencyPolicy
		wantRuns   func(run1, run2 string) []string
		wantActive func(run1, run2 string) []string
		skipped    bool
	}{
		{v1alpha1.ForbidConcurrent, func(r1, _ string) []string { return []string{r1} }, func(r1, _ string) []string { return []string{r1} }, true},
		{v1alpha1.ReplaceConcurrent, func(_, r2 string) []string { return []string{r2} }, func(_, r2 string) []string { return []string{r2} }, false},
		{v1alpha1.AllowConcurrent, func(r1, r2 string) []string { return []string{r1, r2} }, func(r1, r2 string) []string { return []string{r1, r2} }, false},
	}
	for _, tc := range policies {
		t.Run("concurrency "+string(tc.policy), func(t *testing.T) {
			f := newFixture(t, env, v1alpha1.ScheduleSpec{Schedule: every5, ConcurrencyPolicy: tc.policy})
			due1 := dueAfter(t, every5, f.clock.Now())
			due2 := dueAfter(t, every5, due1)
			run1, run2 := schedule.RunName("chaos", due1), schedule.RunName("chaos", due2)
			f.clock.Set(due1)
			f.reconcile()
			f.finish(run1, v1alpha1.PhaseRunning)
			f.clock.Set(due2.Add(time.Second))
			f.reconcile()
			if got := f.runs(); !eq(got, tc.wantRuns(run1, run2)) {
				t.Errorf("runs %v, want %v", got, tc.wantRuns(run1, run2))
			}
			s := f.schedule()
			if !eq(s.Status.Active, tc.wantActive(run1, run2)) {
				t.Errorf("active %v, want %v", s.Status.Active, tc.wantActive(run1, run2))
			}
			gotSkip := s.Status.LastSkippedTime != nil && s.Status.LastSkippedTime.Time.Equal(due2)
			if gotSkip != tc.skipped {
				t.Errorf("lastSkippedTime %v, want skipped=%v at %s", s.Status.LastSkippedTime, tc.skipped, due2)
			}
			if tc.policy != v1alpha1.ForbidConcurrent {
				return
			}
			// A skipped due time stays skipped when the run it waited
			// on finishes; the next one starts.
			f.finish(run1, v1alpha1.PhaseSucceeded)
			f.reconcile()
			if got := f.runs(); !eq(got, []string{run1}) {
				t.Errorf("after run 1 finished: runs %v, want only %s (due time %s was skipped)", got, run1, due2)
			}
			if s := f.schedule(); len(s.Status.Active) != 0 {
				t.Errorf("active %v after run 1 finished, want none", s.Status.Active)
			}
			due3 := dueAfter(t, every5, due2)
			f.clock.Set(due3)
			f.reconcile()
			if got, want := f.runs(), []string{run1, schedule.RunName("chaos", due3)}; !eq(got, want) {
				t.Errorf("at the next due time: runs %v, want %v", got, want)
			}
		})
	}

	// A reconcile that reads the Schedule from a stale cache sees a due
	// time as unhandled although its run exists: that run is the one for
	// this due time, not a concurrent one to replace or forbid.
	for _, p := range []v1alpha1.ConcurrencyPolicy{v1alpha1.ReplaceConcurrent, v1alpha1.ForbidConcurrent} {
		t.Run("stale status does not replace or skip its own run "+string(p), func(t *testing.T) {
			f := newFixture(t, env, v1alpha1.ScheduleSpec{Schedule: every5, ConcurrencyPolicy: p})
			due1 := dueAfter(t, every5, f.clock.Now())
			f.clock.Set(due1)
			f.reconcile()
			run1 := schedule.RunName("chaos", due1)
			var before v1alpha1.Experiment
			if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.key.Namespace, Name: run1}, &before); err != nil {
				t.Fatal(err)
			}
			s := f.schedule()
			s.Status.LastScheduleTime = nil
			if err := f.c.Status().Update(f.ctx, s); err != nil {
				t.Fatal(err)
			}
			f.reconcile()
			var after v1alpha1.Experiment
			if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.key.Namespace, Name: run1}, &after); err != nil {
				t.Fatalf("run %s after the stale reconcile: %v", run1, err)
			}
			if after.UID != before.UID || after.DeletionTimestamp != nil {
				t.Errorf("run %s was replaced or is being deleted", run1)
			}
			s = f.schedule()
			if s.Status.LastSkippedTime != nil || s.Status.LastScheduleTime == nil || !s.Status.LastScheduleTime.Time.Equal(due1) {
				t.Errorf("status %+v, want lastScheduleTime %s and nothing skipped", s.Status, due1)
			}
		})
	}

	t.Run("suspend starts nothing; resuming within the deadline starts the missed run", func(t *testing.T) {
		f := newFixture(t, env, v1alpha1.ScheduleSpec{Schedule: every5, Suspend: true})
		due1 := dueAfter(t, every5, f.clock.Now())
		f.clock.Set(due1.Add(time.Minute))
		f.reconcile()
		if got := f.runs(); len(got) != 0 {
			t.Fatalf("suspended schedule started %v", got)
		}
		if s := f.schedule(); s.Status.LastScheduleTime != nil || s.Status.LastSkippedTime != nil {
			t.Errorf("suspended: status moved: %+v", s.Status)
		}
		f.update(func(s *v1alpha1.ScheduleSpec) { s.Suspend = false })
		f.reconcile()
		if got, want := f.runs(), []string{schedule.RunName("chaos", due1)}; !eq(got, want) {
			t.Errorf("resumed 1m after the due time: runs %v, want %v", got, want)
		}
	})

	t.Run("suspend past the starting deadline skips the missed run", func(t *testing.T) {
		f := newFixture(t, env, v1alpha1.ScheduleSpec{Schedule: "0 * * * *", Suspend: true})
		due1 := dueAfter(t, "0 * * * *", f.clock.Now())
		f.clock.Set(due1.Add(schedule.DefaultStartingDeadline + time.Minute))
		f.reconcile()
		f.update(func(s *v1alpha1.ScheduleSpec) { s.Suspend = false })
		f.reconcile()
		if got := f.runs(); len(got) != 0 {
			t.Errorf("resumed %s after the due time: runs %v, want none", schedule.DefaultStartingDeadline+time.Minute, got)
		}
		if s := f.schedule(); s.Status.LastSkippedTime == nil || !s.Status.LastSkippedTime.Time.Equal(due1) {
			t.Errorf("lastSkippedTime %v, want %s", s.Status.LastSkippedTime, due1)
		}
	})

	t.Run("history keeps the newest finished runs within the limits", func(t *testing.T) {
		two := int32(2)
		f := newFixture(t, env, v1alpha1.ScheduleSpec{Schedule: every5, ConcurrencyPolicy: v1alpha1.AllowConcurrent, SuccessfulHistoryLimit: &two})
		phases := []v1alpha1.ExperimentPhase{
			v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseSucceeded, v1alpha1.PhaseAborted,
			v1alpha1.PhaseSucceeded, v1alpha1.PhaseSucceeded, v1alpha1.PhaseRunning, "",
		}
		due := f.clock.Now()
		var runs []string
		for range phases {
			due = dueAfter(t, every5, due)
			f.clock.Set(due)
			f.reconcile()
			runs = append(runs, schedule.RunName("chaos", due))
		}
		if got := f.runs(); !eq(got, runs) {
			t.Fatalf("runs %v before any finished, want %v", got, runs)
		}
		for i, p := range phases {
			if p != "" {
				f.finish(runs[i], p)
			}
		}
		f.reconcile()
		// Succeeded 0,2,4,5 keep 4,5 (limit 2); failed 1 and aborted 3
		// keep 3 (default 1); 6 (Running) and 7 (no phase) are active.
		want := []string{runs[3], runs[4], runs[5], runs[6], runs[7]}
		if got := f.runs(); !eq(got, want) {
			t.Errorf("after pruning: runs %v, want %v", got, want)
		}
		if s := f.schedule(); !eq(s.Status.Active, []string{runs[6], runs[7]}) {
			t.Errorf("active %v, want %v", s.Status.Active, []string{runs[6], runs[7]})
		}
		zero := int32(0)
		f.update(func(s *v1alpha1.ScheduleSpec) { s.SuccessfulHistoryLimit, s.FailedHistoryLimit = &zero, &zero })
		f.reconcile()
		if got := f.runs(); !eq(got, []string{runs[6], runs[7]}) {
			t.Errorf("limits 0: runs %v, want only the active %v", got, []string{runs[6], runs[7]})
		}
	})

	t.Run("time zone", func(t *testing.T) {
		f := newFixture(t, env, v1alpha1.ScheduleSpec{Schedule: "0 3 * * *", TimeZone: "Asia/Tokyo"})
		// 03:00 in Tokyo (UTC+9, no daylight saving) is 18:00 UTC.
		now := f.clock.Now().UTC()
		due := time.Date(now.Year(), now.Month(), now.Day(), 18, 0, 0, 0, time.UTC)
		if !due.After(now) {
			due = due.AddDate(0, 0, 1)
		}
		f.clock.Set(due.Add(-time.Second))
		if wait := f.reconcile(); wait != time.Second {
			t.Errorf("a second before 03:00 Tokyo: requeue after %s, want 1s", wait)
		}
		f.clock.Set(due)
		f.reconcile()
		if got, want := f.runs(), []string{schedule.RunName("chaos", due)}; !eq(got, want) {
			t.Errorf("at %s: runs %v, want %v", due, got, want)
		}
	})

	bad := []struct {
		name     string
		spec     v1alpha1.ScheduleSpec
		reason   string
		contains string
	}{
		{"not cron", v1alpha1.ScheduleSpec{Schedule: "every tuesday"}, schedule.ReasonInvalidSchedule, "spec.schedule"},
		{"four fields", v1alpha1.ScheduleSpec{Schedule: "* * * *"}, schedule.ReasonInvalidSchedule, "spec.schedule"},
		{"minute 60", v1alpha1.ScheduleSpec{Schedule: "60 * * * *"}, schedule.ReasonInvalidSchedule, "spec.schedule"},
		{"every 10s", v1alpha1.ScheduleSpec{Schedule: "@every 10s"}, schedule.ReasonInvalidSchedule, "at least 1m"},
		{"zone in the expression", v1alpha1.ScheduleSpec{Schedule: "CRON_TZ=UTC 0 3 * * *"}, schedule.ReasonInvalidSchedule, "spec.timeZone"},
		{"unknown zone", v1alpha1.ScheduleSpec{Schedule: every5, TimeZone: "Mars/Olympus_Mons"}, schedule.ReasonInvalidTimeZone, "spec.timeZone"},
		{"Local", v1alpha1.ScheduleSpec{Schedule: every5, TimeZone: "Local"}, schedule.ReasonInvalidTimeZone, "spec.timeZone"},
	}
	for _, tc := range bad {
		t.Run("bad schedule "+tc.name, func(t *testing.T) {
			f := newFixture(t, env, tc.spec)
			f.clock.Set(f.clock.Now().Add(48 * time.Hour))
			if wait := f.reconcile(); wait != 0 {
				t.Errorf("requeue after %s, want none (only a spec change helps)", wait)
			}
			c := meta.FindStatusCondition(f.schedule().Status.Conditions, v1alpha1.ScheduleConditionValid)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tc.reason || !strings.Contains(c.Message, tc.contains) {
				t.Fatalf("condition Valid = %+v, want False, reason %s, message naming %q", c, tc.reason, tc.contains)
			}
			if got := f.runs(); len(got) != 0 {
				t.Errorf("a bad schedule started %v", got)
			}
			// Fixed, it is valid again and runs from then on.
			f.update(func(s *v1alpha1.ScheduleSpec) { s.Schedule, s.TimeZone = every5, "" })
			f.reconcile()
			if c := meta.FindStatusCondition(f.schedule().Status.Conditions, v1alpha1.ScheduleConditionValid); c == nil || c.Status != metav1.ConditionTrue {
				t.Errorf("after the fix: condition Valid = %+v, want True", c)
			}
		})
	}
}

// TestSetupWithManager registers the controller with a real manager, as
// the operator does, and checks it reacts to the API: a Schedule is
// reconciled on creation and on change, and a run finishing (an
// Experiment it owns changing) updates the Schedule's status.
func TestSetupWithManager(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 kubetest.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Now()}
	if err := schedule.Setup(mgr, schedule.Options{Clock: clock}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	c := env.Client
	s := &v1alpha1.Schedule{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "default"},
		Spec:       v1alpha1.ScheduleSpec{Schedule: "0 3 * * *", Experiment: experimentSpec(t)},
	}
	clock.Set(time.Now()) // before creation: nothing is due
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	get := func() *v1alpha1.Schedule {
		var got v1alpha1.Schedule
		if err := c.Get(ctx, client.ObjectKeyFromObject(s), &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}
	testutil.Eventually(t, 60*time.Second, "the new Schedule to be reconciled (condition Valid)", func() bool {
		return meta.IsStatusConditionTrue(get().Status.Conditions, v1alpha1.ScheduleConditionValid)
	})
	due := dueAfter(t, "0 3 * * *", get().CreationTimestamp.Time)
	clock.Set(due.Add(time.Second))
	// A change to the Schedule is an event; the reconcile it triggers
	// reads the moved clock.
	cur := get()
	cur.Annotations = map[string]string{"test": "poke"}
	if err := c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	run := client.ObjectKey{Namespace: "default", Name: schedule.RunName("nightly", due)}
	var e v1alpha1.Experiment
	testutil.Eventually(t, 60*time.Second, "the run "+run.Name, func() bool {
		err := c.Get(ctx, run, &e)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil && slices.Equal(get().Status.Active, []string{run.Name})
	})
	testutil.Eventually(t, 60*time.Second, "a Started Event on the Schedule naming "+run.Name, func() bool {
		var l eventsv1.EventList
		if err := c.List(ctx, &l, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(l.Items, func(ev eventsv1.Event) bool {
			return ev.Regarding.UID == s.UID && ev.Reason == "Started" && ev.Type == corev1.EventTypeNormal &&
				strings.Contains(ev.Note, run.Name) && ev.ReportingController == schedule.EventSource
		})
	})
	e.Status.Phase = v1alpha1.PhaseSucceeded
	if err := c.Status().Update(ctx, &e); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "status.active to empty once the run succeeded", func() bool {
		return len(get().Status.Active) == 0
	})
}

// TestScheduleNameLength: the API server refuses a Schedule whose runs'
// names would be longer than an Experiment's may be.
func TestScheduleNameLength(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	for _, tt := range []struct {
		n  int
		ok bool
	}{{54, true}, {55, false}} {
		s := &v1alpha1.Schedule{
			ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("s", tt.n), Namespace: "default"},
			Spec:       v1alpha1.ScheduleSpec{Schedule: "0 3 * * *", Experiment: experimentSpec(t)},
		}
		err := env.Client.Create(context.Background(), s)
		switch {
		case tt.ok && err != nil:
			t.Errorf("name of %d: %v", tt.n, err)
		case !tt.ok && (err == nil || !strings.Contains(err.Error(), "at most 54 characters")):
			t.Errorf("name of %d: err %v, want the 54-character rule", tt.n, err)
		}
		if tt.ok {
			// The longest name's runs are valid Experiment names.
			run := schedule.RunName(s.Name, time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
			if len(run) > 63 {
				t.Errorf("run name %q is %d characters", run, len(run))
			}
		}
	}
}
