package twin

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/numa"
)

// TestOptInCountersMatchMetricData holds OptInCounters to internal/detect/rules'
// metric data: every opt-in counter of dcgm-exporter's own counters files
// (metrics/dcgm-exporter.csv), which the analysis tells a user to enable
// with --opt-in, is one the twin can export, and the twin offers none the
// data does not know (observation 1 of scripts/coverage-observations). The
// other DCGM fields (metrics/dcgm-fields.csv) are enabled through a
// counters CSV passed with --exporter dcgm-exporter=FILE, which the
// analysis says instead.
func TestOptInCountersMatchMetricData(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../detect/rules/metrics/dcgm-exporter.csv")
	if err != nil {
		t.Fatal(err)
	}
	var want, wantDefault []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ",")
		if !strings.HasPrefix(line, "#") && len(f) >= 3 && f[2] == rules.AvailDefault {
			wantDefault = append(wantDefault, f[0])
		}
		if strings.HasPrefix(line, "#") || len(f) < 3 || f[2] != rules.AvailOptIn {
			continue
		}
		if m, ok := rules.LookupMetric(f[0]); !ok || m.Availability != rules.AvailOptIn {
			t.Errorf("%s: the metric data reads it as %+v", f[0], m)
		}
		want = append(want, f[0])
	}
	got := OptInCounters()
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("OptInCounters() = %v\nmetric data's dcgm-exporter opt-in counters = %v", got, want)
	}
	// Every counter dcgm-exporter's default file turns on, the twin
	// exports by default, and no other.
	gotDefault := DefaultCounters()
	slices.Sort(gotDefault)
	slices.Sort(wantDefault)
	if !slices.Equal(gotDefault, wantDefault) {
		t.Errorf("DefaultCounters() = %v\nmetric data's dcgm-exporter default counters = %v", gotDefault, wantDefault)
	}
}

// TestOptInSeries enables every opt-in counter, plays the faults that move
// them and checks each reads what it means.
func TestOptInSeries(t *testing.T) {
	t.Parallel()
	g0 := func(tw *Twin) inventory.Ref { return gpuRef(tw, "gpu-node-0", 0) }
	tests := []struct {
		name   string
		effect catalog.Effect
		want   map[string]func(float64) bool
	}{
		{"healthy", catalog.Effect{}, map[string]func(float64) bool{
			"DCGM_FI_DEV_FB_TOTAL":                          func(v float64) bool { return v == 143771 },
			"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL":   func(v float64) bool { return v == 0 },
			"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": func(v float64) bool { return v == 0 },
			"DCGM_FI_DEV_NVLINK_BANDWIDTH_L0":               func(v float64) bool { return v > 0 },
			"DCGM_EXP_GPU_HEALTH_STATUS":                    func(v float64) bool { return v == healthPass },
			"DCGM_EXP_P2P_STATUS":                           func(v float64) bool { return v == 0 },
			"DCGM_FI_PROF_SM_ACTIVE":                        func(v float64) bool { return v > 0.5 && v <= 1 },
			"DCGM_FI_DEV_ROW_REMAP_PENDING":                 func(v float64) bool { return v == 0 },
		}},
		{"nvlink crc errors", catalog.Effect{Kind: catalog.EffectNVLink, Mode: "errors", Value: 60}, map[string]func(float64) bool{
			"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL":   func(v float64) bool { return v >= 110 && v <= 120 },
			"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": func(v float64) bool { return v >= 55 && v <= 60 },
			"DCGM_EXP_GPU_HEALTH_STATUS":                    func(v float64) bool { return v == healthWarn },
		}},
		{"nvlink down", catalog.Effect{Kind: catalog.EffectNVLink, Mode: "down", Code: 74}, map[string]func(float64) bool{
			"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": func(v float64) bool { return v == 18 },
			"DCGM_FI_DEV_NVLINK_BANDWIDTH_L0":               func(v float64) bool { return v == 0 },
			"DCGM_EXP_P2P_STATUS":                           func(v float64) bool { return v == 6 },
			"DCGM_EXP_XID_ERRORS_COUNT":                     func(v float64) bool { return v == 1 },
		}},
		{"row remap pending", catalog.Effect{Kind: catalog.EffectRowRemap, Mode: "pending"}, map[string]func(float64) bool{
			"DCGM_FI_DEV_ROW_REMAP_PENDING": func(v float64) bool { return v == 1 },
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := Default()
			spec.Exporter.OptIn = OptInCounters()
			tw := newTwin(t, Options{Spec: spec})
			if tc.effect.Kind != "" {
				apply(t, tw, "fault", g0(tw), tc.effect)
			}
			sleep(t, tw, 2*time.Minute)
			for m, ok := range tc.want {
				if v := last(gpuSeries(tw, m, "gpu-node-0", 0)); !ok(v) {
					t.Errorf("%s = %g", m, v)
				}
			}
		})
	}
}

// TestClockEventReasons checks the bits against NVML's definitions and
// that each fault sets its own, under both names of the field (observation
// 2 of scripts/coverage-observations).
func TestClockEventReasons(t *testing.T) {
	t.Parallel()
	// nvml.h, nvmlClocksEventReason*.
	nvml := map[string]uint64{
		"GpuIdle": 0x1, "ApplicationsClocksSetting": 0x2, "SwPowerCap": 0x4, "HwSlowdown": 0x8,
		"SyncBoost": 0x10, "SwThermalSlowdown": 0x20, "HwThermalSlowdown": 0x40,
		"HwPowerBrakeSlowdown": 0x80, "DisplayClockSetting": 0x100,
	}
	ours := map[string]uint64{
		"GpuIdle": reasonGPUIdle, "ApplicationsClocksSetting": reasonAppClocks, "SwPowerCap": reasonSWPowerCap,
		"HwSlowdown": reasonHWSlowdown, "SyncBoost": reasonSyncBoost, "SwThermalSlowdown": reasonSWThermal,
		"HwThermalSlowdown": reasonHWThermal, "HwPowerBrakeSlowdown": reasonPowerBrakeHW, "DisplayClockSetting": reasonDisplayClock,
	}
	for k, v := range nvml {
		if ours[k] != v {
			t.Errorf("%s = %#x, NVML has %#x", k, ours[k], v)
		}
	}
	brake := signature(t, "hardware.power-brake")
	tests := []struct {
		name      string
		gpu       int
		effects   []catalog.Effect
		wait      time.Duration
		want, not uint64
	}{
		{"healthy busy GPU", 0, nil, time.Minute, 0, 0xff},
		{"idle GPU", 7, nil, time.Minute, reasonGPUIdle, 0},
		{"software power cap", 0, []catalog.Effect{{Kind: catalog.EffectPowerCap, Factor: 0.5}}, time.Minute,
			reasonSWPowerCap, reasonHWSlowdown | reasonPowerBrakeHW},
		{"hardware.power-brake", 0, brake, time.Minute, reasonHWSlowdown | reasonPowerBrakeHW, reasonSWPowerCap},
		// The catalogue's default cooling failure: too hot even at half
		// clock, so the HW thermal slowdown holds.
		{"cooling failure", 0, []catalog.Effect{{Kind: catalog.EffectCooling, Factor: 8}}, 15 * time.Minute,
			reasonSWThermal | reasonHWThermal | reasonHWSlowdown, reasonPowerBrakeHW},
		// A marginal one crosses the slowdown temperature once; the SW
		// thermal slowdown then holds the GPU just under it.
		{"marginal cooling failure", 0, []catalog.Effect{{Kind: catalog.EffectCooling, Factor: 2.5}}, 15 * time.Minute,
			reasonSWThermal, reasonPowerBrakeHW},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := oneNode()
			spec.Jobs[0].GPUs, spec.Jobs[0].Ranks = "", 4 // GPUs 4–7 idle
			spec.Exporter.OptIn = []string{"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"}
			tw := newTwin(t, Options{Spec: spec})
			if tc.effects != nil {
				apply(t, tw, "fault", gpuRef(tw, "gpu-node-0", tc.gpu), tc.effects...)
			}
			sleep(t, tw, tc.wait)
			var seen uint64
			for _, s := range gpuSeries(tw, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gpu-node-0", tc.gpu).Samples {
				seen |= uint64(s.V)
			}
			now := uint64(last(gpuSeries(tw, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gpu-node-0", tc.gpu)))
			if seen&tc.want != tc.want || seen&tc.not != 0 {
				t.Errorf("reasons seen %#x, want %#x set and %#x clear", seen, tc.want, tc.not)
			}
			if old := last(gpuSeries(tw, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gpu-node-0", tc.gpu)); uint64(old) != now {
				t.Errorf("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS = %g, DCGM_FI_DEV_CLOCKS_EVENT_REASONS = %d", old, now)
			}
		})
	}
}

// TestNUMASeries plays the catalogue's NUMA faults and reads the series
// the gpuchaos agent exports for the same state (observation 11 of
// scripts/coverage-observations).
func TestNUMASeries(t *testing.T) {
	t.Parallel()
	if maxRemoteMemoryRatio != numa.MaxRemoteMemoryRatio {
		t.Errorf("maxRemoteMemoryRatio %g, numa.MaxRemoteMemoryRatio %g", maxRemoteMemoryRatio, numa.MaxRemoteMemoryRatio)
	}
	tests := []struct {
		fault                 string
		misaligned, mem, cpus float64
	}{
		{"", 0, 0, 0},
		{"numa.remote-memory", 1, 1, 0},
		{"numa.wrong-affinity", 1, 0, 1},
		{"numa.memory-pressure", 1, 0.6, 0},
		// Saturated local CPUs move neither memory nor affinity: the
		// agent sees an aligned process, and so does the twin.
		{"numa.cpu-saturation", 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t, Options{Spec: oneNode()})
			if tc.fault != "" {
				apply(t, tw, "fault", rankRef(2), signature(t, tc.fault)...)
			}
			sleep(t, tw, 2*time.Minute)
			for m, want := range map[string]float64{
				"gpuchaos_numa_misaligned": tc.misaligned, "gpuchaos_numa_remote_memory_ratio": tc.mem,
				"gpuchaos_numa_remote_cpu_ratio": tc.cpus,
			} {
				if n := len(tw.Select(m)); n != 8 {
					t.Errorf("%s: %d series, want one per rank", m, n)
				}
				s := gpuSeries(tw, m, "gpu-node-0", 2)
				if s == nil || s.Labels.Get("pid") == "" || s.Labels.Get("comm") != "python3" {
					t.Fatalf("%s of rank 2: %v", m, s)
				}
				if got := last(s); got != want {
					t.Errorf("%s = %g, want %g", m, got, want)
				}
				if got := last(gpuSeries(tw, m, "gpu-node-0", 3)); got != 0 {
					t.Errorf("%s of an untouched rank = %g", m, got)
				}
			}
		})
	}
}

// signature returns the effects of a catalogue fault at its defaults.
func signature(t *testing.T, id string) []catalog.Effect {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("%s not in the catalogue", id)
	}
	vals, err := f.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	return f.Signature.Effects(vals)
}
