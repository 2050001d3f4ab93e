package schedule_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/kube/controller/schedule"
)

func TestParseNext(t *testing.T) {
	base := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC) // a Saturday
	tests := []struct {
		name, expr, zone string
		want             time.Time
	}{
		{"five fields", "30 14 * * *", "", time.Date(2026, 3, 7, 14, 30, 0, 0, time.UTC)},
		{"hourly", "@hourly", "", time.Date(2026, 3, 7, 13, 0, 0, 0, time.UTC)},
		{"every 90m", "@every 90m", "", base.Add(90 * time.Minute)},
		{"weekday", "0 9 * * MON", "", time.Date(2026, 3, 9, 9, 0, 0, 0, time.UTC)},
		// 2026-03-08 is the US switch to daylight saving: that Sunday 09:00 is EDT, 13:00 UTC, where Saturday's was EST, 14:00 UTC.
		{"new york across DST", "0 9 * * SUN", "America/New_York", time.Date(2026, 3, 8, 13, 0, 0, 0, time.UTC)},
		{"tokyo", "0 3 * * *", "Asia/Tokyo", time.Date(2026, 3, 7, 18, 0, 0, 0, time.UTC)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, loc, err := schedule.Parse(v1alpha1.ScheduleSpec{Schedule: tc.expr, TimeZone: tc.zone})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Next(base.In(loc)); !got.Equal(tc.want) {
				t.Errorf("next after %s = %s, want %s", base, got.UTC(), tc.want)
			}
		})
	}
}

// FuzzParse holds Parse to its contract on any input: an error names the
// field it is about, and a schedule it accepts fires at least a minute
// apart, strictly forward.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"*/5 * * * *", "@every 1h", "@every 10s", "0 3 * * *", "CRON_TZ=UTC * * * * *", "@yearly", "60 * * * *", "0 0 30 2 *", ""} {
		f.Add(s, "")
		f.Add(s, "Europe/Berlin")
	}
	f.Add("* * * * *", "Mars/Olympus")
	f.Fuzz(func(t *testing.T, expr, zone string) {
		s, loc, err := schedule.Parse(v1alpha1.ScheduleSpec{Schedule: expr, TimeZone: zone})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "spec.schedule: ") && !strings.HasPrefix(err.Error(), "spec.timeZone: ") {
				t.Fatalf("error names no field: %v", err)
			}
			return
		}
		from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).In(loc)
		a := s.Next(from)
		if a.IsZero() {
			return // never fires (30 February)
		}
		if !a.After(from) {
			t.Fatalf("%q: next %s not after %s", expr, a, from)
		}
		if b := s.Next(a); !b.IsZero() && b.Sub(a) < time.Minute {
			t.Fatalf("%q: runs %s and %s under a minute apart", expr, a, b)
		}
	})
}
