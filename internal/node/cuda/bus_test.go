package cuda

import (
	"slices"
	"strings"
	"testing"
)

func TestPick(t *testing.T) {
	t.Parallel()
	all := []BusDevice{{Index: 0, PCI: "0000:18:00.0"}, {Index: 1, PCI: "0000:2a:00.0"}}
	tests := []struct {
		name    string
		all     []BusDevice
		want    []int
		got     []int
		wantErr string
	}{
		{"all by default", all, nil, []int{0, 1}, ""},
		{"a subset in order asked", all, []int{1, 0}, []int{1, 0}, ""},
		{"index past the end", all, []int{2}, nil, "this machine has 2 GPUs (0 to 1)"},
		{"negative index", all, []int{-1}, nil, "gpu -1: this machine has 2 GPUs"},
		{"no gpus", nil, nil, nil, "sees no GPU"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Pick(tc.all, tc.want)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Pick error = %v; want %q", err, tc.wantErr)
				}
				return
			}
			var idx []int
			for _, g := range got {
				idx = append(idx, g.Index)
			}
			if err != nil || !slices.Equal(idx, tc.got) {
				t.Fatalf("Pick = %v, %v; want %v", idx, err, tc.got)
			}
		})
	}
}
