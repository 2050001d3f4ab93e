package fault

import (
	"context"
	"time"
)

// holdKey is the context key of WithHoldUntil.
type holdKey struct{}

// WithHoldUntil returns a context that tells injectors the latest time the
// engine may still need the fault in effect: the experiment's end plus its
// recovery window. An injector that starts something able to outlive its
// injecting process (a child process, a pod) bounds it by this time, so
// that the fault ends on its own even when nobody recovers it.
func WithHoldUntil(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, holdKey{}, t)
}

// HoldUntil returns the time set by WithHoldUntil, and false when ctx
// carries none.
func HoldUntil(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(holdKey{}).(time.Time)
	return t, ok
}

// Bounds of the self-ending duration of what an injector starts.
const (
	// DefaultHold is how long it runs when the context carries no
	// HoldUntil time.
	DefaultHold = time.Hour
	// HoldMargin is added to the HoldUntil time, so that the engine's
	// recovery finds it still running rather than racing its end; it is
	// also the least it is given.
	HoldMargin = time.Minute
)

// HoldFor is how long something started at now and bounded by ctx's hold
// time should run by itself: until HoldUntil plus HoldMargin (DefaultHold
// without one), and at least HoldMargin. Callers round and cap it as
// their commands require.
func HoldFor(ctx context.Context, now time.Time) time.Duration {
	d := DefaultHold
	if until, ok := HoldUntil(ctx); ok {
		d = until.Sub(now) + HoldMargin
	}
	return max(d, HoldMargin)
}
