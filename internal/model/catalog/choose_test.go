package catalog

import (
	"errors"
	"slices"
	"testing"
)

func TestChooseMechanism(t *testing.T) {
	t.Parallel()
	// thermal is built on local through a risky and a safe mechanism and
	// planned there through a third; power is only planned on local.
	thermal := &Fault{ID: "hardware.thermal-throttle", Mechanisms: []Mechanism{
		{Name: "nvml-clock-lock", Targets: []string{"local"}, Planned: []string{"k8s"}, Safety: SafetyHardwareRisk},
		{Name: "burn-heat", Targets: []string{"local"}, Planned: []string{"k8s"}, Safety: SafetyDisruptive},
		{Name: "dcgm-inject", Planned: []string{"local", "k8s"}, Safety: SafetyDisruptive},
		{Name: "twin", Targets: []string{"twin"}, Safety: SafetySafe},
	}}
	power := &Fault{ID: "hardware.power-brake", Mechanisms: []Mechanism{
		{Name: "nvml-power-limit", Targets: []string{"local"}, Safety: SafetyHardwareRisk},
		{Name: "dcgm-inject", Planned: []string{"local", "k8s"}, Safety: SafetyDisruptive},
		{Name: "twin", Targets: []string{"twin"}, Safety: SafetySafe},
	}}
	nccl := &Fault{ID: "nccl.p2p-off", Mechanisms: []Mechanism{
		{Name: "env", Planned: []string{"local", "k8s"}, Safety: SafetySafe},
		{Name: "twin", Targets: []string{"twin"}, Safety: SafetySafe},
	}}
	tests := []struct {
		name          string
		f             *Fault
		mech, target  string
		allow         bool
		want, wantErr string
		wantIs        error
	}{
		{name: "first safe one", f: thermal, target: "local", want: "burn-heat"},
		{name: "first one when risk is allowed", f: thermal, target: "local", allow: true, want: "nvml-clock-lock"},
		{name: "the twin's own", f: thermal, target: "twin", want: "twin"},
		{name: "named", f: thermal, mech: "burn-heat", target: "local", want: "burn-heat"},
		{name: "named risky, allowed", f: thermal, mech: "nvml-clock-lock", target: "local", allow: true, want: "nvml-clock-lock"},
		{name: "named risky, not allowed", f: thermal, mech: "nvml-clock-lock", target: "local", wantIs: ErrHardwareRisk,
			wantErr: "nvml-clock-lock of hardware.thermal-throttle is hardware-risk; set spec.allowHardwareRisk to run it"},
		{name: "only risky built", f: power, target: "local", wantIs: ErrHardwareRisk,
			wantErr: "hardware.power-brake: every mechanism built for target local is hardware-risk (nvml-power-limit); set spec.allowHardwareRisk to run one"},
		{name: "named, other target", f: thermal, mech: "burn-heat", target: "twin",
			wantErr: `"burn-heat" of hardware.thermal-throttle runs on target local, not twin: use --target local, or leave the mechanism out to use twin's own (twin)`},
		{name: "named, other target, none of its own", f: thermal, mech: "twin", target: "mars",
			wantErr: `"twin" of hardware.thermal-throttle runs on target twin, not mars: use --target twin`},
		{name: "named, planned here", f: thermal, mech: "dcgm-inject", target: "local", wantIs: ErrPlanned,
			wantErr: "hardware.thermal-throttle: mechanism dcgm-inject on target local is planned, not built; leave the mechanism out to use local's own (nvml-clock-lock)"},
		{name: "named, planned here, built elsewhere", f: thermal, mech: "burn-heat", target: "k8s", wantIs: ErrPlanned,
			wantErr: "hardware.thermal-throttle: mechanism burn-heat on target k8s is planned, not built; it runs on local: use --target local"},
		{name: "named, planned everywhere, not here", f: nccl, mech: "env", target: "twin", wantIs: ErrPlanned,
			wantErr: "nccl.p2p-off: mechanism env is planned, not built anywhere yet (planned for local, k8s)"},
		{name: "named, unknown", f: thermal, mech: "nvml", target: "local",
			wantErr: `"nvml" is not a mechanism of hardware.thermal-throttle (mechanisms: nvml-clock-lock, burn-heat, dcgm-inject, twin)`},
		{name: "only planned here", f: nccl, target: "local", wantIs: ErrPlanned,
			wantErr: "nccl.p2p-off: mechanism env on target local is planned, not built; the fault runs on twin: use --target twin"},
		{name: "named, only planned here", f: nccl, mech: "env", target: "local", wantIs: ErrPlanned,
			wantErr: "nccl.p2p-off: mechanism env on target local is planned, not built; the fault runs on twin: use --target twin"},
		{name: "several planned here", f: &Fault{ID: "x.y", Mechanisms: []Mechanism{
			{Name: "a", Planned: []string{"k8s"}}, {Name: "b", Planned: []string{"k8s"}}}}, target: "k8s", wantIs: ErrPlanned,
			wantErr: "x.y: mechanisms a, b on target k8s are planned, not built"},
		{name: "none for the target", f: nccl, target: "mars", wantErr: "nccl.p2p-off has no mechanism for target mars"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := ChooseMechanism(tc.f, tc.mech, tc.target, tc.allow)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("ChooseMechanism error = %v\nwant %s", err, tc.wantErr)
				}
				if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
					t.Errorf("error %v is not %v", err, tc.wantIs)
				}
				for _, sentinel := range []error{ErrPlanned, ErrHardwareRisk} {
					if sentinel != tc.wantIs && errors.Is(err, sentinel) {
						t.Errorf("error %v is %v too", err, sentinel)
					}
				}
				return
			}
			if err != nil || m.Name != tc.want {
				t.Fatalf("ChooseMechanism = %v, %v; want %s", m, err, tc.want)
			}
			if m != tc.f.Mechanism(tc.want) {
				t.Error("ChooseMechanism returned a copy, not the fault's own mechanism")
			}
		})
	}
}

// TestChooseMechanismEveryFault holds the shipped catalogue to what a run
// needs: every fault runs on the twin without naming a mechanism, and on a
// target where nothing of a fault is built but something is planned the
// choice fails with ErrPlanned.
func TestChooseMechanismEveryFault(t *testing.T) {
	t.Parallel()
	for _, f := range All() {
		if m, err := ChooseMechanism(f, "", "twin", false); err != nil || m.Name != MechanismTwin {
			t.Errorf("%s on the twin: %v, %v; want the twin mechanism", f.ID, m, err)
		}
		for _, target := range []string{"local", "k8s"} {
			built, planned := false, false
			for _, m := range f.Mechanisms {
				built = built || slices.Contains(m.Targets, target)
				planned = planned || slices.Contains(m.Planned, target)
			}
			_, err := ChooseMechanism(f, "", target, true)
			if built != (err == nil) {
				t.Errorf("%s on %s: built %v, yet ChooseMechanism says %v", f.ID, target, built, err)
			}
			if !built && planned != errors.Is(err, ErrPlanned) {
				t.Errorf("%s on %s: %v; planned there: %v", f.ID, target, err, planned)
			}
		}
	}
}
