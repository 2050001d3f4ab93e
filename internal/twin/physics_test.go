package twin

import (
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// faultEffects returns a catalogue fault's effects at its default
// parameters, so these tests follow the catalogue's figures.
func faultEffects(t *testing.T, id string) []catalog.Effect {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("fault %s not in the catalogue", id)
	}
	vals, err := f.Resolve(nil)
	if err != nil {
		t.Fatalf("resolve %s defaults: %v", id, err)
	}
	return f.Signature.Effects(vals)
}

// TestFaultSignaturesReachRealThresholds holds the catalogue's thermal,
// power and ECC faults to what real GPUs show (observation 8 of
// scripts/coverage-observations): a heat soak passes the 75–85 °C that
// public temperature rules alert on, failed cooling and a power brake
// engage a HW slowdown that at least halves the SM clock (nvml.h:
// "reducing the core clocks by a factor of 2 or more") with power falling
// with it, and an uncorrectable ECC error raises the uncorrectable
// remapped-rows count on an H200.
func TestFaultSignaturesReachRealThresholds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fault       string
		after       time.Duration
		minTemp     float64 // °C, 0 = not checked
		maxTemp     float64 // °C, 0 = not checked
		maxClock    float64 // share of the max SM clock, 0 = not checked
		maxPower    float64 // W, 0 = not checked
		reasons     uint64  // bits that must be set
		uncorrRemap float64 // at least
	}{
		{fault: "exhaustion.thermal-soak", after: 10 * time.Minute, minTemp: 85, maxTemp: 87},
		{fault: "hardware.thermal-throttle", after: 5 * time.Minute, minTemp: 85, maxClock: 0.5, maxPower: 350,
			reasons: reasonHWSlowdown | reasonHWThermal},
		{fault: "hardware.power-brake", after: 2 * time.Minute, maxClock: 0.5, maxPower: 350,
			reasons: reasonHWSlowdown | reasonPowerBrakeHW},
		{fault: "hardware.ecc-dbe", after: time.Minute, uncorrRemap: 1},
	}
	for _, c := range cases {
		t.Run(c.fault, func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t, Options{Spec: oneNode()})
			sleep(t, tw, 2*time.Minute)
			apply(t, tw, c.fault, gpuRef(tw, "gpu-node-0", 0), faultEffects(t, c.fault)...)
			sleep(t, tw, c.after)
			const node = "gpu-node-0"
			temp := last(gpuSeries(tw, "DCGM_FI_DEV_GPU_TEMP", node, 0))
			clock := last(gpuSeries(tw, "DCGM_FI_DEV_SM_CLOCK", node, 0))
			power := last(gpuSeries(tw, "DCGM_FI_DEV_POWER_USAGE", node, 0))
			g := tw.byNode[node].gpus[0]
			if c.minTemp > 0 && temp < c.minTemp {
				t.Errorf("GPU_TEMP = %g °C, want ≥ %g", temp, c.minTemp)
			}
			if c.maxTemp > 0 && temp > c.maxTemp {
				t.Errorf("GPU_TEMP = %g °C, want ≤ %g", temp, c.maxTemp)
			}
			if lim := c.maxClock * g.model.MaxSMClockMHz; c.maxClock > 0 && clock > lim {
				t.Errorf("SM_CLOCK = %g MHz, want ≤ %g (HW slowdown halves it)", clock, lim)
			}
			if c.maxPower > 0 && power > c.maxPower {
				t.Errorf("POWER_USAGE = %g W, want ≤ %g (power falls with the clock)", power, c.maxPower)
			}
			if g.reasons&c.reasons != c.reasons {
				t.Errorf("clock event reasons = %#x, want bits %#x set", g.reasons, c.reasons)
			}
			if got := last(gpuSeries(tw, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", node, 0)); got < c.uncorrRemap {
				t.Errorf("UNCORRECTABLE_REMAPPED_ROWS = %g, want ≥ %g", got, c.uncorrRemap)
			}
		})
	}
}

// TestHWSlowdownAlwaysHalvesClock checks the invariant behind the HW
// slowdown bit over a range of cooling failures: whenever the twin reports
// a HW slowdown, the SM clock is at most half its maximum.
func TestHWSlowdownAlwaysHalvesClock(t *testing.T) {
	t.Parallel()
	for _, factor := range []float64{1.5, 2.5, 4, 8} {
		tw := newTwin(t, Options{Spec: oneNode()})
		g := tw.byNode["gpu-node-0"].gpus[0]
		apply(t, tw, "cool", gpuRef(tw, "gpu-node-0", 0), catalog.Effect{Kind: catalog.EffectCooling, Factor: factor})
		for range 600 {
			sleep(t, tw, time.Second)
			if g.reasons&reasonHWSlowdown != 0 && g.smClock > hwSlowdownShare*g.model.MaxSMClockMHz {
				t.Fatalf("factor %g: HW slowdown at %g MHz, more than half of %g", factor, g.smClock, g.model.MaxSMClockMHz)
			}
		}
	}
}
