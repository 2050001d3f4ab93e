package fault

import (
	"context"
	"testing"
	"time"
)

func TestHoldUntil(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	tests := []struct {
		name   string
		ctx    context.Context
		want   time.Time
		wantOK bool
	}{
		{name: "absent", ctx: context.Background()},
		{name: "set", ctx: WithHoldUntil(context.Background(), at), want: at, wantOK: true},
		{name: "the innermost wins", ctx: WithHoldUntil(WithHoldUntil(context.Background(), at), at.Add(time.Hour)), want: at.Add(time.Hour), wantOK: true},
		{name: "survives derived contexts", ctx: func() context.Context {
			ctx, cancel := context.WithTimeout(WithHoldUntil(context.Background(), at), time.Minute)
			t.Cleanup(cancel)
			return ctx
		}(), want: at, wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := HoldUntil(tc.ctx)
			if ok != tc.wantOK || !got.Equal(tc.want) {
				t.Fatalf("HoldUntil = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestHoldFor(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		ctx  context.Context
		want time.Duration
	}{
		{"no hold time", context.Background(), DefaultHold},
		{"ten minutes ahead", WithHoldUntil(context.Background(), now.Add(10*time.Minute)), 11 * time.Minute},
		{"already past", WithHoldUntil(context.Background(), now.Add(-time.Hour)), HoldMargin},
	}
	for _, tc := range tests {
		if got := HoldFor(tc.ctx, now); got != tc.want {
			t.Errorf("%s: HoldFor = %v, want %v", tc.name, got, tc.want)
		}
	}
}
