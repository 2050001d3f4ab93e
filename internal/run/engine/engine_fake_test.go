package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
)

// fakeTarget drives the engine's error paths, which the twin cannot reach
// on demand (an injector that fails half-way, an interrupt mid-run). The
// real path is covered by the twin tests in engine_test.go.
type fakeTarget struct {
	mu      sync.Mutex
	now     time.Time
	applied map[string]bool
	failOn  string // inject of this key fails
	// detectAt maps a detector name to the offset after injection at which
	// it starts to hold.
	detectAt   map[string]time.Duration
	injectedAt time.Time
	cancelAt   time.Duration
	cancel     context.CancelFunc
	steadyOK   bool
	name       string
	// holdUntil is what the last Inject read from fault.HoldUntil.
	holdUntil time.Time
}

func newFake() *fakeTarget {
	return &fakeTarget{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), applied: map[string]bool{}, detectAt: map[string]time.Duration{}, steadyOK: true}
}

func (f *fakeTarget) Kind() target.Kind {
	if f.name == "" {
		return target.Twin
	}
	return target.Kind(f.name)
}

func (f *fakeTarget) Settings() target.Settings     { return target.Settings{} }
func (f *fakeTarget) Prepare(context.Context) error { return nil }
func (f *fakeTarget) Close() error                  { return nil }
func (f *fakeTarget) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}
func (f *fakeTarget) Sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	f.now = f.now.Add(d)
	hit := f.cancel != nil && !f.injectedAt.IsZero() && f.now.Sub(f.injectedAt) >= f.cancelAt
	f.mu.Unlock()
	if hit {
		f.cancel()
	}
	return ctx.Err()
}

func (f *fakeTarget) Inventory(context.Context) (inventory.Inventory, error) {
	n := inventory.Node{Name: "gpu-node-0"}
	for i := range 8 {
		n.GPUs = append(n.GPUs, inventory.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), PCI: fmt.Sprintf("00000000:%02X:00.0", 0x18+i), Model: "NVIDIA H200"})
	}
	return inventory.Inventory{Nodes: []inventory.Node{n}}, nil
}

func (f *fakeTarget) Injector(*catalog.Fault, *catalog.Mechanism) (fault.Injector, error) {
	return fakeInjector{f}, nil
}

func (f *fakeTarget) Probe(name string, spec v1alpha1.ProbeSpec) (probe.Probe, error) {
	if name == "steady" {
		return fakeProbe{name: name, holds: func() bool { return f.steadyOK }}, nil
	}
	at, ok := f.detectAt[spec.Detector]
	return fakeProbe{name: name, holds: func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return ok && !f.injectedAt.IsZero() && f.now.Sub(f.injectedAt) >= at
	}}, nil
}

type fakeInjector struct{ f *fakeTarget }

func (i fakeInjector) Inject(ctx context.Context, key string, _ inventory.Ref, _ catalog.Values) error {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	if key == i.f.failOn {
		return errors.New("device busy")
	}
	i.f.applied[key] = true
	i.f.holdUntil, _ = fault.HoldUntil(ctx)
	if i.f.injectedAt.IsZero() {
		i.f.injectedAt = i.f.now
	}
	return nil
}

func (i fakeInjector) Recover(_ context.Context, key string) error {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	delete(i.f.applied, key)
	return nil
}

type fakeProbe struct {
	name  string
	holds func() bool
}

func (p fakeProbe) Name() string { return p.name }
func (p fakeProbe) Observe(ctx context.Context) (probe.Observation, error) {
	if p.holds() {
		return probe.Observation{Holds: true, Subjects: []probe.Subject{{Node: "gpu-node-0", GPU: "3"}}}, nil
	}
	return probe.Observation{}, ctx.Err()
}

func experiment(gpus []string, within time.Duration, detectors ...string) *v1alpha1.Experiment {
	e := &v1alpha1.Experiment{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindExperiment},
		ObjectMeta: metav1.ObjectMeta{Name: "t"},
		Spec: v1alpha1.ExperimentSpec{
			Selector: v1alpha1.Selector{Nodes: []string{"gpu-node-0"}, GPUs: gpus, Mode: v1alpha1.ModeAll},
			Faults:   []v1alpha1.FaultSpec{{ID: "hardware.xid", Params: map[string]v1alpha1.ParamValue{"code": "79"}}},
			Duration: v1alpha1.Duration{Duration: 10 * time.Minute},
		},
	}
	for _, d := range detectors {
		e.Spec.Expectations = append(e.Spec.Expectations, v1alpha1.Expectation{Detector: d, Within: v1alpha1.Duration{Duration: within}})
	}
	return e
}

func TestEngineVerdicts(t *testing.T) {
	f := newFake()
	f.detectAt = map[string]time.Duration{"fast": 30 * time.Second, "slow": 5 * time.Minute}
	eng := New(Options{Target: f, RecoveryWindow: -1})
	rec, err := eng.Run(context.Background(), experiment([]string{"3"}, 2*time.Minute, "fast", "slow", "never"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		verdict string
		ttd     float64
	}{"fast": {Pass, 30}, "slow": {Late, 300}, "never": {Missed, -1}}
	for _, v := range rec.Verdicts {
		w := want[v.Name]
		if v.Verdict != w.verdict {
			t.Errorf("%s: verdict %s, want %s", v.Name, v.Verdict, w.verdict)
		}
		got := -1.0
		if v.TTDSeconds != nil {
			got = *v.TTDSeconds
		}
		if got != w.ttd {
			t.Errorf("%s: ttd %v, want %v", v.Name, got, w.ttd)
		}
	}
	if len(f.applied) != 0 {
		t.Errorf("left applied: %v", f.applied)
	}
	if rec.Passed() {
		t.Error("Passed() with a late and a missed expectation")
	}
}

// TestEngineBoundsTheHold checks that injectors learn when the engine will
// be done with the fault — the window plus the recovery window — so what
// they start can end by itself if the engine dies.
func TestEngineBoundsTheHold(t *testing.T) {
	for _, rw := range []time.Duration{-1, 3 * time.Minute} {
		f := newFake()
		eng := New(Options{Target: f, RecoveryWindow: rw})
		start := f.Now()
		if _, err := eng.Run(context.Background(), experiment([]string{"3"}, 2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		want := 10*time.Minute + max(rw, 0) // experiment() runs for 10 minutes
		if got := f.holdUntil.Sub(start); got < want || got > want+time.Minute {
			t.Errorf("recovery window %v: hold until %v after the start, want %v (plus the steady-state check)", rw, got, want)
		}
	}
}

func TestEngineRecoversWhatItInjected(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(f *fakeTarget, ctx context.Context, cancel context.CancelFunc)
		wantErr  string
		injected bool
	}{
		{
			name:     "second injection fails",
			setup:    func(f *fakeTarget, _ context.Context, _ context.CancelFunc) { f.failOn = "t/0/gpu-node-0/gpu4" },
			wantErr:  "device busy",
			injected: true,
		},
		{
			name: "interrupted while observing",
			setup: func(f *fakeTarget, _ context.Context, cancel context.CancelFunc) {
				f.cancel, f.cancelAt = cancel, 2*time.Minute
			},
			wantErr:  "interrupted while observing",
			injected: true,
		},
		{
			name:    "steady state does not hold",
			setup:   func(f *fakeTarget, _ context.Context, _ context.CancelFunc) { f.steadyOK = false },
			wantErr: "steady state steady does not hold",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tt.setup(f, ctx, cancel)
			led := &ledger.Memory{}
			exp := experiment([]string{"3", "4"}, time.Minute, "x")
			exp.Spec.SteadyState = []v1alpha1.Check{{Name: "steady", Probe: v1alpha1.ProbeSpec{Detector: "y"}}}
			rec, err := New(Options{Target: f, Ledger: led}).Run(ctx, exp)
			if err == nil || !contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			if rec == nil || rec.Err == nil {
				t.Fatal("no record with the error")
			}
			if len(f.applied) != 0 {
				t.Errorf("left applied after the error: %v", f.applied)
			}
			if p, _ := led.Pending(context.Background()); len(p) != 0 {
				t.Errorf("ledger still holds %d entries", len(p))
			}
			if got := !f.injectedAt.IsZero(); got != tt.injected {
				t.Errorf("injected = %v, want %v", got, tt.injected)
			}
		})
	}
}

func TestPlanRefuses(t *testing.T) {
	tests := []struct {
		name    string
		target  string
		edit    func(*v1alpha1.Experiment)
		wantErr string
	}{
		{"over the GPU cap", "twin", func(e *v1alpha1.Experiment) { e.Spec.BlastRadius.MaxGPUs = 4 }, "spec.blastRadius"},
		{"hardware-risk without allow", "local", func(e *v1alpha1.Experiment) {
			e.Spec.Selector.GPUs = []string{"1"}
			e.Spec.Faults = []v1alpha1.FaultSpec{{ID: "hardware.power-brake", Mechanism: hardwareRiskMechanism(t, "hardware.power-brake")}}
		}, "spec.faults[0].mechanism"},
		{"mechanism not on this target", "twin", func(e *v1alpha1.Experiment) { e.Spec.Faults[0].Mechanism = "kernel-log" }, "spec.faults[0].mechanism"},
		{"parameter out of range", "twin", func(e *v1alpha1.Experiment) {
			e.Spec.Faults[0].Params["code"] = "1000"
		}, "spec.faults[0].params.code: XID code 1000 is not a known XID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			f.name = tt.target
			exp := experiment(nil, time.Minute)
			tt.edit(exp)
			_, err := New(Options{Target: f}).Plan(context.Background(), exp)
			if err == nil || !contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			if len(f.applied) != 0 {
				t.Error("planning touched the target")
			}
		})
	}
}

func hardwareRiskMechanism(t *testing.T, id string) string {
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("%s not in the catalogue", id)
	}
	for _, m := range f.Mechanisms {
		if m.Safety == catalog.SafetyHardwareRisk {
			return m.Name
		}
	}
	t.Fatalf("%s has no hardware-risk mechanism", id)
	return ""
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestInterruptedRunIsNotAMiss: an expectation whose deadline had not come
// when the run was stopped is interrupted, not missed; one already
// detected keeps its verdict, and one whose deadline had passed is missed.
func TestInterruptedRunIsNotAMiss(t *testing.T) {
	f := newFake()
	f.detectAt = map[string]time.Duration{"fast": 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.cancel, f.cancelAt = cancel, 90*time.Second
	exp := experiment([]string{"3"}, 5*time.Minute, "fast", "never")
	exp.Spec.Expectations = append(exp.Spec.Expectations, v1alpha1.Expectation{Name: "short", Detector: "never", Within: v1alpha1.Duration{Duration: time.Minute}})
	rec, err := New(Options{Target: f, RecoveryWindow: -1}).Run(ctx, exp)
	if err == nil || !contains(err.Error(), "interrupted") {
		t.Fatalf("err = %v, want an interruption", err)
	}
	want := map[string]string{"fast": Pass, "never": Interrupted, "short": Missed}
	for _, v := range rec.Verdicts {
		if v.Verdict != want[v.Name] {
			t.Errorf("%s: %s (%s), want %s", v.Name, v.Verdict, v.Detail, want[v.Name])
		}
		if v.Verdict == Interrupted && !contains(v.Detail, "before its 5m0s deadline") {
			t.Errorf("%s: detail %q does not say the deadline was still ahead", v.Name, v.Detail)
		}
	}
}
