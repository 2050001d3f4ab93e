package catalog

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
)

// testFaults is a small catalogue of its own, so the adapter's behaviour is
// pinned independently of what the real entries say.
func testFaults() []*Fault {
	return []*Fault{
		{
			ID: "hardware.xid", Family: FamilyHardware, Scope: ScopeGPU,
			Params: []Param{{Name: "code", Type: ParamInt, Default: "13", Min: "1"}},
			Mechanisms: []Mechanism{
				{Name: "kmsg", Targets: []string{"local", "k8s"}},
				{Name: "twin", Targets: []string{"twin"}},
			},
			Check: func(v Values) error {
				if c := v.Int("code"); c > 200 {
					return &ParamError{Param: "code", Err: fmt.Errorf("XID code %d is not a known XID", c)}
				}
				return nil
			},
		},
		{
			ID: "exhaustion.vram", Family: FamilyExhaustion, Scope: ScopeGPU,
			Params:     []Param{{Name: "fraction", Type: ParamFloat, Default: "0.9", Min: "0.01", Max: "0.99"}},
			Mechanisms: []Mechanism{{Name: "twin", Targets: []string{"twin"}}},
		},
		{
			ID: "network.loss", Family: FamilyNetwork, Scope: ScopeNode,
			Params: []Param{
				{Name: "probability", Type: ParamFloat, Default: "0.1", Min: "0", Max: "1"},
				{Name: "for", Type: ParamDuration, Default: "30s"},
			},
			Mechanisms: []Mechanism{{Name: "twin", Targets: []string{"twin"}}},
			Check:      func(Values) error { return nil },
		},
		{
			ID: "workload.kill-rank", Family: FamilyWorkload, Scope: ScopeRank,
			Mechanisms: []Mechanism{{Name: "twin", Targets: []string{"twin"}}},
			// A check that fails without naming a parameter.
			Check: func(Values) error { return errors.New("rank faults need a job") },
		},
	}
}

func TestResolveSpecErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec v1alpha1.FaultSpec
		want string
	}{
		{"typo in the id", v1alpha1.FaultSpec{ID: "hardware.xdi"}, `id: unknown fault "hardware.xdi" (did you mean hardware.xid?)`},
		{"case in the id", v1alpha1.FaultSpec{ID: "Hardware.XID"}, `id: unknown fault "Hardware.XID" (did you mean hardware.xid?)`},
		{"name without family", v1alpha1.FaultSpec{ID: "vram"}, `id: unknown fault "vram" (did you mean exhaustion.vram?)`},
		{"family wrong, name right", v1alpha1.FaultSpec{ID: "gpu.xid"}, `id: unknown fault "gpu.xid" (did you mean hardware.xid?)`},
		{"nothing close", v1alpha1.FaultSpec{ID: "cosmic.rays"}, `id: unknown fault "cosmic.rays"; run 'gpuchaos faults' to list them`},
		{"unknown mechanism", v1alpha1.FaultSpec{ID: "hardware.xid", Mechanism: "dcgm"}, `mechanism: fault hardware.xid has no mechanism "dcgm" (known: kmsg, twin)`},
		{"unknown parameter", v1alpha1.FaultSpec{ID: "hardware.xid", Params: map[string]v1alpha1.ParamValue{"cod": "79"}}, "params.cod: unknown parameter of hardware.xid (known: code)"},
		{"unparsable parameter", v1alpha1.FaultSpec{ID: "hardware.xid", Params: map[string]v1alpha1.ParamValue{"code": "x79"}}, `params.code: "x79" is not a valid int`},
		{"below the minimum", v1alpha1.FaultSpec{ID: "hardware.xid", Params: map[string]v1alpha1.ParamValue{"code": "0"}}, "params.code: 0 is below the minimum 1"},
		{"above the maximum", v1alpha1.FaultSpec{ID: "exhaustion.vram", Params: map[string]v1alpha1.ParamValue{"fraction": "1.5"}}, "params.fraction: 1.5 is above the maximum 0.99"},
		{"rejected by the fault's check", v1alpha1.FaultSpec{ID: "hardware.xid", Params: map[string]v1alpha1.ParamValue{"code": "1000"}}, "params.code: XID code 1000 is not a known XID"},
		{"odd parameter name is quoted", v1alpha1.FaultSpec{ID: "network.loss", Params: map[string]v1alpha1.ParamValue{"p.x": "1"}}, `params["p.x"]: unknown parameter of network.loss (known: probability, for)`},
		{"check without a parameter", v1alpha1.FaultSpec{ID: "workload.kill-rank"}, "params: rank faults need a job"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, m, v, fe := resolveSpec(testFaults(), tc.spec)
			if fe == nil {
				t.Fatalf("resolveSpec = %v, %v, %v; want error %q", f, m, v, tc.want)
			}
			if got := fe.Error(); got != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

func TestResolveSpecValues(t *testing.T) {
	t.Parallel()
	f, m, v, fe := resolveSpec(testFaults(), v1alpha1.FaultSpec{
		ID: "network.loss", Mechanism: "twin",
		Params: map[string]v1alpha1.ParamValue{"probability": "0.3"},
	})
	if fe != nil {
		t.Fatal(fe)
	}
	if f.ID != "network.loss" || m == nil || m.Name != "twin" {
		t.Errorf("got fault %s mechanism %v, want network.loss/twin", f.ID, m)
	}
	if got := v.Float("probability"); got != 0.3 {
		t.Errorf("probability = %v, want 0.3", got)
	}
	if got := v.Duration("for"); got != 30*time.Second {
		t.Errorf("for = %v, want the default 30s", got)
	}
	_, m, _, fe = resolveSpec(testFaults(), v1alpha1.FaultSpec{ID: "network.loss"})
	if fe != nil || m != nil {
		t.Errorf("no mechanism named: got %v, %v; want nil mechanism, no error", m, fe)
	}
}

// TestCheckSpecRealCatalogue pins what experiment authors meet with the
// shipped catalogue.
func TestCheckSpecRealCatalogue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec v1alpha1.FaultSpec
		want string // "" means valid
	}{
		{"xid 79", v1alpha1.FaultSpec{ID: "hardware.xid", Params: map[string]v1alpha1.ParamValue{"code": "79"}}, ""},
		{"xid 1000", v1alpha1.FaultSpec{ID: "hardware.xid", Params: map[string]v1alpha1.ParamValue{"code": "1000"}}, "params.code: XID code 1000 is not a known XID"},
		{"xid typo", v1alpha1.FaultSpec{ID: "hardware.xdi"}, `id: unknown fault "hardware.xdi" (did you mean hardware.xid?)`},
		{"vram over", v1alpha1.FaultSpec{ID: "exhaustion.vram", Params: map[string]v1alpha1.ParamValue{"fraction": "1.2"}}, "params.fraction: 1.2 is above the maximum"},
		{"thermal defaults", v1alpha1.FaultSpec{ID: "hardware.thermal-throttle"}, ""},
		{"nccl p2p", v1alpha1.FaultSpec{ID: "nccl.p2p-off"}, ""},
		{"loss", v1alpha1.FaultSpec{ID: "network.loss", Params: map[string]v1alpha1.ParamValue{"probability": "2"}}, "params.probability: 2 is above the maximum"},
		{"kill rank", v1alpha1.FaultSpec{ID: "workload.kill-rank"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fe := CheckSpec(tc.spec)
			switch {
			case tc.want == "" && fe != nil:
				t.Errorf("CheckSpec = %v, want valid", fe)
			case tc.want != "" && fe == nil:
				t.Errorf("CheckSpec = nil, want %q", tc.want)
			case tc.want != "" && !strings.HasPrefix(fe.Error(), tc.want):
				t.Errorf("CheckSpec = %q, want it to start with %q", fe, tc.want)
			}
			_, _, _, err := ResolveSpec(tc.spec)
			if (err == nil) != (fe == nil) {
				t.Errorf("ResolveSpec error %v disagrees with CheckSpec %v", err, fe)
			}
		})
	}
}
