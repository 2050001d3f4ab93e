package twin

import (
	"math"
	"math/rand/v2"
)

// Telemetry noise, calibrated on a real busy H200: the steady samples
// (second 3 to 25, one a second) of the bf16 burn in
// ../shared/data/h200-telemetry/burn-bf16.json (`gpuchaos burn --gpus 0
// --dtype bf16 --duration 25s`, driver 580.159.04, at the 700 W power
// cap) have a standard deviation of 1.44 W around 690.9 W of power,
// 18.4 MHz around 1466 MHz of SM clock (in the driver's 15 MHz steps) and
// 0.20 °C around 57 °C of (integer) temperature; the tf32 and fp64 burns
// of the same directory give 1.21 and 2.20 W, 15.1 and 17.9 MHz, 0.28 and
// 0.20 °C. Those files carry no utilisation: its jitter below is a
// modelling choice, one percentage point, the resolution of GPU_UTIL.
const (
	// powerNoiseShare is the power's standard deviation as a share of the
	// draw: 1.44 W of 690.9 W.
	powerNoiseShare = 1.44 / 690.9
	// clockNoiseMHz is the SM clock's standard deviation under load; the
	// exported clock moves in clockStepMHz steps as the driver's does.
	clockNoiseMHz = 18.4
	clockStepMHz  = 15.0
	// tempNoiseC is added to the temperatures before they are rounded to
	// whole degrees as NVML reports them; 0.25 °C gives the 0.2–0.28 °C
	// of the rounded real readings.
	tempNoiseC = 0.25
	// utilNoisePct is GPU_UTIL's jitter in percentage points while busy.
	utilNoisePct = 1.0
)

// telemetryNoise is what one scrape adds to a GPU's readings. It never
// feeds back into the physics: the twin's state stays the model's, only
// what the exporter reports moves, as a sensor's reading does.
type telemetryNoise struct {
	power, clock, temp, memTemp, util float64 // standard normal draws
}

// draw fills n from rng. It always takes the same number of draws, so
// one GPU's state never shifts another's noise and a seed gives the same
// readings byte for byte.
func (n *telemetryNoise) draw(rng *rand.Rand) {
	n.power = rng.NormFloat64()
	n.clock = rng.NormFloat64()
	n.temp = rng.NormFloat64()
	n.memTemp = rng.NormFloat64()
	n.util = rng.NormFloat64()
}

// loaded reports whether the GPU runs work, the state the noise was
// measured in; an idle GPU parks its clock and utilisation at rest.
func (g *gpu) loaded() bool { return g.act > 0 || g.mods.smLoad > 0 }

// readPower is POWER_USAGE in W with the noise of a real reading.
func (g *gpu) readPower() float64 {
	p := g.power * (1 + powerNoiseShare*g.noise.power)
	return math.Round(math.Max(p, 0)*1000) / 1000
}

// readSMClock is SM_CLOCK in MHz. While a software limiter (power cap,
// thermal controller) holds the clock below its maximum it hunts around
// its target in the driver's 15 MHz steps, as in the calibration readings,
// all taken at the SW power cap; a GPU at its maximum boost clock, parked
// idle or held by a HW slowdown reads steady.
func (g *gpu) readSMClock() float64 {
	f := g.smClock
	hunting := g.reasons&(reasonSWPowerCap|reasonSWThermal) != 0 && g.reasons&reasonHWSlowdown == 0
	if !g.loaded() || f <= 0 || f >= g.model.MaxSMClockMHz || !hunting {
		return math.Round(f)
	}
	f += clockStepMHz * math.Round(clockNoiseMHz*g.noise.clock/clockStepMHz)
	return math.Round(math.Min(f, g.model.MaxSMClockMHz))
}

// readTemp rounds a temperature with the reading's noise, as NVML reports
// whole degrees.
func readTemp(c, noise float64) float64 { return math.Round(c + tempNoiseC*noise) }

// readUtil is GPU_UTIL in percent: a busy GPU's reading jitters by a
// point or so, within 0–100.
func (g *gpu) readUtil() float64 {
	u := 100 * g.util()
	if u > 0 {
		u += utilNoisePct * g.noise.util
	}
	return math.Round(math.Min(math.Max(u, 0), 100))
}
