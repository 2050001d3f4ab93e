package engine_test

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
)

// TestStatusRoundTrip writes a Record into an Experiment's status as the
// controller does and reads it back as `gpuchaos run --target k8s` does:
// what the status keeps comes back as it was, and the phase and
// conditions the controller chose say how the run ended.
func TestStatusRoundTrip(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ttd := 12.5
	pass := engine.Verdict{Name: "xid-seen", Detector: "dcgm-xid-errors", Within: 60, Verdict: engine.Pass, TTDSeconds: &ttd, Detail: "fired"}
	missed := engine.Verdict{Name: "slow", Within: 120, Verdict: engine.Missed, Detail: "never held"}
	timeline := []engine.Event{
		{Time: start.Add(-2 * time.Second), Offset: -2, Kind: "steady-state", Name: "up"},
		{Time: start, Kind: "inject", Name: "hardware.xid", Detail: "n1/gpu0"},
		{Time: start.Add(12500 * time.Millisecond), Offset: 12.5, Kind: "detect", Name: "xid-seen"},
	}
	for _, tc := range []struct {
		name       string
		rec        engine.Record
		phase      v1alpha1.ExperimentPhase
		conditions []metav1.Condition
		passed     string
		aborted    string
		err        string
	}{
		{name: "passed", rec: engine.Record{Verdicts: []engine.Verdict{pass}, Timeline: timeline},
			phase: v1alpha1.PhaseSucceeded, passed: "1/1"},
		{name: "one missed", rec: engine.Record{Verdicts: []engine.Verdict{pass, missed}, Timeline: timeline},
			phase: v1alpha1.PhaseFailed, passed: "1/2", err: "failed"},
		{name: "failed with a reason", rec: engine.Record{Verdicts: []engine.Verdict{missed}},
			phase: v1alpha1.PhaseFailed, passed: "0/1",
			conditions: []metav1.Condition{
				{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Message: "1 injections on 1 nodes"},
				{Type: v1alpha1.ConditionRecovered, Status: metav1.ConditionFalse, Message: "recover hardware.xid: left in the ledger"},
			},
			err: "recover hardware.xid: left in the ledger"},
		{name: "aborted", rec: engine.Record{Timeline: timeline[:2]}, phase: v1alpha1.PhaseAborted, passed: "0/0",
			conditions: []metav1.Condition{{Type: v1alpha1.ConditionRecovered, Status: metav1.ConditionTrue, Message: "aborted; every NodeFault recovered"}},
			aborted:    "aborted; every NodeFault recovered"},
		{name: "aborted without a recovery condition", rec: engine.Record{}, phase: v1alpha1.PhaseAborted, passed: "0/0", aborted: "aborted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := tc.rec
			rec.StartedAt, rec.InjectedAt, rec.EndedAt = start, start, start.Add(3*time.Minute)
			exp := &v1alpha1.Experiment{}
			// The controller stamps the run's start and end itself; the
			// rest of the status comes from the record.
			exp.Status.StartTime, exp.Status.CompletionTime = &metav1.Time{Time: rec.StartedAt}, &metav1.Time{Time: rec.EndedAt}
			exp.Status.Verdicts, exp.Status.Passed = engine.StatusVerdicts(&rec)
			for _, ev := range rec.Timeline {
				exp.Status.Events = append(exp.Status.Events, engine.StatusEvent(ev))
			}
			exp.Status.Phase, exp.Status.Conditions = tc.phase, tc.conditions
			if exp.Status.Passed != tc.passed {
				t.Errorf("status passed = %q, want %q", exp.Status.Passed, tc.passed)
			}

			got := engine.StatusRecord(exp)
			if got.Experiment != exp || got.Target != "k8s" {
				t.Errorf("record of experiment %p on %q, want %p on k8s", got.Experiment, got.Target, exp)
			}
			if !got.StartedAt.Equal(rec.StartedAt) || !got.InjectedAt.Equal(rec.InjectedAt) || !got.EndedAt.Equal(rec.EndedAt) {
				t.Errorf("times %v, %v, %v; want %v, %v, %v", got.StartedAt, got.InjectedAt, got.EndedAt, rec.StartedAt, rec.InjectedAt, rec.EndedAt)
			}
			if !reflect.DeepEqual(got.Verdicts, rec.Verdicts) {
				t.Errorf("verdicts\n got %+v\nwant %+v", got.Verdicts, rec.Verdicts)
			}
			if !reflect.DeepEqual(got.Timeline, rec.Timeline) {
				t.Errorf("timeline\n got %+v\nwant %+v", got.Timeline, rec.Timeline)
			}
			if got.Aborted != tc.aborted {
				t.Errorf("aborted %q, want %q", got.Aborted, tc.aborted)
			}
			if (got.Err == nil) != (tc.err == "") || (got.Err != nil && got.Err.Error() != tc.err) {
				t.Errorf("err %v, want %q", got.Err, tc.err)
			}
		})
	}
}
