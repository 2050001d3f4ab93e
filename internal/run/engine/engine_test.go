package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
	"github.com/gpuchaos/gpuchaos/internal/run/target/twintarget"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// warmTwin returns a default twin that has run fault-free long enough for
// the detectors' baselines to exist.
func warmTwin(t *testing.T, seed uint64) *twin.Twin {
	t.Helper()
	tw, err := twin.New(twin.Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Sleep(context.Background(), 20*time.Minute); err != nil {
		t.Fatal(err)
	}
	return tw
}

func load(t *testing.T, doc string) *v1alpha1.Experiment {
	t.Helper()
	exp, err := v1alpha1.Load([]byte(doc), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exp.Default()
	return exp
}

const xid79 = `
apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata: {name: xid-79}
spec:
  selector: {nodes: [gpu-node-0], gpus: ["3"], mode: one}
  faults: [{id: hardware.fallen-off-bus}]
  duration: 15m
  steadyState:
    - name: job-running
      probe: {threshold: {metric: gpuchaos_job_up, op: "==", value: 1}}
  expectations:
    - {detector: kmsg-xid, within: 1m}
    - {detector: dcgm-gpu-missing, within: 2m}
    - {detector: dcgm-ecc-dbe, within: 5m}
    - {detector: node-unschedulable, within: 5m}
`

// TestFallenOffBus is the scenario of the README: a GPU falls off the bus;
// the kernel-log watcher sees it at once, the GPU-count alert once the
// scrape marks the vanished series stale and its for: 1m has passed, a rule
// on an opt-in ECC counter never fires, and nobody cordons the node.
func TestFallenOffBus(t *testing.T) {
	tw := warmTwin(t, 1)
	led := &ledger.Memory{}
	rec, err := engine.New(engine.Options{Target: twintarget.New(tw), Ledger: led}).Run(context.Background(), load(t, xid79))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"kmsg-xid": engine.Pass, "dcgm-gpu-missing": engine.Pass, "dcgm-ecc-dbe": engine.Missed, "node-unschedulable": engine.Missed}
	for _, v := range rec.Verdicts {
		if v.Verdict != want[v.Name] {
			t.Errorf("%s: verdict %s, want %s (%s)", v.Name, v.Verdict, want[v.Name], v.Detail)
		}
	}
	kmsg := rec.Verdicts[0]
	if kmsg.TTDSeconds == nil || *kmsg.TTDSeconds > 15 {
		t.Errorf("kmsg-xid time to detect = %v, want within one poll", kmsg.TTDSeconds)
	}
	// Stale at the next 30s scrape, then 1m of for: at least 60s, at most
	// 60s + one scrape + one evaluation step.
	if missing := rec.Verdicts[1]; missing.TTDSeconds == nil || *missing.TTDSeconds < 60 || *missing.TTDSeconds > 105 {
		t.Errorf("dcgm-gpu-missing time to detect %v s, want 60..105", missing.TTDSeconds)
	}
	if got := tw.Active(); len(got) != 0 {
		t.Errorf("still applied on the twin after the run: %v", got)
	}
	if p, _ := led.Pending(context.Background()); len(p) != 0 {
		t.Errorf("ledger still holds %v", p)
	}
	if rec.TTRSeconds == nil {
		t.Error("no time to recover: the detectors that fired did not clear after recovery")
	}
	if !strings.Contains(rec.Verdicts[0].Detail, "NVRM: Xid (PCI:") {
		t.Errorf("kmsg-xid detail %q does not quote the line", rec.Verdicts[0].Detail)
	}
	kinds := map[string]int{}
	for _, ev := range rec.Timeline {
		kinds[ev.Kind]++
	}
	for _, k := range []string{"steady-state", "inject", "detect", "recover", "clear"} {
		if kinds[k] == 0 {
			t.Errorf("timeline has no %s event: %v", k, kinds)
		}
	}
}

// TestDeterministic runs the same experiment twice on twins with the same
// seed and compares the whole record.
func TestDeterministic(t *testing.T) {
	var out [2]string
	for i := range out {
		rec, err := engine.New(engine.Options{Target: twintarget.New(warmTwin(t, 42)), Seed: 42}).Run(context.Background(), load(t, xid79))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(rec)
		out[i] = string(b)
	}
	if out[0] != out[1] {
		t.Error("two runs with the same seed differ")
	}
}

// TestAbort ends the fault window as soon as the job is seen down, and
// recovers.
func TestAbort(t *testing.T) {
	tw := warmTwin(t, 1)
	exp := load(t, strings.Replace(xid79, "  expectations:", `  abortWhen:
    - name: job-down
      probe: {detector: job-down}
  expectations:`, 1))
	rec, err := engine.New(engine.Options{Target: twintarget.New(tw), RecoveryWindow: -1}).Run(context.Background(), exp)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rec.Aborted, "job-down holds") {
		t.Fatalf("aborted = %q", rec.Aborted)
	}
	if d := rec.RecoveredAt.Sub(rec.InjectedAt); d > 3*time.Minute {
		t.Errorf("recovered %s after injection; the abort should cut the 15m window short", d)
	}
	if got := tw.Active(); len(got) != 0 {
		t.Errorf("still applied after abort: %v", got)
	}
}

// interrupting cancels the run's context once the twin has advanced past a
// point, as Ctrl-C would.
type interrupting struct {
	*twintarget.Target
	at     time.Time
	cancel context.CancelFunc
}

func (i interrupting) Sleep(ctx context.Context, d time.Duration) error {
	err := i.Target.Sleep(ctx, d)
	if i.Now().After(i.at) {
		i.cancel()
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

func TestInterruptRecovers(t *testing.T) {
	tw := warmTwin(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	target := interrupting{Target: twintarget.New(tw), at: tw.Now().Add(2 * time.Minute), cancel: cancel}
	rec, err := engine.New(engine.Options{Target: target}).Run(ctx, load(t, xid79))
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("err = %v, want an interruption", err)
	}
	if got := tw.Active(); len(got) != 0 {
		t.Errorf("still applied after the interrupt: %v", got)
	}
	if rec.RecoveredAt.IsZero() {
		t.Error("record has no recovery time")
	}
}

// TestSteadyStateBlocksInjection refuses to inject when the job is not
// running to begin with.
func TestSteadyStateBlocksInjection(t *testing.T) {
	tw := warmTwin(t, 1)
	exp := load(t, strings.Replace(xid79, "op: \"==\", value: 1", "op: \"==\", value: 0", 1))
	_, err := engine.New(engine.Options{Target: twintarget.New(tw)}).Run(context.Background(), exp)
	if err == nil || !strings.Contains(err.Error(), "does not hold before injection") {
		t.Fatalf("err = %v", err)
	}
	for _, l := range tw.Logs() {
		if strings.Contains(l.Text, "Xid") {
			t.Fatalf("something was injected: %s", l.Text)
		}
	}
}

// TestWorkloadVerdictsOnTwin runs the workload checks through the engine
// on the twin's job, whose own accounting (JobStatus) is the truth they
// must find from its exported series alone.
func TestWorkloadVerdictsOnTwin(t *testing.T) {
	tests := []struct {
		name, fault string
		expect      string
		check       func(t *testing.T, rec *engine.Record, before, after twin.JobStatus)
	}{
		{name: "kill-rank", fault: "workload.kill-rank", expect: `
    - {name: resumed, within: 10m, probe: {workload: {check: resumed}}}
    - {name: lost, within: 10m, probe: {workload: {check: lost-work}}}
    - {name: goodput, within: 20m, probe: {workload: {check: goodput, min: 0.95, baseline: 5m}}}`,
			check: func(t *testing.T, rec *engine.Record, before, after twin.JobStatus) {
				v := verdicts(rec)
				if v["resumed"].Verdict != engine.Pass || *v["resumed"].Value != float64(after.ResumedFromStep) {
					t.Errorf("resumed: %s %v (%s), want pass from step %d", v["resumed"].Verdict, deref(v["resumed"].Value), v["resumed"].Detail, after.ResumedFromStep)
				}
				// The restart costs 3m: resumed just after it.
				if ttd := *v["resumed"].TTDSeconds; ttd < 180 || ttd > 180+60 {
					t.Errorf("resumed %.0fs after injection, want 3m and at most one scrape more", ttd)
				}
				// The twin's last scrape before the kill is up to a scrape
				// (30s) of steps behind the step it was killed at.
				lost := after.LostSteps - before.LostSteps
				perScrape := 30 / after.BaselineStepSeconds
				if got := *v["lost"].Value; v["lost"].Verdict != engine.Pass || got > float64(lost) || got < float64(lost)-perScrape {
					t.Errorf("lost: %s %v (%s), want pass and %d steps less at most one scrape's %.0f", v["lost"].Verdict, got, v["lost"].Detail, lost, perScrape)
				}
				// 20 minutes that lost the restart and the work since the
				// last checkpoint cannot reach 0.95.
				if g := v["goodput"]; g.Verdict != engine.Failed || *g.Value > 0.9 || *g.Value < 0.4 {
					t.Errorf("goodput: %s %v (%s), want failed between 0.4 and 0.9", g.Verdict, deref(g.Value), g.Detail)
				}
			}},
		{name: "hang-rank", fault: "workload.hang-rank", expect: `
    - {name: stalled, within: 2m, probe: {workload: {check: stalled, baseline: 5m}}}
    - {name: back, within: 15m, probe: {workload: {check: rate-recovered, baseline: 5m, for: 1m}}}
    - {name: goodput, within: 15m, probe: {workload: {check: goodput, min: 0.5, baseline: 5m}}}`,
			check: func(t *testing.T, rec *engine.Record, before, after twin.JobStatus) {
				v := verdicts(rec)
				for _, n := range []string{"stalled", "back", "goodput"} {
					if v[n].Verdict != engine.Pass {
						t.Errorf("%s: %s (%s), want pass", n, v[n].Verdict, v[n].Detail)
					}
				}
				// Hung for the 5m window (under the 10m watchdog), then back:
				// goodput over 15m is about 10/15.
				if g := *v["goodput"].Value; g < 0.6 || g > 0.7 {
					t.Errorf("goodput %.3f, want about 10/15", g)
				}
				if ttd := *v["back"].TTDSeconds; ttd < 300 {
					t.Errorf("rate back %.0fs after injection, before the hang ended at 300s", ttd)
				}
				if after.Restarts != before.Restarts {
					t.Errorf("the job restarted %d times; a 5m hang is under the watchdog", after.Restarts-before.Restarts)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tw, err := twin.New(twin.Options{Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			// Two checkpoints (10m interval) and a stretch of steady rate.
			if err := tw.Sleep(context.Background(), 25*time.Minute); err != nil {
				t.Fatal(err)
			}
			before, _ := tw.Job("llm-pretrain")
			exp := load(t, `
apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata: {name: `+tc.name+`}
spec:
  selector: {jobs: [llm-pretrain], ranks: [0], mode: one}
  faults: [{id: `+tc.fault+`}]
  duration: 5m
  expectations:`+tc.expect+`
`)
			rec, err := engine.New(engine.Options{Target: twintarget.New(tw), RecoveryWindow: -1}).Run(context.Background(), exp)
			if err != nil {
				t.Fatal(err)
			}
			after, _ := tw.Job("llm-pretrain")
			for _, v := range rec.Verdicts {
				t.Logf("%s: %s %v: %s", v.Name, v.Verdict, deref(v.Value), v.Detail)
			}
			tc.check(t, rec, before, after)
		})
	}
}

func verdicts(rec *engine.Record) map[string]engine.Verdict {
	out := map[string]engine.Verdict{}
	for _, v := range rec.Verdicts {
		if v.Value == nil {
			nan := -1.0
			v.Value = &nan
		}
		if v.TTDSeconds == nil {
			never := -1.0
			v.TTDSeconds = &never
		}
		out[v.Name] = v
	}
	return out
}

func deref(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}
