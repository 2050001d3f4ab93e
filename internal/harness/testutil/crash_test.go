package testutil

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
)

// recorder is a testing.TB that keeps the failures CheckRecovery reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestCheckRecovery(t *testing.T) {
	t.Parallel()
	gone := fmt.Errorf("recover x: pid 9 has exited: %w", fault.ErrTargetGone)
	unproven := fmt.Errorf("recover x: cannot look into pid 1: %w", fault.ErrUnproven)
	tests := []struct {
		name    string
		err     error
		diff    string
		kept    bool
		verdict string
		fails   bool
	}{
		{"recovered, nothing left", nil, "", false, "recovered", false},
		{"recovered over a leftover", nil, "rank stopped", false, "recovered", true},
		{"recovered, record kept", nil, "", true, "recovered", true},
		{"gone with its proof", gone, "", false, "gone", false},
		{"gone without a proof", fmt.Errorf("recover x: %w", fault.ErrTargetGone), "", false, "gone", true},
		{"gone over a leftover", gone, "filter left", false, "gone", true},
		{"pending, record kept", unproven, "filter left", true, "pending", false},
		{"pending, record dropped", unproven, "", false, "pending", true},
		{"unproven and gone is pending", errors.Join(gone, unproven), "", true, "pending", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{TB: t}
			v := CheckRecovery(r, "round", tc.err, func() string { return tc.diff }, func() bool { return tc.kept }, "has exited")
			if v != tc.verdict || (len(r.errs) > 0) != tc.fails {
				t.Fatalf("CheckRecovery = %s, failures %q; want %s, failing %v", v, r.errs, tc.verdict, tc.fails)
			}
		})
	}
}

func TestMoment(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	const max = 50 * time.Millisecond
	var zero, early, late int
	for range 10000 {
		d := Moment(r, max)
		switch {
		case d < 0 || d > max:
			t.Fatalf("Moment = %s, outside [0, %s]", d, max)
		case d == 0:
			zero++
		case d < 100*time.Microsecond:
			early++
		case d > max/2:
			late++
		}
	}
	// Each part of an injection gets its share of kills: at once, in its
	// first 100 µs, and in the second half of the range.
	for what, n := range map[string]int{"at once": zero, "within 100 µs": early, "in the second half": late} {
		if n < 500 {
			t.Errorf("%d of 10000 kills %s, want at least 500", n, what)
		}
	}
}

func TestTally(t *testing.T) {
	t.Parallel()
	c := Tally{}
	c.Add("b/gone")
	c.Add("a/recovered")
	c.Add("a/recovered")
	if got, want := c.String(), "a/recovered:2 b/gone:1"; got != want {
		t.Fatalf("Tally = %q, want %q", got, want)
	}
}
