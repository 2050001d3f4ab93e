package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/engine"
	"github.com/gpuchaos/gpuchaos/internal/ledger"
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
	rec, err := engine.New(engine.Options{Target: engine.TwinTarget{Twin: tw}, Ledger: led}).Run(context.Background(), load(t, xid79))
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
		rec, err := engine.New(engine.Options{Target: engine.TwinTarget{Twin: warmTwin(t, 42)}, Seed: 42}).Run(context.Background(), load(t, xid79))
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
	rec, err := engine.New(engine.Options{Target: engine.TwinTarget{Twin: tw}, RecoveryWindow: -1}).Run(context.Background(), exp)
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
	engine.TwinTarget
	at     time.Time
	cancel context.CancelFunc
}

func (i interrupting) Sleep(ctx context.Context, d time.Duration) error {
	err := i.TwinTarget.Sleep(ctx, d)
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
	target := interrupting{TwinTarget: engine.TwinTarget{Twin: tw}, at: tw.Now().Add(2 * time.Minute), cancel: cancel}
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
	_, err := engine.New(engine.Options{Target: engine.TwinTarget{Twin: tw}}).Run(context.Background(), exp)
	if err == nil || !strings.Contains(err.Error(), "does not hold before injection") {
		t.Fatalf("err = %v", err)
	}
	for _, l := range tw.Logs() {
		if strings.Contains(l.Text, "Xid") {
			t.Fatalf("something was injected: %s", l.Text)
		}
	}
}
