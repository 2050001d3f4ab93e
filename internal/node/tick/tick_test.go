package tick

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tests run in a synctest bubble: its clock moves only when every
// goroutine in it waits, so a tick, an overrun and a sleep take exactly
// the time asked, however busy the machine.

// TestRun runs work that takes a given time on each tick, three ticks,
// from a start that is off the grid, and checks the exact time of each
// call (as offsets from the grid point after the start) and the ticks
// counted missed.
func TestRun(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Millisecond
	tests := []struct {
		name       string
		work       time.Duration // the first call's
		wantCalls  []time.Duration
		wantMissed uint64
	}{
		{name: "work within its tick", work: interval - time.Millisecond, wantCalls: []time.Duration{0, interval, 2 * interval}},
		{name: "work of a whole tick", work: interval, wantCalls: []time.Duration{0, interval, 2 * interval}},
		// The tick due as the work ends is delivered, the four before it
		// dropped and counted.
		{name: "overrun of five ticks", work: 5 * interval, wantCalls: []time.Duration{0, 5 * interval, 6 * interval}, wantMissed: 4},
		// The tick delivered late carries the grid point it belongs to.
		{name: "overrun of five and a half", work: 11 * interval / 2, wantCalls: []time.Duration{0, 5 * interval, 6 * interval}, wantMissed: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(3 * time.Millisecond) // off the grid
				first := grid(time.Now(), interval).Add(interval)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var calls []time.Duration
				var missed uint64
				err := Run(ctx, interval, func(now time.Time) error {
					calls = append(calls, now.Sub(first))
					switch len(calls) {
					case 1:
						time.Sleep(tc.work)
					case 3:
						cancel()
					}
					return nil
				}, func(n uint64) { missed += n })
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(calls, tc.wantCalls) || missed != tc.wantMissed {
					t.Errorf("calls at %v, %d missed; want %v, %d", calls, missed, tc.wantCalls, tc.wantMissed)
				}
			})
		})
	}
}

func TestRunReturnsWorkError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		start := time.Now()
		if err := Run(t.Context(), time.Millisecond, func(time.Time) error { return boom }, nil); !errors.Is(err, boom) {
			t.Fatalf("err = %v, want boom", err)
		}
		if took := time.Since(start); took != time.Millisecond {
			t.Errorf("Run returned the first call's error after %s, want 1ms (the first tick)", took)
		}
	})
}

func TestRunStopsBeforeTheFirstTick(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
		defer cancel()
		called := false
		if err := Run(ctx, time.Hour, func(time.Time) error { called = true; return nil }, nil); err != nil || called {
			t.Errorf("Run = %v, called %v; want nil, not called", err, called)
		}
		if took := time.Since(start); took != 5*time.Millisecond {
			t.Errorf("Run returned after %s, want 5ms, when ctx ended", took)
		}
	})
}

func TestSleep(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		done, cancel := context.WithCancel(t.Context())
		cancel()
		tests := []struct {
			name string
			ctx  context.Context
			d    time.Duration
			want error
			took time.Duration
		}{
			{name: "plain", ctx: t.Context(), d: time.Millisecond, took: time.Millisecond},
			{name: "zero", ctx: t.Context()},
			{name: "cancelled, zero", ctx: done, want: context.Canceled},
			{name: "cancelled, negative", ctx: done, d: -time.Second, want: context.Canceled},
			{name: "cancelled, an hour", ctx: done, d: time.Hour, want: context.Canceled},
		}
		for _, tc := range tests {
			start := time.Now()
			if err := Sleep(tc.ctx, tc.d); err != tc.want {
				t.Errorf("%s: Sleep(%v) = %v, want %v", tc.name, tc.d, err, tc.want)
			}
			if took := time.Since(start); took != tc.took {
				t.Errorf("%s: Sleep(%v) took %s, want %s", tc.name, tc.d, took, tc.took)
			}
		}
	})
}
