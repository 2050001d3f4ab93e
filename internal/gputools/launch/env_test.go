package launch_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/gputools/launch"
)

func TestOverlay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		base, overlay []string
		want          []string
		wantErr       string
	}{
		{"empty overlay keeps base", []string{"A=1", "B=2"}, nil, []string{"A=1", "B=2"}, ""},
		{"new variable is appended", []string{"A=1"}, []string{"N=1"}, []string{"A=1", "N=1"}, ""},
		{"replaced variable moves to the end", []string{"A=1", "N=0", "B=2"}, []string{"N=1"}, []string{"A=1", "B=2", "N=1"}, ""},
		{"every duplicate in base is replaced", []string{"N=0", "A=1", "N=9"}, []string{"N=1"}, []string{"A=1", "N=1"}, ""},
		{"later overlay entry wins", nil, []string{"N=1", "M=2", "N=3"}, []string{"M=2", "N=3"}, ""},
		{"value may hold =", nil, []string{"X=a=b"}, []string{"X=a=b"}, ""},
		{"empty value", []string{"X=1"}, []string{"X="}, []string{"X="}, ""},
		{"prefix is a different name", []string{"NCCL_P2P=1"}, []string{"NCCL_P2P_DISABLE=1"}, []string{"NCCL_P2P=1", "NCCL_P2P_DISABLE=1"}, ""},
		{"odd base entries pass through", []string{"junk", "A=1"}, []string{"A=2"}, []string{"junk", "A=2"}, ""},
		{"no =", nil, []string{"NCCL_P2P_DISABLE"}, nil, "not KEY=VALUE"},
		{"empty key", nil, []string{"=1"}, nil, "not KEY=VALUE"},
		{"NUL byte", nil, []string{"A=x\x00y"}, nil, "NUL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := launch.Overlay(tc.base, tc.overlay)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Overlay: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("Overlay = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// FuzzOverlay checks Overlay's invariants on any input: every variable the
// overlay names appears exactly once with the overlay's last value, and
// every base entry it does not name survives in order.
func FuzzOverlay(f *testing.F) {
	f.Add("A=1\nB=2", "B=3")
	f.Add("N=0\nA=1\nN=9", "N=1\nN=2")
	f.Add("junk", "=x")
	f.Fuzz(func(t *testing.T, baseText, overlayText string) {
		base := strings.Split(baseText, "\n")
		overlay := strings.Split(overlayText, "\n")
		got, err := launch.Overlay(base, overlay)
		if err != nil {
			return
		}
		want := map[string]string{}
		for _, kv := range overlay {
			k, _, _ := strings.Cut(kv, "=")
			want[k] = kv
		}
		seen := map[string]int{}
		var kept []string
		for _, kv := range got {
			k, _, _ := strings.Cut(kv, "=")
			if w, ok := want[k]; ok {
				seen[k]++
				if kv != w {
					t.Fatalf("%s = %q, want the overlay's last %q", k, kv, w)
				}
				continue
			}
			kept = append(kept, kv)
		}
		for k := range want {
			if seen[k] != 1 {
				t.Fatalf("%s appears %d times in %q, want once", k, seen[k], got)
			}
		}
		var wantKept []string
		for _, kv := range base {
			k, _, _ := strings.Cut(kv, "=")
			if _, ok := want[k]; !ok {
				wantKept = append(wantKept, kv)
			}
		}
		if !slices.Equal(kept, wantKept) {
			t.Fatalf("base entries kept %q, want %q", kept, wantKept)
		}
	})
}
