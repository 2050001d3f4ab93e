// Package tick runs periodic work on a wall-clock ticker aligned to
// multiples of its interval, counting the ticks the work overran, as
// Prometheus' scrape and rule loops do. The agent's sampling and the live
// twin's clock both run on it.
package tick

import (
	"context"
	"time"
)

// Run waits for the next multiple of interval, then calls fn with each
// tick's time until ctx ends, and returns nil; an error from fn ends Run
// with that error. A ticker drops the ticks its reader was too slow for:
// Run reports how many to missed (which may be nil) instead of queueing
// them, so fn never runs back to back to catch up.
func Run(ctx context.Context, interval time.Duration, fn func(now time.Time) error, missed func(n uint64)) error {
	align := time.NewTimer(interval - time.Duration(time.Now().UnixNano()%int64(interval)))
	defer align.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-align.C:
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	prev := grid(time.Now(), interval)
	for {
		if err := fn(prev); err != nil {
			return err
		}
		// The ticks that fell due while fn ran, beyond the one the
		// ticker still delivers, are dropped: counted from the clock, not
		// from the delivered tick's time, which a late receive can carry
		// stale (the channel holds the first tick that fell due).
		if k := int64(time.Since(prev) / interval); k > 1 && missed != nil {
			missed(uint64(k - 1))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			prev = grid(time.Now(), interval)
		}
	}
}

// grid is t rounded down to a multiple of interval since the Unix epoch,
// the tick t belongs to.
func grid(t time.Time, interval time.Duration) time.Time {
	n := t.UnixNano()
	return time.Unix(0, n-n%int64(interval))
}

// Sleep waits for d, or until ctx ends, and returns ctx.Err() when ctx
// ended first (also when d is not positive and ctx has already ended).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Clock is the time base of a run: the twin's virtual clock, whose Sleep
// advances the simulation, or the wall clock, whose Sleep waits. Sleep
// returns ctx.Err() early when ctx ends.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

// Wall is the wall clock.
type Wall struct{}

// Now returns time.Now().
func (Wall) Now() time.Time { return time.Now() }

// Sleep waits for d of wall time, or until ctx ends.
func (Wall) Sleep(ctx context.Context, d time.Duration) error { return Sleep(ctx, d) }
