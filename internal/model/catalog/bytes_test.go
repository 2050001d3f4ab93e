package catalog_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

func TestParseBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"0", 0, ""},
		{"512", 512, ""},
		{"512B", 512, ""},
		{"25G", 25e9, ""},
		{"2Gi", 2 << 30, ""},
		{"1TiB", 1 << 40, ""},
		{" 10M ", 10e6, ""},
		{"8388607Ti", 8388607 << 40, ""},
		{"8388608Ti", 0, "more than"},
		{"9223372036854775807", math.MaxInt64, ""},
		{"9223372036854775807K", 0, "more than"},
		{"-1", 0, "not a byte count"},
		{"1.5G", 0, "not a byte count"},
		{"G", 0, "not a byte count"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := catalog.ParseBytes(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseBytes(%q) = %d, %v; want an error with %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

// FuzzParseBytes: whatever is accepted is a count that does not go
// negative, whatever the unit multiplied it by.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"25G", "2Gi", "9223372036854775807K", "8388608Ti", "-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := catalog.ParseBytes(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
	})
}
