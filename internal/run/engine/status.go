package engine

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
)

// An Experiment's status is the record of a run the controller made: the
// controller writes it from the engine's Record and `gpuchaos run --target
// k8s` reads a Record back from it, so both directions live here and a
// cluster run prints what a local one does. The status keeps the verdicts
// (without their subjects, values or clearing times), the timeline and how
// the run ended; the rest of a Record stays with the controller.

// StatusVerdicts returns rec's verdicts as an Experiment's status holds
// them, and how many passed of how many ("2/3").
func StatusVerdicts(rec *Record) ([]v1alpha1.VerdictStatus, string) {
	out := make([]v1alpha1.VerdictStatus, 0, len(rec.Verdicts))
	passed := 0
	for _, v := range rec.Verdicts {
		vs := v1alpha1.VerdictStatus{Name: v.Name, Detector: v.Detector, Result: v.Verdict, Detail: v.Detail,
			Within: metav1.Duration{Duration: time.Duration(v.Within * float64(time.Second))}, Passed: v.Verdict == Pass}
		if v.TTDSeconds != nil {
			vs.TimeToDetect = &metav1.Duration{Duration: time.Duration(*v.TTDSeconds * float64(time.Second)).Round(time.Millisecond)}
		}
		if vs.Passed {
			passed++
		}
		out = append(out, vs)
	}
	return out, fmt.Sprintf("%d/%d", passed, len(out))
}

// StatusEvent returns ev as an Experiment's status holds it in its
// timeline.
func StatusEvent(ev Event) v1alpha1.EventStatus {
	return v1alpha1.EventStatus{Time: metav1.NewTime(ev.Time), Kind: ev.Kind, Name: ev.Name, Detail: ev.Detail}
}

// StatusRecord rebuilds the run record the other targets print from an
// Experiment's status, so the table, the JSON and the exit code of a
// cluster run are those of a local one. Offsets count from the status's
// start time.
func StatusRecord(exp *v1alpha1.Experiment) *Record {
	st := exp.Status
	rec := &Record{Experiment: exp, Target: string(target.K8s)}
	if st.StartTime != nil {
		rec.StartedAt, rec.InjectedAt = st.StartTime.Time, st.StartTime.Time
	}
	if st.CompletionTime != nil {
		rec.EndedAt = st.CompletionTime.Time
	}
	for _, v := range st.Verdicts {
		ev := Verdict{Name: v.Name, Detector: v.Detector, Verdict: v.Result, Within: v.Within.Seconds(), Detail: v.Detail}
		if v.TimeToDetect != nil {
			s := v.TimeToDetect.Seconds()
			ev.TTDSeconds = &s
		}
		rec.Verdicts = append(rec.Verdicts, ev)
	}
	for _, e := range st.Events {
		var offset float64
		if st.StartTime != nil {
			offset = e.Time.Sub(st.StartTime.Time).Seconds()
		}
		rec.Timeline = append(rec.Timeline, Event{Time: e.Time.Time, Offset: offset, Kind: e.Kind, Name: e.Name, Detail: e.Detail})
	}
	switch st.Phase {
	case v1alpha1.PhaseAborted:
		rec.Aborted = "aborted"
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionRecovered); c != nil {
			rec.Aborted = c.Message
		}
	case v1alpha1.PhaseFailed:
		msg := "failed"
		for _, c := range st.Conditions {
			if c.Status == metav1.ConditionFalse && c.Message != "" {
				msg = c.Message
				break
			}
		}
		rec.Err = errors.New(msg)
	}
	return rec
}
