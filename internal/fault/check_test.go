package fault

import (
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

func TestCheckMechanism(t *testing.T) {
	t.Parallel()
	lookup := func(id string) *catalog.Fault {
		f, ok := catalog.Lookup(id)
		if !ok {
			t.Fatalf("%s is not in the catalogue", id)
		}
		return f
	}
	hang, straggler := lookup("workload.hang-rank"), lookup("workload.straggler")
	// A package serving hang-rank and straggler, with code for signal,
	// cgroup-cpu, duty-cycle and cgroup-freeze.
	entries := []Entry{
		{Mechanism: "signal", Faults: []string{"workload.hang-rank"}},
		{Mechanism: "cgroup-cpu", Faults: []string{"workload.straggler"}},
		{Mechanism: "duty-cycle", Faults: []string{"workload.straggler"}},
		{Mechanism: "cgroup-freeze", Faults: []string{"workload.hang-rank"}},
	}
	tests := []struct {
		name    string
		f       *catalog.Fault
		m       *catalog.Mechanism
		wantErr string
	}{
		{"served", hang, &catalog.Mechanism{Name: "signal"}, ""},
		{"served, second of two", straggler, &catalog.Mechanism{Name: "duty-cycle"}, ""},
		// cgroup-freeze is a mechanism of hang-rank and the package lists
		// it, but the catalogue has it planned: the catalogue decides.
		{"planned in the catalogue", hang, &catalog.Mechanism{Name: "cgroup-freeze"}, "pkg: mechanism cgroup-freeze of workload.hang-rank is not implemented here (signal is)"},
		{"not the fault's", hang, &catalog.Mechanism{Name: "duty-cycle"}, "pkg: mechanism duty-cycle of workload.hang-rank is not implemented here (signal is)"},
		{"not the package's", straggler, &catalog.Mechanism{Name: "twin"}, "pkg: mechanism twin of workload.straggler is not implemented here (cgroup-cpu and duty-cycle are)"},
		{"other fault", lookup("hardware.xid"), &catalog.Mechanism{Name: "signal"}, "pkg: fault hardware.xid is not one of this package's"},
		{"no fault", nil, &catalog.Mechanism{Name: "signal"}, "a fault and a mechanism are required"},
		{"no mechanism", hang, nil, "a fault and a mechanism are required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckMechanism("pkg", tc.f, tc.m, entries)
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
