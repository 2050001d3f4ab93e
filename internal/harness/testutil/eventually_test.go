package testutil

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fatalTB records a Fatalf and unwinds with a panic the test recovers,
// where testing's own would end the goroutine.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func TestEventually(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		trueFrom int // the call from which cond holds; 0: never
		fails    bool
	}{
		{name: "at once", trueFrom: 1},
		{name: "after a few calls", trueFrom: 4},
		{name: "never", fails: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fatalTB{TB: t}
			calls := 0
			func() {
				defer func() {
					if r := recover(); r != nil && r != any(f) {
						panic(r)
					}
				}()
				Eventually(f, 100*time.Millisecond, "the thing", func() bool {
					calls++
					return tc.trueFrom > 0 && calls >= tc.trueFrom
				})
			}()
			if got := f.msg != ""; got != tc.fails {
				t.Fatalf("failed %v (%q), want %v", got, f.msg, tc.fails)
			}
			if tc.fails && !strings.Contains(f.msg, "the thing") {
				t.Errorf("failure %q does not say what it waited for", f.msg)
			}
			if !tc.fails && calls != tc.trueFrom {
				t.Errorf("cond called %d times, want %d", calls, tc.trueFrom)
			}
		})
	}
}
