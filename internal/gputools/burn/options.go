package burn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/gputools/loadlimit"
)

// Limits and defaults of Options.
const (
	// MaxDuration caps a burn: it must always end on its own.
	MaxDuration = loadlimit.BurnDuration
	// DefaultN is the default matrix size, the usual GEMM benchmark size.
	DefaultN = 8192
	// MinN and MaxN bound the matrix size; N must be a multiple of 8 so
	// that every column starts 16-byte aligned, as the tensor cores want.
	MinN = 256
	MaxN = 65536
	// DefaultSampleInterval is how often telemetry is read.
	DefaultSampleInterval = time.Second
	// DefaultBatchTarget is the GPU time of one batch of products; the
	// stop conditions are checked between batches, so it bounds how late
	// a stop can be.
	DefaultBatchTarget = 200 * time.Millisecond
	// MaxProductTime is the longest one product may take when a
	// temperature ceiling is set: a longer one could not stop within 2 s.
	MaxProductTime = time.Second
)

// TelemetryFunc reads one GPU's telemetry; gpu is the GPU's index in PCI
// bus order (nvidia-smi's and NVML's index when every GPU is visible). It
// is called from one goroutine, once per GPU per sample interval, and
// must return promptly when ctx ends.
type TelemetryFunc func(ctx context.Context, gpu int) (TelemetrySample, error)

// TelemetrySample is one reading of a GPU during a burn. A value the GPU
// does not report is NaN (null in JSON).
type TelemetrySample struct {
	// Time is when the reading was taken.
	Time time.Time
	// GPU is the GPU's index (set by the burn).
	GPU int
	// TempC is the GPU temperature (°C); the ceiling is checked on it.
	TempC float64
	// PowerW is the power draw (W).
	PowerW float64
	// SMClockMHz and MemClockMHz are the current clocks (MHz).
	SMClockMHz  float64
	MemClockMHz float64
	// ClockEventReasons is NVML's mask of why clocks are held down
	// (nvmlClocksEventReason*), valid when HasClockEventReasons is set.
	ClockEventReasons    uint64
	HasClockEventReasons bool
}

// MarshalJSON writes missing values as null rather than failing on NaN.
func (s TelemetrySample) MarshalJSON() ([]byte, error) {
	type out struct {
		Time              time.Time `json:"time"`
		GPU               int       `json:"gpu"`
		TempC             *float64  `json:"temp_c"`
		PowerW            *float64  `json:"power_w"`
		SMClockMHz        *float64  `json:"sm_clock_mhz"`
		MemClockMHz       *float64  `json:"mem_clock_mhz"`
		ClockEventReasons *uint64   `json:"clock_event_reasons"`
	}
	o := out{Time: s.Time, GPU: s.GPU, TempC: finite(s.TempC), PowerW: finite(s.PowerW),
		SMClockMHz: finite(s.SMClockMHz), MemClockMHz: finite(s.MemClockMHz)}
	if s.HasClockEventReasons {
		o.ClockEventReasons = &s.ClockEventReasons
	}
	return json.Marshal(o)
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// Progress is reported after every batch of products on a GPU.
type Progress struct {
	GPU         int           // the GPU's index
	Elapsed     time.Duration // since the GPU started burning
	Products    uint64        // products so far on this GPU
	BatchTFLOPS float64       // the rate of the batch just finished
	Mismatches  uint64        // mismatched elements so far
}

// Options configure Run. The zero value of each field is its documented
// default, except Duration, which is required.
type Options struct {
	// GPUs are the indexes (PCI bus order) to burn, all at once; empty
	// means every GPU.
	GPUs []int
	// Duration is how long the GPUs burn once set up (required, > 0, at
	// most MaxDuration).
	Duration time.Duration
	// DType is the arithmetic; "" means BF16.
	DType DType
	// N is the size of the square matrices; 0 means DefaultN.
	N int
	// TempCeilingC stops the burn when any GPU reads at or above it (°C);
	// 0 means no ceiling. A ceiling needs Telemetry.
	TempCeilingC float64
	// Telemetry reads each GPU every SampleInterval into the result's
	// trace and for the ceiling; nil means no telemetry.
	Telemetry TelemetryFunc
	// SampleInterval is the telemetry period; 0 means
	// DefaultSampleInterval.
	SampleInterval time.Duration
	// BatchTarget is the GPU time of one batch of products between stop
	// checks; 0 means DefaultBatchTarget times Duty.
	BatchTarget time.Duration
	// Seed draws the inputs; 0 means one from the clock. The result
	// records it, so a run can be replayed on the same data.
	Seed uint64
	// Progress, when set, is called after every batch, from the GPU's
	// own goroutine (so concurrently for several GPUs); it must not
	// block.
	Progress func(Progress)
	// Duty is the share of wall time each GPU burns, in (0, 1]; 0 means
	// 1, a continuous burn. After a batch that took t of wall time the
	// GPU idles t·(1/Duty − 1), so a utilisation counter that samples
	// whether a kernel is running (DCGM_FI_DEV_GPU_UTIL, nvidia-smi's
	// utilization.gpu) reads about Duty. While a batch runs it still
	// occupies every SM: the load is shared out in time, not in space.
	// With the default BatchTarget a batch lasts Duty·DefaultBatchTarget,
	// so one cycle of burn and idle takes about DefaultBatchTarget.
	Duty float64
}

// withDefaults fills in defaults and validates.
func (o Options) withDefaults() (Options, error) {
	var errs []error
	switch {
	case o.Duration <= 0:
		errs = append(errs, errors.New("a duration is required and must be positive"))
	case o.Duration > MaxDuration:
		errs = append(errs, fmt.Errorf("duration %s is over the %s cap", o.Duration, MaxDuration))
	}
	d, err := ParseDType(string(o.DType))
	if err != nil {
		errs = append(errs, err)
	}
	o.DType = d
	if o.N == 0 {
		o.N = DefaultN
	}
	if o.N < MinN || o.N > MaxN || o.N%8 != 0 {
		errs = append(errs, fmt.Errorf("matrix size %d is not a multiple of 8 in [%d, %d]", o.N, MinN, MaxN))
	}
	if o.TempCeilingC < 0 || math.IsNaN(o.TempCeilingC) {
		errs = append(errs, fmt.Errorf("temperature ceiling %g °C is negative", o.TempCeilingC))
	}
	if o.TempCeilingC > 0 && o.Telemetry == nil {
		errs = append(errs, errors.New("a temperature ceiling needs telemetry to read the temperature"))
	}
	seen := map[int]bool{}
	for _, g := range o.GPUs {
		if g < 0 {
			errs = append(errs, fmt.Errorf("gpu index %d is negative", g))
		}
		if seen[g] {
			errs = append(errs, fmt.Errorf("gpu %d is listed twice", g))
		}
		seen[g] = true
	}
	switch {
	case o.Duty == 0:
		o.Duty = 1
	case !(o.Duty > 0 && o.Duty <= 1): // written so that NaN fails too
		errs = append(errs, fmt.Errorf("duty %g is not in (0, 1]", o.Duty))
	}
	if o.SampleInterval < 0 || o.BatchTarget < 0 {
		errs = append(errs, errors.New("sample interval and batch target must not be negative"))
	}
	if o.SampleInterval == 0 {
		o.SampleInterval = DefaultSampleInterval
	}
	if o.BatchTarget == 0 {
		// A duty cycle shortens the default batch in proportion, so a
		// cycle of burn and idle lasts DefaultBatchTarget whatever the
		// duty: utilisation counters average over 1/6 s to 1 s, and a
		// longer cycle would read as alternating full and empty samples.
		share := o.Duty
		if !(share > 0 && share <= 1) {
			share = 1 // already reported above
		}
		o.BatchTarget = time.Duration(float64(DefaultBatchTarget) * share)
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	return o, errors.Join(errs...)
}

// idleAfter is how long a GPU idles after a batch that took busy of wall
// time so that it burns duty of the time: busy/(busy+idle) = duty.
func idleAfter(busy time.Duration, duty float64) time.Duration {
	if duty >= 1 || duty <= 0 || busy <= 0 {
		return 0
	}
	return time.Duration(float64(busy) * (1/duty - 1))
}
