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
