package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// barrierTarget's injections each wait until all of them have started,
// so a run that injected one after another would never finish them: the
// run completing proves they were in flight together.
type barrierTarget struct {
	*fakeTarget
	led     ledger.Ledger
	want    int
	failKey string

	mu       sync.Mutex
	arrived  int
	all      chan struct{}
	problems []string
}

func (b *barrierTarget) Injector(*catalog.Fault, *catalog.Mechanism) (fault.Injector, error) {
	return barrierInjector{b}, nil
}

type barrierInjector struct{ b *barrierTarget }

func (i barrierInjector) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	b := i.b
	pending, err := b.led.Pending(ctx)
	if err != nil || !slices.ContainsFunc(pending, func(e ledger.Entry) bool { return e.Key == key }) {
		b.mu.Lock()
		b.problems = append(b.problems, key+" injected before it was in the ledger")
		b.mu.Unlock()
	}
	b.mu.Lock()
	b.arrived++
	if b.arrived == b.want {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-time.After(60 * time.Second):
		return errors.New("the other injections never started alongside this one")
	case <-ctx.Done():
		return ctx.Err()
	}
	if key == b.failKey {
		return errors.New("device busy")
	}
	return fakeInjector{b.fakeTarget}.Inject(ctx, key, ref, v)
}

func (i barrierInjector) Recover(ctx context.Context, key string) error {
	return fakeInjector{i.b.fakeTarget}.Recover(ctx, key)
}

// TestEngineInjectsConcurrently: with Concurrency set, every injection is
// in flight at once, each recorded in the ledger before its Inject, and a
// failing one still has every recorded injection recovered.
func TestEngineInjectsConcurrently(t *testing.T) {
	gpus := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
	tests := []struct {
		name    string
		failKey string
		wantErr string
	}{
		{name: "all applied"},
		{name: "one fails", failKey: "t/0/gpu-node-0/gpu5", wantErr: "device busy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			led := &ledger.Memory{}
			b := &barrierTarget{fakeTarget: newFake(), led: led, want: len(gpus), all: make(chan struct{}), failKey: tt.failKey}
			b.detectAt["x"] = 0
			exp := experiment(gpus, time.Minute, "x")
			exp.Spec.BlastRadius.MaxGPUs = len(gpus)
			var events int
			rec, err := New(Options{Target: b, Ledger: led, Concurrency: len(gpus), OnEvent: func(ev Event) {
				if ev.Kind == "inject" || ev.Kind == "recover" {
					events++
				}
			}}).Run(context.Background(), exp)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("run: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			if len(b.problems) > 0 {
				t.Error(b.problems)
			}
			if len(b.applied) != 0 {
				t.Errorf("left applied: %v", b.applied)
			}
			if p, _ := led.Pending(context.Background()); len(p) != 0 {
				t.Errorf("ledger still holds %d entries", len(p))
			}
			wantEvents := 2 * len(gpus)
			if tt.failKey != "" {
				wantEvents-- // the failed one has no inject event
			}
			if events != wantEvents {
				t.Errorf("%d inject and recover events, want %d; timeline %s", events, wantEvents, fmt.Sprint(rec.Timeline))
			}
		})
	}
}
