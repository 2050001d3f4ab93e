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
	prev := time.Now()
	for {
		if err := fn(prev); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case now := <-ticker.C:
			if n := int64(now.Sub(prev)/interval) - 1; n > 0 && missed != nil {
				missed(uint64(n))
			}
			prev = now
		}
	}
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
