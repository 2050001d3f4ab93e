package twin

import (
	"math"
	"math/bits"

	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// Clock event reasons, as DCGM_FI_DEV_CLOCKS_EVENT_REASONS (and its older
// name DCGM_FI_DEV_CLOCK_THROTTLE_REASONS) reports them: NVML's
// nvmlClocksEventReason* bits, read from nvml.h as github.com/NVIDIA/go-nvml
// v0.13.4-1 ships it (pkg/nvml/nvml.h, group nvmlClocksEventReasons). The
// twin sets idle, SW power cap, SW thermal, HW slowdown, HW thermal and HW
// power brake; the others name states it does not model.
const (
	reasonGPUIdle      = 0x1   // nvmlClocksEventReasonGpuIdle
	reasonAppClocks    = 0x2   // nvmlClocksEventReasonApplicationsClocksSetting
	reasonSWPowerCap   = 0x4   // nvmlClocksEventReasonSwPowerCap
	reasonHWSlowdown   = 0x8   // nvmlClocksEventReasonHwSlowdown: set with either HW cause below
	reasonSyncBoost    = 0x10  // nvmlClocksEventReasonSyncBoost
	reasonSWThermal    = 0x20  // nvmlClocksEventReasonSwThermalSlowdown
	reasonHWThermal    = 0x40  // nvmlClocksEventReasonHwThermalSlowdown
	reasonPowerBrakeHW = 0x80  // nvmlClocksEventReasonHwPowerBrakeSlowdown
	reasonDisplayClock = 0x100 // nvmlClocksEventReasonDisplayClockSetting
	reasonBits         = 9
)

// Physics constants. The power model is P = idle + (TDP − idle) · a ·
// (f/fmax)³: dynamic power scales with activity a and, through voltage,
// roughly with the cube of the clock. The cube makes a power cap cost
// clock less than proportionally, as on real boards.
const (
	idleClockShare = 0.175 // an idle Hopper parks its SM clock near 345 of 1980 MHz
	minClockShare  = 0.3   // lowest clock the throttle controllers go to
	thermalGain    = 20.0  // W per °C above slowdown the thermal controller sheds
	hbmTempFactor  = 1.1   // HBM runs a little hotter than the core under load
	reservedMiB    = 600.0 // driver and context reservation, never free
	// crcDataShare is the share of NVLink CRC errors that hit data flits
	// (DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL) besides the flit CRC
	// count every error raises. A modelling choice, not a measured figure:
	// rules alert on either counter's increase, not on the ratio.
	crcDataShare = 0.5
	// hwSlowdownShare is the highest clock, as a share of the maximum, the
	// hardware slowdown allows: nvml.h (go-nvml v0.13.4-1) defines HW
	// slowdown, HW thermal slowdown and HW power brake slowdown as
	// "reducing the core clocks by a factor of 2 or more".
	hwSlowdownShare = 0.5
	// hwSlowdownHysteresis is how far below the slowdown temperature a GPU
	// must cool before the thermal HW slowdown releases. A modelling
	// choice: NVML publishes no release point; without one the twin would
	// flip between full and half clock every physics step.
	hwSlowdownHysteresis = 3.0
)

// gpu is one device: its identity, its physical state and the modifiers the
// active effects put on it.
type gpu struct {
	idx         int // over the whole cluster
	node        *node
	index       int
	model       *GPUModel
	uuid, pci   string
	socket      int
	variability float64
	job         *job // nil when no rank runs here
	rank        int

	// Physical state, integrated every physics step.
	temp, memTemp, power, smClock, energyJ float64
	thermalActive                          bool // the thermal controller is limiting the clock
	hwThermal                              bool // the thermal HW slowdown is engaged (latched until the GPU cools)
	reasons                                uint64
	powerViolNs, thermalViolNs             float64
	lowUtilViolNs                          float64 // time held at the idle clock
	// reasonUs is the time each clock-event reason bit has been active,
	// by bit: NVML's per-reason counters, which nvidia-smi prints as
	// clocks_event_reasons_counters.*.
	reasonUs [reasonBits]float64

	// What the workload makes the GPU do; set when a step starts.
	act        float64 // power activity 0..1
	busy       float64 // fraction of time a kernel runs (GPU_UTIL)
	tensor     float64
	dram       float64
	copyUtil   float64
	nvlinkMBps float64
	pcieRx     float64 // bytes/s
	pcieTx     float64

	// Counters and gauges that faults move; counters are never rewound.
	xidLast                float64
	corrRemap, uncorrRemap float64
	uncPending             bool // an uncorrectable error's row awaits its remap at the next reset
	pcieReplay             float64
	sbeVol, sbeAgg         float64
	dbeVol, dbeAgg         float64
	crcFlits, crcData      float64
	nvlinkRecoveries       float64
	xidTimes               []float64 // seconds since start of recent XIDs, for DCGM_EXP_XID_ERRORS_COUNT
	xid92Logged            bool
	mods                   gpuMods
	noise                  telemetryNoise   // this scrape's reading noise
	series                 []*series.Series // per enabled GPU metric, in gpuMetrics order
	dialect                []dialectSeries  // the declared dialects' series
}

// gpuMods is what the active effects do to a GPU, recomputed from scratch
// whenever the set of active effects changes.
type gpuMods struct {
	thermalFactor  float64 // multiplies thermal resistance
	powerCap       float64 // allowed fraction of TDP
	powerBrake     bool    // the cap is the board's HW power brake, not a SW limit
	smLoad         float64 // SM share taken by a co-tenant
	vramFrac       float64 // HBM share held by someone else
	pcieBps        float64 // extra host-device copy bytes/s
	pcieFactor     float64 // input-pipeline slowdown of the rank
	computeFactor  float64 // silent compute slowdown of the rank
	numaRemoteMem  float64 // share of the rank's host memory off its GPU's NUMA node
	numaRemoteCPU  float64 // share of the rank's allowed CPUs off its GPU's NUMA node
	nvlinkDown     bool
	nvlinkFallback float64
	crcPerMin      float64
	sbePerMin      float64
	offBus         bool
	resetPending   bool
	remapPending   bool
	remapFailure   bool
	rankHung       bool
	hangTimeout    float64 // seconds; 0 = the job's watchdog
	// hostMemHog and hostCPUHog are the host load a hog beside the rank
	// puts on its GPU's NUMA node (catalog.EffectHost): the share of that
	// node's free memory taken, the share of its socket's CPUs kept busy.
	hostMemHog, hostCPUHog float64
}

func (m *gpuMods) reset() {
	*m = gpuMods{thermalFactor: 1, powerCap: 1, pcieFactor: 1, computeFactor: 1}
}

// usable reports whether a rank can run on the GPU.
func (g *gpu) usable() bool { return !g.mods.offBus && !g.mods.resetPending }

// computeSlowdown is how much longer the rank's compute takes than on a
// median GPU at full clock.
func (g *gpu) computeSlowdown() float64 {
	s := g.variability * g.mods.computeFactor * g.mods.pcieFactor
	if l := g.mods.smLoad; l > 0 {
		s *= math.Min(1/math.Max(1-l, 1e-9), 10)
	}
	clock := g.smClock / g.model.MaxSMClockMHz
	if g.act == 0 || clock <= 0 {
		// A GPU waking from idle boosts within milliseconds; only a
		// throttle or cap holds the clock down.
		clock = g.limitClock(math.Max(g.act, 0.9), g.model.MaxSMClockMHz) / g.model.MaxSMClockMHz
	}
	return s / clock
}

// powerAt is the draw at activity a and clock f.
func (g *gpu) powerAt(a, f float64) float64 {
	m := g.model
	r := f / m.MaxSMClockMHz
	return m.IdleWatts + (m.TDPWatts-m.IdleWatts)*a*r*r*r
}

// clockFor is the clock at which activity a draws p watts.
func (g *gpu) clockFor(a, p float64) float64 {
	m := g.model
	x := (p - m.IdleWatts) / ((m.TDPWatts - m.IdleWatts) * a)
	return m.MaxSMClockMHz * math.Cbrt(math.Max(x, 0))
}

// limitClock applies the power cap and the thermal controller to a wanted
// clock f at activity a, setting reasons; it does not integrate anything.
func (g *gpu) limitClock(a, f float64) float64 {
	m := g.model
	lo := minClockShare * m.MaxSMClockMHz
	if a <= 0 {
		return f
	}
	if capW := m.TDPWatts * g.mods.powerCap; g.powerAt(a, f) > capW {
		f = math.Max(g.clockFor(a, capW), lo)
	}
	if g.thermalActive {
		if lim := g.thermalLimit(); g.powerAt(a, f) > lim {
			f = math.Max(g.clockFor(a, lim), lo)
		}
	}
	if g.hwThermal || g.brakeEngaged(a) {
		f = math.Min(f, hwSlowdownShare*m.MaxSMClockMHz)
	}
	return f
}

// brakeEngaged reports whether the board's power brake holds the GPU at
// activity a: a brake is asserted and the full-clock draw exceeds it.
func (g *gpu) brakeEngaged(a float64) bool {
	return g.mods.powerBrake && g.powerAt(a, g.model.MaxSMClockMHz) > g.model.TDPWatts*g.mods.powerCap
}

// thermalLimit is the power the thermal controller allows: the draw whose
// equilibrium is the slowdown temperature, less a proportional term that
// pulls an overshoot back.
func (g *gpu) thermalLimit() float64 {
	r := g.model.ThermalResistance * g.mods.thermalFactor
	hold := (g.model.SlowdownCelsius - g.ambient()) / r
	return hold - thermalGain*(g.temp-g.model.SlowdownCelsius)
}

func (g *gpu) ambient() float64 { return g.node.ambient }

// step integrates dt seconds of physics: clocks from caps and the thermal
// controller, power, first-order temperature (exact for constant power
// over the step, so any step size is stable), energy and fault counters.
func (g *gpu) step(t *Twin, dt float64) {
	m := g.model
	a := g.act
	if l := g.mods.smLoad; l > 0 {
		a = math.Min(1, a+l)
	}
	g.reasons = 0
	f := m.MaxSMClockMHz
	if a <= 0 {
		f = idleClockShare * m.MaxSMClockMHz
		g.reasons |= reasonGPUIdle
		g.lowUtilViolNs += dt * 1e9
	} else {
		if g.temp >= m.SlowdownCelsius {
			g.thermalActive = true
			// At the model's slowdown temperature (NVML's
			// NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, nvidia-smi's "GPU
			// Slowdown Temp") the hardware slowdown engages and holds
			// until the GPU has cooled by the hysteresis.
			g.hwThermal = true
		} else if g.temp < m.SlowdownCelsius-hwSlowdownHysteresis {
			g.hwThermal = false
		}
		if capW := m.TDPWatts * g.mods.powerCap; g.powerAt(a, f) > capW {
			f = math.Max(g.clockFor(a, capW), minClockShare*m.MaxSMClockMHz)
			if g.mods.powerBrake {
				// The brake is a board signal: NVML reports it as a HW
				// slowdown with the power-brake cause, and like every HW
				// slowdown it at least halves the clock, so the draw
				// falls well below the brake's limit.
				g.reasons |= reasonHWSlowdown | reasonPowerBrakeHW
				f = math.Min(f, hwSlowdownShare*m.MaxSMClockMHz)
			} else {
				g.reasons |= reasonSWPowerCap
			}
			g.powerViolNs += dt * 1e9
		}
		if g.thermalActive {
			lim := g.thermalLimit()
			if g.powerAt(a, f) > lim {
				f = math.Max(g.clockFor(a, lim), minClockShare*m.MaxSMClockMHz)
				g.reasons |= reasonSWThermal
			} else if !g.hwThermal {
				// The cause is gone: the clock is no longer held down.
				g.thermalActive = false
			}
		}
		if g.hwThermal {
			// A HW slowdown at least halves the clock (nvml.h), and
			// power falls with it through the power model.
			if f > hwSlowdownShare*m.MaxSMClockMHz {
				f = hwSlowdownShare * m.MaxSMClockMHz
			}
			g.reasons |= reasonHWSlowdown | reasonHWThermal
		}
		if g.reasons&(reasonSWThermal|reasonHWThermal) != 0 {
			g.thermalViolNs += dt * 1e9
		}
	}
	for r := g.reasons; r != 0; r &= r - 1 {
		g.reasonUs[bits.TrailingZeros64(r)] += dt * 1e6
	}
	if g.mods.offBus {
		a, f = 0, 0
	}
	g.smClock = f
	g.power = m.IdleWatts
	if a > 0 {
		g.power = g.powerAt(a, f)
	}
	if g.mods.offBus {
		g.power = 0
	}
	r := m.ThermalResistance * g.mods.thermalFactor
	decay := t.thermalDecay
	amb := g.ambient()
	eq := amb + g.power*r
	g.temp = eq + (g.temp-eq)*decay
	memEq := amb + hbmTempFactor*g.power*r
	g.memTemp = memEq + (g.memTemp-memEq)*decay
	g.energyJ += g.power * dt
	if g.mods.sbePerMin > 0 {
		n := g.mods.sbePerMin * dt / 60
		g.sbeVol += n
		g.sbeAgg += n
	}
	if g.mods.crcPerMin > 0 {
		n := g.mods.crcPerMin * dt / 60
		g.crcFlits += n
		g.crcData += crcDataShare * n
	}
}

// settle puts the GPU at the equilibrium of its current load, as if it had
// been running it for a long time.
func (g *gpu) settle(t *Twin) {
	for range 3 {
		g.step(t, 0)
		r := g.model.ThermalResistance * g.mods.thermalFactor
		g.temp = g.ambient() + g.power*r
		g.memTemp = g.ambient() + hbmTempFactor*g.power*r
	}
	g.energyJ = 0
	g.powerViolNs, g.thermalViolNs, g.lowUtilViolNs = 0, 0, 0
	g.reasonUs = [reasonBits]float64{}
}

// fbUsedMiB is the framebuffer in use, as DCGM counts it (the driver's
// reservation is reported apart): the job's working set while its process
// lives and whatever another tenant holds.
func (g *gpu) fbUsedMiB() float64 {
	used := g.mods.vramFrac * g.model.MemoryMiB
	if g.job != nil && g.job.processAlive() {
		used += g.job.spec.MemoryGiB * 1024
	}
	return math.Min(used, g.model.MemoryMiB-reservedMiB)
}

// physics integrates every GPU over dt seconds.
func (t *Twin) physics(dt float64) {
	for _, g := range t.gpus {
		g.step(t, dt)
	}
}
