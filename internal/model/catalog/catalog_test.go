package catalog_test

import (
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
)

// wantIDs are the fault ids other packages code against; renaming one breaks
// them, so the list is spelled out rather than derived.
var wantIDs = []string{
	"hardware.xid", "hardware.ecc-sbe-storm", "hardware.ecc-dbe", "hardware.row-remap-pending",
	"hardware.row-remap-failure", "hardware.thermal-throttle", "hardware.power-brake", "hardware.nvlink-down",
	"hardware.nvlink-errors", "hardware.fallen-off-bus", "hardware.gsp-timeout",
	"exhaustion.sm-burn", "exhaustion.vram", "exhaustion.thermal-soak", "exhaustion.pcie", "exhaustion.noisy-neighbour",
	"nccl.p2p-off", "nccl.shm-off", "nccl.socket-fallback", "nccl.proto", "nccl.algo", "nccl.one-channel", "nccl.ib-timeout",
	"network.delay", "network.loss", "network.rate-limit", "network.partition",
	"ebpf.packet-drop", "ebpf.port-blackhole",
	"checkpoint.kill-writer", "checkpoint.fill-volume", "checkpoint.slow-storage", "checkpoint.storage-partition", "checkpoint.corrupt-newest",
	"numa.remote-memory", "numa.wrong-affinity", "numa.memory-pressure", "numa.cpu-saturation",
	"workload.kill-rank", "workload.hang-rank", "workload.straggler", "workload.pod-kill", "workload.cordon-drain", "workload.device-plugin-kill",
	"workload.node-taint",
}

// hardwareRiskMechanisms are the mechanisms that change power limits or
// clocks or reset a GPU; DESIGN.md §7 allows hardware-risk on nothing else.
var hardwareRiskMechanisms = []string{"nvml-power-limit", "nvml-clock-lock", "nvml-fan-speed", "nvlink-reset"}

var (
	allLayers  = []catalog.Layer{catalog.LayerKernelLog, catalog.LayerNVML, catalog.LayerDCGM, catalog.LayerExporterMetrics, catalog.LayerWorkload, catalog.LayerK8sAPI}
	allScopes  = []catalog.Scope{catalog.ScopeGPU, catalog.ScopeNode, catalog.ScopeRank, catalog.ScopeJob}
	allSafety  = []catalog.Safety{catalog.SafetySafe, catalog.SafetyDisruptive, catalog.SafetyHardwareRisk}
	allTargets = []string{"twin", "local", "k8s"}
	idForm     = regexp.MustCompile(`^([a-z0-9]+)\.[a-z0-9]+(-[a-z0-9]+)*$`)
)

// modes lists the Mode values each effect kind understands (effect.go);
// nil means the kind reads no Mode.
var modes = map[catalog.EffectKind][]string{
	catalog.EffectXID:        nil,
	catalog.EffectOffBus:     nil,
	catalog.EffectECC:        nil,
	catalog.EffectRowRemap:   {"pending", "failure"},
	catalog.EffectCooling:    nil,
	catalog.EffectPowerCap:   {"", "brake"},
	catalog.EffectNVLink:     {"down", "errors"},
	catalog.EffectSMLoad:     nil,
	catalog.EffectVRAM:       nil,
	catalog.EffectPCIe:       nil,
	catalog.EffectCollective: {"intra", "inter", "all", "hang"},
	catalog.EffectNetwork:    {"", "partition"},
	catalog.EffectCheckpoint: {"kill-writer", "fill", "slow", "partition", "corrupt"},
	catalog.EffectCompute:    {"", "numa-memory", "numa-cpu"},
	catalog.EffectRank:       {"kill", "hang"},
	catalog.EffectNode:       {"cordon", "drain", "device-plugin-kill", "pod-kill"},
	catalog.EffectHost:       {"memory", "cpu"},
}

func mustLookup(t *testing.T, id string) *catalog.Fault {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("Lookup(%q): not in the catalogue", id)
	}
	return f
}

func TestCatalogueHasEveryFault(t *testing.T) {
	all := catalog.All()
	if len(all) < 30 {
		t.Errorf("catalogue has %d faults, want at least 30", len(all))
	}
	var got []string
	for _, f := range all {
		got = append(got, f.ID)
	}
	for _, id := range wantIDs {
		if !slices.Contains(got, id) {
			t.Errorf("fault %q is missing", id)
		}
	}
	for _, id := range got {
		if !slices.Contains(wantIDs, id) {
			t.Errorf("fault %q is not in the agreed list; add it to wantIDs once others may code against it", id)
		}
	}
	for _, fam := range catalog.Families() {
		if !slices.ContainsFunc(all, func(f *catalog.Fault) bool { return f.Family == fam }) {
			t.Errorf("family %q has no fault", fam)
		}
	}
}

func TestFaultIdentity(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range catalog.All() {
		t.Run(f.ID, func(t *testing.T) {
			if seen[f.ID] {
				t.Errorf("id %q appears twice", f.ID)
			}
			seen[f.ID] = true
			m := idForm.FindStringSubmatch(f.ID)
			if m == nil {
				t.Fatalf("id %q is not of the form family.name", f.ID)
			}
			if m[1] != string(f.Family) {
				t.Errorf("id prefix %q differs from family %q", m[1], f.Family)
			}
			if !slices.Contains(catalog.Families(), f.Family) {
				t.Errorf("family %q is not one of Families()", f.Family)
			}
			if !slices.Contains(allScopes, f.Scope) {
				t.Errorf("scope %q is not known", f.Scope)
			}
			if !slices.Contains(allSafety, f.Safety) {
				t.Errorf("safety %q is not known", f.Safety)
			}
			if f.Summary == "" || strings.Contains(f.Summary, "\n") {
				t.Errorf("summary %q must be one non-empty line", f.Summary)
			}
			if len(f.Detectable) == 0 {
				t.Error("no detectable layer")
			}
			for _, l := range f.Detectable {
				if !slices.Contains(allLayers, l) {
					t.Errorf("detectable layer %q is not known", l)
				}
			}
			if hasDuplicates(f.Detectable) {
				t.Errorf("detectable layers repeat: %v", f.Detectable)
			}
			if got, ok := catalog.Lookup(f.ID); !ok || got != f {
				t.Errorf("Lookup(%q) does not return the catalogue's fault", f.ID)
			}
		})
	}
	if _, ok := catalog.Lookup("hardware.no-such-fault"); ok {
		t.Error("Lookup of an unknown id succeeded")
	}
}

func TestCatalogueOrder(t *testing.T) {
	rank := map[catalog.Family]int{}
	for i, fam := range catalog.Families() {
		rank[fam] = i
	}
	all := catalog.All()
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if rank[a.Family] > rank[b.Family] || (a.Family == b.Family && a.ID >= b.ID) {
			t.Errorf("%s comes before %s: not sorted by family order then id", a.ID, b.ID)
		}
	}
	again := catalog.All()
	if !slices.Equal(all, again) {
		t.Error("All returns a different order on a second call")
	}
}

func TestParamsResolveAndBound(t *testing.T) {
	for _, f := range catalog.All() {
		t.Run(f.ID, func(t *testing.T) {
			vals, err := f.Resolve(nil)
			if err != nil {
				t.Fatalf("Resolve(defaults): %v", err)
			}
			if _, err := f.Resolve(map[string]string{}); err != nil {
				t.Fatalf("Resolve(empty map): %v", err)
			}
			if len(vals) != len(f.Params) {
				t.Errorf("Resolve gave %d values for %d params", len(vals), len(f.Params))
			}
			names := map[string]bool{}
			for _, p := range f.Params {
				if names[p.Name] {
					t.Errorf("param %q declared twice", p.Name)
				}
				names[p.Name] = true
				if p.Help == "" {
					t.Errorf("param %q has no help", p.Name)
				}
				if _, ok := vals[p.Name]; !ok {
					t.Errorf("param %q missing from resolved values", p.Name)
				}
				if (p.Type == catalog.ParamEnum) != (len(p.Enum) > 0) {
					t.Errorf("param %q: enum values given for type %s or missing for enum", p.Name, p.Type)
				}
				if p.Type == catalog.ParamEnum && !slices.Contains(p.Enum, p.Default) {
					t.Errorf("param %q: default %q is not in %v", p.Name, p.Default, p.Enum)
				}
				for _, edge := range []struct{ name, bound, out string }{
					{"min", p.Min, outside(t, p, p.Min, -1)},
					{"max", p.Max, outside(t, p, p.Max, +1)},
				} {
					if edge.bound == "" {
						continue
					}
					if _, err := p.Parse(edge.bound); err != nil {
						t.Errorf("param %q: its own %s %q does not parse: %v", p.Name, edge.name, edge.bound, err)
					}
					_, err := f.Resolve(map[string]string{p.Name: edge.out})
					var pe *catalog.ParamError
					if !errors.As(err, &pe) || pe.Param != p.Name {
						t.Errorf("param %q = %q (just past its %s %s): got %v, want a ParamError for %q", p.Name, edge.out, edge.name, edge.bound, err, p.Name)
					}
				}
			}
		})
	}
}

// outside returns a value just past bound in direction dir (-1 below, +1
// above), written in the parameter's syntax.
func outside(t *testing.T, p catalog.Param, bound string, dir int) string {
	t.Helper()
	if bound == "" {
		return ""
	}
	switch p.Type {
	case catalog.ParamInt:
		n, err := strconv.ParseInt(bound, 10, 64)
		if err != nil {
			t.Fatalf("param %q: bound %q: %v", p.Name, bound, err)
		}
		return strconv.FormatInt(n+int64(dir), 10)
	case catalog.ParamBytes:
		n, err := catalog.ParseBytes(bound)
		if err != nil {
			t.Fatalf("param %q: bound %q: %v", p.Name, bound, err)
		}
		return strconv.FormatInt(n+int64(dir), 10)
	case catalog.ParamFloat:
		x, err := strconv.ParseFloat(bound, 64)
		if err != nil {
			t.Fatalf("param %q: bound %q: %v", p.Name, bound, err)
		}
		return strconv.FormatFloat(math.Nextafter(x, float64(dir)*math.Inf(1)), 'g', -1, 64)
	case catalog.ParamDuration:
		d, err := time.ParseDuration(bound)
		if err != nil {
			t.Fatalf("param %q: bound %q: %v", p.Name, bound, err)
		}
		return (d + time.Duration(dir)).String()
	}
	t.Fatalf("param %q of type %s has a bound; only numbers, bytes and durations can", p.Name, p.Type)
	return ""
}

func TestResolveRejectsUnknownParams(t *testing.T) {
	for _, f := range catalog.All() {
		t.Run(f.ID, func(t *testing.T) {
			_, err := f.Resolve(map[string]string{"no-such-param": "1"})
			var pe *catalog.ParamError
			if !errors.As(err, &pe) || pe.Param != "no-such-param" {
				t.Fatalf("Resolve with an unknown param: got %v, want a ParamError naming it", err)
			}
			if !strings.Contains(err.Error(), "no-such-param") {
				t.Errorf("error %q does not name the parameter", err)
			}
		})
	}
}

func TestFloatParamsRejectNonFinite(t *testing.T) {
	for _, f := range catalog.All() {
		for _, p := range f.Params {
			if p.Type != catalog.ParamFloat {
				continue
			}
			for _, bad := range []string{"NaN", "Inf", "-Inf"} {
				t.Run(f.ID+"/"+p.Name+"="+bad, func(t *testing.T) {
					_, err := f.Resolve(map[string]string{p.Name: bad})
					var pe *catalog.ParamError
					if !errors.As(err, &pe) || pe.Param != p.Name {
						t.Errorf("got %v, want a ParamError for %q", err, p.Name)
					}
				})
			}
		}
	}
}

func TestChecks(t *testing.T) {
	tests := []struct {
		name    string
		fault   string
		params  map[string]string
		param   string // the ParamError's Param; "" when the values are fine
		message string // the whole error text, when it is fixed
	}{
		{"xid unknown code", "hardware.xid", map[string]string{"code": "1000"}, "code", "code: XID code 1000 is not a known XID"},
		{"xid fallen off the bus", "hardware.xid", map[string]string{"code": "79"}, "", ""},
		{"xid with pid and name", "hardware.xid", map[string]string{"code": "48", "pid": "4242", "process": "python3"}, "", ""},
		{"xid name too long for comm", "hardware.xid", map[string]string{"process": "a-very-long-name"}, "process", ""},
		{"xid name forging a second line", "hardware.xid", map[string]string{"process": "x\nNVRM: Xid"}, "process", ""},
		{"xid pid below -1", "hardware.xid", map[string]string{"pid": "-2"}, "pid", ""},
		{"port range inverted", "ebpf.port-blackhole", map[string]string{"min-port": "5000", "max-port": "4000"}, "max-port", ""},
		{"port range of one", "ebpf.port-blackhole", map[string]string{"min-port": "29500", "max-port": "29500"}, "", ""},
		{"checkpoint relative path", "checkpoint.corrupt-newest", map[string]string{"path": "ckpt"}, "path", ""},
		{"checkpoint path escaping", "checkpoint.fill-volume", map[string]string{"path": "/ckpt/../etc"}, "path", ""},
		{"checkpoint absolute path", "checkpoint.slow-storage", map[string]string{"path": "/checkpoints/run1"}, "", ""},
		{"storage server from the mount", "checkpoint.storage-partition", map[string]string{"path": "/mnt/ckpt"}, "", ""},
		{"storage server address", "checkpoint.storage-partition", map[string]string{"server": "10.0.0.7", "port": "2049"}, "", ""},
		{"storage server cidr", "checkpoint.storage-partition", map[string]string{"server": "10.0.0.0/24"}, "", ""},
		{"storage server host name", "checkpoint.storage-partition", map[string]string{"server": "storage-0.example.org"}, "", ""},
		{"storage server a mount source", "checkpoint.storage-partition", map[string]string{"server": "storage-0:/export"}, "server", ""},
		{"storage server bad cidr", "checkpoint.storage-partition", map[string]string{"server": "10.0.0.0/33"}, "server", ""},
		{"storage relative path", "checkpoint.storage-partition", map[string]string{"path": "ckpt", "server": "10.0.0.7"}, "path", ""},
		{"storage port above range", "checkpoint.storage-partition", map[string]string{"port": "65536"}, "port", ""},
		{"device plugin empty selector", "workload.device-plugin-kill", map[string]string{"selector": " "}, "selector", ""},
		{"vram above bound", "exhaustion.vram", map[string]string{"fraction": "1"}, "fraction", "fraction: 1 is above the maximum 0.99"},
		{"partition bad cidr", "network.partition", map[string]string{"cidr": "10.0.0.0/33"}, "cidr", ""},
		{"proto not an enum value", "nccl.proto", map[string]string{"proto": "ll"}, "proto", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mustLookup(t, tc.fault).Resolve(tc.params)
			if tc.param == "" {
				if err != nil {
					t.Fatalf("Resolve(%v): %v", tc.params, err)
				}
				return
			}
			var pe *catalog.ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("Resolve(%v): got %v, want a *ParamError", tc.params, err)
			}
			if pe.Param != tc.param {
				t.Errorf("ParamError.Param = %q, want %q", pe.Param, tc.param)
			}
			if tc.message != "" && err.Error() != tc.message {
				t.Errorf("error = %q, want %q", err.Error(), tc.message)
			}
		})
	}
}

func TestMechanisms(t *testing.T) {
	for _, f := range catalog.All() {
		t.Run(f.ID, func(t *testing.T) {
			if len(f.Mechanisms) == 0 {
				t.Fatal("no mechanism")
			}
			if f.Safety != f.Mechanisms[0].Safety {
				t.Errorf("fault safety %q differs from its first mechanism's %q", f.Safety, f.Mechanisms[0].Safety)
			}
			var twins, real, riskFree int
			names := map[string]bool{}
			for _, m := range f.Mechanisms {
				if names[m.Name] {
					t.Errorf("mechanism %q appears twice", m.Name)
				}
				names[m.Name] = true
				if m.Description == "" {
					t.Errorf("mechanism %q has no description", m.Name)
				}
				if !slices.Contains(allSafety, m.Safety) {
					t.Errorf("mechanism %q: safety %q is not known", m.Name, m.Safety)
				}
				risky := slices.Contains(hardwareRiskMechanisms, m.Name)
				if risky != (m.Safety == catalog.SafetyHardwareRisk) {
					t.Errorf("mechanism %q is %s; only mechanisms that touch clocks, power or reset (%v) may be, and they must be",
						m.Name, m.Safety, hardwareRiskMechanisms)
				}
				if len(m.Targets)+len(m.Planned) == 0 {
					t.Errorf("mechanism %q has no target, built or planned", m.Name)
				}
				for _, tg := range slices.Concat(m.Targets, m.Planned) {
					if !slices.Contains(allTargets, tg) {
						t.Errorf("mechanism %q: target %q is not known", m.Name, tg)
					}
				}
				for _, tg := range m.Planned {
					if slices.Contains(m.Targets, tg) {
						t.Errorf("mechanism %q: target %q is both built and planned", m.Name, tg)
					}
				}
				if m.Targets == nil || m.Planned == nil {
					t.Errorf("mechanism %q: nil targets or planned; JSON readers want arrays", m.Name)
				}
				if len(m.Reaches) == 0 {
					t.Errorf("mechanism %q reaches nothing", m.Name)
				}
				for _, l := range m.Reaches {
					if slices.Contains(m.Misses, l) {
						t.Errorf("mechanism %q both reaches and misses %q", m.Name, l)
					}
					if !slices.Contains(f.Detectable, l) {
						t.Errorf("mechanism %q reaches %q, which a real occurrence does not (detectable: %v)", m.Name, l, f.Detectable)
					}
				}
				// Honesty both ways: every detectable layer is either reached
				// or declared missed, and nothing else is declared missed.
				var want []catalog.Layer
				for _, l := range f.Detectable {
					if !slices.Contains(m.Reaches, l) {
						want = append(want, l)
					}
				}
				if !sameSet(m.Misses, want) {
					t.Errorf("mechanism %q misses %v, want exactly the detectable layers it does not reach: %v", m.Name, m.Misses, want)
				}
				if hasDuplicates(m.Reaches) || hasDuplicates(m.Misses) {
					t.Errorf("mechanism %q repeats a layer", m.Name)
				}
				if slices.Equal(m.Targets, []string{"twin"}) && len(m.Planned) == 0 {
					twins++
					if m.Name != catalog.MechanismTwin {
						t.Errorf("twin mechanism is named %q, want %q", m.Name, catalog.MechanismTwin)
					}
					if m.Safety != catalog.SafetySafe {
						t.Errorf("twin mechanism is %s: a simulation cannot harm anything", m.Safety)
					}
					if !sameSet(m.Reaches, f.Detectable) {
						t.Errorf("twin mechanism reaches %v, want every detectable layer %v", m.Reaches, f.Detectable)
					}
					continue
				}
				if slices.Contains(m.Targets, "twin") || slices.Contains(m.Planned, "twin") {
					t.Errorf("mechanism %q mixes the twin with real targets", m.Name)
				}
				real++
				if m.Safety != catalog.SafetyHardwareRisk {
					riskFree++
				}
			}
			if twins != 1 {
				t.Errorf("%d twin mechanisms, want 1", twins)
			}
			if real == 0 {
				t.Error("no real (non-twin) mechanism")
			}
			if f.Mechanism(catalog.MechanismTwin) == nil {
				t.Errorf("Mechanism(%q) = nil", catalog.MechanismTwin)
			}
			if slices.ContainsFunc(f.Mechanisms, func(m catalog.Mechanism) bool { return m.Safety == catalog.SafetyHardwareRisk }) && riskFree == 0 {
				t.Error("has a hardware-risk mechanism but no real mechanism without that risk")
			}
		})
	}
}

// TestHardwareRiskFaultsHaveSaferMechanisms pins the faults whose most
// faithful mechanism touches power or clocks: each also offers a mechanism
// that does not, so it can run without the allow flag.
func TestHardwareRiskFaultsHaveSaferMechanisms(t *testing.T) {
	tests := []struct {
		fault, risky, safer string
	}{
		{"hardware.power-brake", "nvml-power-limit", "dcgm-inject"},
		{"hardware.thermal-throttle", "nvml-clock-lock", "burn-heat"},
		{"hardware.thermal-throttle", "nvml-fan-speed", "dcgm-inject"},
		{"hardware.nvlink-down", "nvlink-reset", "dcgm-inject"},
	}
	for _, tc := range tests {
		t.Run(tc.fault+"/"+tc.risky, func(t *testing.T) {
			f := mustLookup(t, tc.fault)
			if m := f.Mechanism(tc.risky); m == nil || m.Safety != catalog.SafetyHardwareRisk {
				t.Errorf("Mechanism(%q) = %+v, want a hardware-risk mechanism", tc.risky, m)
			}
			if m := f.Mechanism(tc.safer); m == nil || m.Safety == catalog.SafetyHardwareRisk {
				t.Errorf("Mechanism(%q) = %+v, want a mechanism without hardware risk", tc.safer, m)
			}
		})
	}
}

func TestEffectsOfDefaults(t *testing.T) {
	for _, f := range catalog.All() {
		t.Run(f.ID, func(t *testing.T) {
			if f.Signature.Effects == nil {
				t.Fatal("Signature.Effects is nil")
			}
			vals, err := f.Resolve(nil)
			if err != nil {
				t.Fatalf("Resolve(defaults): %v", err)
			}
			effects := f.Signature.Effects(vals)
			if len(effects) == 0 {
				t.Fatal("no effect for the default values")
			}
			for _, e := range effects {
				if err := validEffect(e); err != nil {
					t.Errorf("%+v: %v", e, err)
				}
			}
			if f.Signature.Workload == "" {
				t.Error("signature says nothing about what the workload sees")
			}
			if f.Signature.Silent && len(f.Signature.Series) > 0 && slices.ContainsFunc(f.Signature.Series, movesGPUState) {
				t.Errorf("silent fault names GPU series beyond utilisation: %v", f.Signature.Series)
			}
		})
	}
}

// movesGPUState reports a dcgm-exporter series other than utilisation, which
// a silent fault must not move.
func movesGPUState(s string) bool {
	return strings.HasPrefix(s, "DCGM_") && s != "DCGM_FI_DEV_GPU_UTIL"
}

// validEffect checks an effect against what effect.go says its kind reads.
func validEffect(e catalog.Effect) error {
	allowed, known := modes[e.Kind]
	if !known {
		return errors.New("unknown kind")
	}
	if allowed == nil && e.Mode != "" || allowed != nil && !slices.Contains(allowed, e.Mode) {
		return errors.New("mode not understood by its kind")
	}
	for _, x := range []float64{e.Value, e.Factor} {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return errors.New("value or factor not a finite non-negative number")
		}
	}
	positiveFactor := func(lo, hi float64) error {
		if e.Factor <= lo || e.Factor > hi {
			return errors.New("factor out of range for its kind")
		}
		return nil
	}
	switch e.Kind {
	case catalog.EffectXID:
		if _, ok := xid.Lookup(e.Code); !ok {
			return errors.New("XID code not in the table")
		}
	case catalog.EffectCooling:
		return positiveFactor(0, 100)
	case catalog.EffectPowerCap:
		return positiveFactor(0, 1)
	case catalog.EffectCompute:
		if e.Factor < 1 {
			return errors.New("compute factor below 1")
		}
	case catalog.EffectCollective:
		if e.Mode != "hang" {
			return positiveFactor(0, 1)
		}
	case catalog.EffectNetwork:
		if e.Mode != "partition" {
			return positiveFactor(0, 1)
		}
	case catalog.EffectSMLoad, catalog.EffectVRAM:
		if e.Value <= 0 || e.Value > 1 {
			return errors.New("share out of (0, 1]")
		}
	case catalog.EffectPCIe:
		if e.Value <= 0 || e.Factor < 1 {
			return errors.New("pcie needs a rate and a slowdown of at least 1")
		}
	case catalog.EffectNVLink:
		if e.Mode == "down" {
			return positiveFactor(0, 1)
		}
		if e.Value <= 0 {
			return errors.New("nvlink errors need a rate")
		}
	case catalog.EffectCheckpoint:
		if e.Mode == "slow" {
			return positiveFactor(0, 1)
		}
	}
	return nil
}

func TestEffectsFollowParams(t *testing.T) {
	e := func(kind catalog.EffectKind, mode string, code int, value, factor float64) catalog.Effect {
		return catalog.Effect{Kind: kind, Mode: mode, Code: code, Value: value, Factor: factor}
	}
	tests := []struct {
		name   string
		fault  string
		params map[string]string
		want   []catalog.Effect
	}{
		{"xid default", "hardware.xid", nil, []catalog.Effect{e(catalog.EffectXID, "", 13, 0, 0)}},
		{"xid 79", "hardware.xid", map[string]string{"code": "79"}, []catalog.Effect{e(catalog.EffectXID, "", 79, 0, 0)}},
		{"gsp timeout is xid 119", "hardware.gsp-timeout", nil, []catalog.Effect{e(catalog.EffectXID, "", 119, 0, 0)}},
		{"fallen off the bus", "hardware.fallen-off-bus", nil, []catalog.Effect{e(catalog.EffectOffBus, "", 0, 0, 0)}},
		{"sbe storm rate", "hardware.ecc-sbe-storm", map[string]string{"rate": "500"}, []catalog.Effect{e(catalog.EffectECC, "", 0, 500, 0)}},
		{"one dbe", "hardware.ecc-dbe", nil, []catalog.Effect{e(catalog.EffectECC, "", 1, 0, 0)}},
		{"row remap failure", "hardware.row-remap-failure", nil, []catalog.Effect{e(catalog.EffectRowRemap, "failure", 0, 0, 0)}},
		{"cooling factor", "hardware.thermal-throttle", map[string]string{"factor": "3"}, []catalog.Effect{e(catalog.EffectCooling, "", 0, 0, 3)}},
		{"power brake", "hardware.power-brake", map[string]string{"fraction": "0.3"}, []catalog.Effect{e(catalog.EffectPowerCap, "brake", 0, 0, 0.3)}},
		{"nvlink down", "hardware.nvlink-down", nil, []catalog.Effect{e(catalog.EffectNVLink, "down", 74, 0, 0.09)}},
		{"thermal soak is load and a heat-soaked chassis", "exhaustion.thermal-soak", nil,
			[]catalog.Effect{e(catalog.EffectSMLoad, "", 0, 1, 0), e(catalog.EffectCooling, "", 0, 0, 1.42)}},
		{"default cooling failure holds a HW slowdown", "hardware.thermal-throttle", nil, []catalog.Effect{e(catalog.EffectCooling, "", 0, 0, 8)}},
		{"vram fraction", "exhaustion.vram", map[string]string{"fraction": "0.5"}, []catalog.Effect{e(catalog.EffectVRAM, "", 0, 0.5, 0)}},
		{"neighbour without memory", "exhaustion.noisy-neighbour", map[string]string{"share": "0.3", "memory": "0"}, []catalog.Effect{e(catalog.EffectSMLoad, "", 0, 0.3, 0)}},
		{"neighbour with memory", "exhaustion.noisy-neighbour", map[string]string{"share": "0.3", "memory": "0.2"},
			[]catalog.Effect{e(catalog.EffectSMLoad, "", 0, 0.3, 0), e(catalog.EffectVRAM, "", 0, 0.2, 0)}},
		{"p2p off measured", "nccl.p2p-off", nil, []catalog.Effect{e(catalog.EffectCollective, "intra", 0, 0, 28.8/300.8)}},
		{"shm off changes nothing", "nccl.shm-off", nil, []catalog.Effect{e(catalog.EffectCollective, "intra", 0, 0, 1)}},
		{"socket fallback", "nccl.socket-fallback", nil, []catalog.Effect{e(catalog.EffectCollective, "all", 0, 0, 3.17/300.8)}},
		{"proto LL", "nccl.proto", nil, []catalog.Effect{e(catalog.EffectCollective, "all", 0, 0, 114.3/300.8)}},
		{"proto LL128", "nccl.proto", map[string]string{"proto": "LL128"}, []catalog.Effect{e(catalog.EffectCollective, "all", 0, 0, 276.0/300.8)}},
		{"proto Simple", "nccl.proto", map[string]string{"proto": "Simple"}, []catalog.Effect{e(catalog.EffectCollective, "all", 0, 0, 1)}},
		{"one channel", "nccl.one-channel", nil, []catalog.Effect{e(catalog.EffectCollective, "all", 0, 0, 21.0/300.8)}},
		{"delay", "network.delay", map[string]string{"delay": "20ms"}, []catalog.Effect{e(catalog.EffectNetwork, "", 0, 0.02, 1)}},
		{"loss 10%", "network.loss", nil, []catalog.Effect{e(catalog.EffectNetwork, "", 0, 0, 1/(1+100*0.1))}},
		{"no loss", "network.loss", map[string]string{"probability": "0"}, []catalog.Effect{e(catalog.EffectNetwork, "", 0, 0, 1)}},
		{"certain loss is a partition", "network.loss", map[string]string{"probability": "1"}, []catalog.Effect{e(catalog.EffectNetwork, "partition", 0, 0, 0)}},
		{"rate limit to a tenth of the rail", "network.rate-limit", map[string]string{"rate": "5G"}, []catalog.Effect{e(catalog.EffectNetwork, "", 0, 0, 0.1)}},
		{"rate limit above the rail", "network.rate-limit", map[string]string{"rate": "100G"}, []catalog.Effect{e(catalog.EffectNetwork, "", 0, 0, 1)}},
		{"partition", "network.partition", nil, []catalog.Effect{e(catalog.EffectNetwork, "partition", 0, 0, 0)}},
		{"ebpf drop both ways", "ebpf.packet-drop", map[string]string{"probability": "0.1", "direction": "both"},
			[]catalog.Effect{e(catalog.EffectNetwork, "", 0, 0, 1/(1+100*(1-0.9*0.9)))}},
		{"slow storage", "checkpoint.slow-storage", map[string]string{"factor": "0.25"}, []catalog.Effect{e(catalog.EffectCheckpoint, "slow", 0, 0, 0.25)}},
		{"corrupt newest", "checkpoint.corrupt-newest", nil, []catalog.Effect{e(catalog.EffectCheckpoint, "corrupt", 0, 0, 0)}},
		{"remote memory", "numa.remote-memory", nil, []catalog.Effect{e(catalog.EffectCompute, "numa-memory", 0, 1, 1.25)}},
		{"kill rank", "workload.kill-rank", nil, []catalog.Effect{e(catalog.EffectRank, "kill", 0, 0, 0)}},
		{"hang rank default watchdog", "workload.hang-rank", nil, []catalog.Effect{e(catalog.EffectRank, "hang", 0, 600, 0)}},
		{"hang rank short watchdog", "workload.hang-rank", map[string]string{"watchdog": "90s"}, []catalog.Effect{e(catalog.EffectRank, "hang", 0, 90, 0)}},
		{"straggler", "workload.straggler", map[string]string{"slowdown": "2"}, []catalog.Effect{e(catalog.EffectCompute, "", 0, 0, 2)}},
		{"drain", "workload.cordon-drain", nil, []catalog.Effect{e(catalog.EffectNode, "drain", 0, 0, 0)}},
		{"cordon only", "workload.cordon-drain", map[string]string{"drain": "false"}, []catalog.Effect{e(catalog.EffectNode, "cordon", 0, 0, 0)}},
		{"device plugin", "workload.device-plugin-kill", nil, []catalog.Effect{e(catalog.EffectNode, "device-plugin-kill", 0, 0, 0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustLookup(t, tc.fault)
			vals, err := f.Resolve(tc.params)
			if err != nil {
				t.Fatalf("Resolve(%v): %v", tc.params, err)
			}
			got := f.Signature.Effects(vals)
			if !slices.EqualFunc(got, tc.want, approxEffect) {
				t.Errorf("Effects = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func approxEffect(a, b catalog.Effect) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	return a.Kind == b.Kind && a.Mode == b.Mode && a.Code == b.Code && near(a.Value, b.Value) && near(a.Factor, b.Factor)
}

// TestEffectsAreFresh guards the shared catalogue: a caller that edits the
// effects it was given must not change what the next caller gets.
func TestEffectsAreFresh(t *testing.T) {
	f := mustLookup(t, "hardware.nvlink-down")
	vals, err := f.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	first := f.Signature.Effects(vals)
	first[0].Factor = 42
	if again := f.Signature.Effects(vals); again[0].Factor == 42 {
		t.Error("a caller's edit of the effects leaked into the catalogue")
	}
}

// TestLossModelIsMonotonic checks the documented loss model's shape: more
// loss never gives more bandwidth, and no loss costs nothing.
func TestLossModelIsMonotonic(t *testing.T) {
	f := mustLookup(t, "network.loss")
	prev := math.Inf(1)
	for p := 0.0; p < 1; p += 0.01 {
		vals, err := f.Resolve(map[string]string{"probability": strconv.FormatFloat(p, 'f', 2, 64)})
		if err != nil {
			t.Fatal(err)
		}
		got := f.Signature.Effects(vals)[0].Factor
		if got > prev || got <= 0 || got > 1 {
			t.Fatalf("p=%.2f: factor %g after %g", p, got, prev)
		}
		prev = got
	}
}

// TestXIDSignatures holds every fault that writes an XID line to its one
// code (Signature.XID), rather than restating the codes: a fault with a
// kernel-log mechanism has a code in the XID table, or takes it as its
// code parameter (hardware.xid, checked against the table by checkXID);
// the signature's first log line is the line our parser reads as that
// code; every "XID N" the fault's text names is that code, and a fault
// without one names none; and the twin's XID effects play that code.
func TestXIDSignatures(t *testing.T) {
	xidRef := regexp.MustCompile(`\bXID (\d+)`)
	for _, f := range catalog.All() {
		t.Run(f.ID, func(t *testing.T) {
			code := f.Signature.XID
			kernelLog := f.Mechanism(catalog.MechanismKernelLog) != nil
			hasCodeParam := f.Param("code") != nil
			switch {
			case code == 0 && kernelLog && !hasCodeParam:
				t.Fatal("a kernel-log mechanism, but no XID code in the signature and no code parameter")
			case code == 0:
			case hasCodeParam:
				t.Fatalf("XID %d in the signature and a code parameter too", code)
			default:
				if _, ok := xid.Lookup(code); !ok {
					t.Fatalf("XID %d is not in the XID table", code)
				}
				logs := f.Signature.Logs
				if len(logs) == 0 {
					t.Fatal("no log line")
				}
				ev, ok := xid.ParseLine(logs[0])
				if !ok {
					t.Fatalf("xid.ParseLine(%q) does not read it", logs[0])
				}
				if ev.Code != code || ev.PCI != "0000:18:00" {
					t.Errorf("parsed code %d on %s, want %d on 0000:18:00", ev.Code, ev.PCI, code)
				}
			}
			texts := []string{f.Summary, f.Signature.Workload}
			for _, p := range f.Params {
				texts = append(texts, p.Help)
			}
			for _, m := range f.Mechanisms {
				texts = append(texts, m.Description)
			}
			for _, text := range texts {
				for _, m := range xidRef.FindAllStringSubmatch(text, -1) {
					if n, _ := strconv.Atoi(m[1]); n != code {
						t.Errorf("the text names XID %d, the signature's code is %d: %q", n, code, text)
					}
				}
			}
			if code == 0 {
				return
			}
			vals, err := f.Resolve(nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range f.Signature.Effects(vals) {
				if (e.Kind == catalog.EffectXID || e.Kind == catalog.EffectNVLink && e.Code != 0) && e.Code != code {
					t.Errorf("the twin plays %s with code %d, the signature's code is %d", e.Kind, e.Code, code)
				}
			}
		})
	}
	want := "NVRM: Xid (PCI:0000:18:00): 79, pid=2345, name=python3, GPU has fallen off the bus."
	if got := mustLookup(t, "hardware.fallen-off-bus").Signature.Logs[0]; got != want {
		t.Errorf("XID 79 line = %q, want %q", got, want)
	}
}

func TestJSON(t *testing.T) {
	data, err := json.Marshal(catalog.All())
	if err != nil {
		t.Fatalf("json.Marshal(All()): %v", err)
	}
	var objs []map[string]json.RawMessage
	if err := json.Unmarshal(data, &objs); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if len(objs) != len(catalog.All()) {
		t.Fatalf("%d objects for %d faults", len(objs), len(catalog.All()))
	}
	for i, o := range objs {
		id := catalog.All()[i].ID
		for key, first := range map[string]byte{"id": '"', "family": '"', "params": '[', "mechanisms": '[', "signature": '{', "detectable": '['} {
			raw, ok := o[key]
			if !ok || len(raw) == 0 || raw[0] != first {
				t.Errorf("%s: key %q is %s, want a value starting with %q", id, key, raw, first)
			}
		}
	}
}

// FuzzResolve feeds arbitrary text to every parameter of every fault:
// Resolve must not panic, and values it accepts must give effects the twin
// can play.
func FuzzResolve(f *testing.F) {
	all := catalog.All()
	for i, x := range all {
		for j, p := range x.Params {
			f.Add(uint(i), uint(j), p.Default)
			f.Add(uint(i), uint(j), p.Min)
			f.Add(uint(i), uint(j), p.Max)
		}
	}
	f.Add(uint(0), uint(0), "NaN")
	f.Add(uint(0), uint(2), "a\nb")
	f.Fuzz(func(t *testing.T, fi, pi uint, text string) {
		x := all[fi%uint(len(all))]
		if len(x.Params) == 0 {
			return
		}
		p := x.Params[pi%uint(len(x.Params))]
		vals, err := x.Resolve(map[string]string{p.Name: text})
		if err != nil {
			var pe *catalog.ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("%s %s=%q: error %v is not a *ParamError", x.ID, p.Name, text, err)
			}
			return
		}
		for _, e := range x.Signature.Effects(vals) {
			if err := validEffect(e); err != nil {
				t.Fatalf("%s %s=%q: effect %+v: %v", x.ID, p.Name, text, e, err)
			}
		}
	})
}

func sameSet[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return !hasDuplicates(a)
}

func hasDuplicates[T comparable](s []T) bool {
	for i := range s {
		if slices.Contains(s[i+1:], s[i]) {
			return true
		}
	}
	return false
}
