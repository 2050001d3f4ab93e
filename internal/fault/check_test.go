package fault

import (
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
)

func TestCheckMechanism(t *testing.T) {
	t.Parallel()
	want := map[string]string{"workload.hang-rank": "signal"}
	hang := &catalog.Fault{ID: "workload.hang-rank"}
	tests := []struct {
		name    string
		f       *catalog.Fault
		m       *catalog.Mechanism
		wantErr string
	}{
		{"served", hang, &catalog.Mechanism{Name: "signal"}, ""},
		{"other mechanism", hang, &catalog.Mechanism{Name: "cgroup-freeze"}, "pkg: mechanism cgroup-freeze of workload.hang-rank is not implemented here (signal is)"},
		{"other fault", &catalog.Fault{ID: "hardware.xid"}, &catalog.Mechanism{Name: "signal"}, "pkg: fault hardware.xid is not one of this package's"},
		{"no fault", nil, &catalog.Mechanism{Name: "signal"}, "a fault and a mechanism are required"},
		{"no mechanism", hang, nil, "a fault and a mechanism are required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckMechanism("pkg", tc.f, tc.m, want)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
