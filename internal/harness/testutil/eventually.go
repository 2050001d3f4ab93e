package testutil

import (
	"testing"
	"time"
)

// Eventually asks again after 1 ms, then twice as long each time up to
// pollMax: a condition that comes true at once costs a millisecond, and
// one that takes seconds (an HTTP query, a scan of /proc) is asked 20
// times a second, so a hundred waiting tests do not load a two-core
// machine.
const (
	pollMin = time.Millisecond
	pollMax = 50 * time.Millisecond
)

// Eventually calls cond until it returns true, at growing intervals,
// and fails the test (t.Fatalf, so from the test's goroutine only) when
// within passes first, saying what it waited for and how long. Give
// within generously, seconds where the condition takes milliseconds: a
// loaded machine is slow, and a limit passes no faster for being tight.
// cond runs on the caller's goroutine and may call t.Fatal itself.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	start, wait := time.Now(), pollMin
	for !cond() {
		if waited := time.Since(start); waited > within {
			t.Fatalf("waited %s (limit %s) for %s", waited.Round(time.Millisecond), within, what)
		}
		time.Sleep(wait)
		wait = min(2*wait, pollMax)
	}
}
