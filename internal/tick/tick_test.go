package tick

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunAlignsAndStops(t *testing.T) {
	const interval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var calls []time.Time
	err := Run(ctx, interval, func(now time.Time) error {
		calls = append(calls, now)
		if len(calls) == 3 {
			cancel()
		}
		return nil
	}, nil)
	if err != nil || len(calls) != 3 {
		t.Fatalf("err %v, %d calls; want nil and 3", err, len(calls))
	}
	// The first call comes at (just after) a multiple of the interval.
	if off := time.Duration(calls[0].UnixNano() % int64(interval)); off > interval/2 {
		t.Errorf("first tick %s past a multiple of %s", off, interval)
	}
}

func TestRunCountsMissedTicks(t *testing.T) {
	const interval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var missed atomic.Uint64
	n := 0
	err := Run(ctx, interval, func(time.Time) error {
		n++
		switch n {
		case 1:
			time.Sleep(5 * interval) // overrun: about four ticks dropped
		case 3:
			cancel()
		}
		return nil
	}, func(m uint64) { missed.Add(m) })
	if err != nil {
		t.Fatal(err)
	}
	if m := missed.Load(); m < 2 || m > 6 {
		t.Errorf("missed %d ticks after a 5-interval overrun, want about 4", m)
	}
}

func TestRunReturnsWorkError(t *testing.T) {
	boom := errors.New("boom")
	if err := Run(context.Background(), time.Millisecond, func(time.Time) error { return boom }, nil); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("a plain sleep: %v", err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, d := range []time.Duration{0, -time.Second, time.Hour} {
		start := time.Now()
		if err := Sleep(done, d); err != context.Canceled {
			t.Errorf("Sleep(cancelled, %v) = %v, want context.Canceled", d, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("Sleep(cancelled, %v) took %v", d, took)
		}
	}
	if err := Sleep(context.Background(), 0); err != nil {
		t.Errorf("Sleep(0) = %v", err)
	}
}
