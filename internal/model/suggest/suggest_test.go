package suggest

import (
	"math"
	"testing"
)

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"params", "params", 0},
		{"parms", "params", 1},
		{"", "abc", 3},
		{"kitten", "sitting", 3},
		{"hardware.xdi", "hardware.xid", 2},
	}
	for _, tt := range tests {
		if got := Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := Distance(tt.b, tt.a); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetry)", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	tests := []struct {
		name       string
		s          string
		candidates []string
		want       string
		wantD      int
	}{
		{"typo", "parms", []string{"selector", "params", "faults"}, "params", 1},
		{"case only", "Params", []string{"params"}, "params", 0},
		{"first of ties", "ab", []string{"aa", "bb"}, "aa", 1},
		{"none", "x", nil, "", math.MaxInt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, d := Closest(tt.s, tt.candidates)
			if got != tt.want || d != tt.wantD {
				t.Errorf("Closest(%q) = %q, %d; want %q, %d", tt.s, got, d, tt.want, tt.wantD)
			}
		})
	}
}
