package burn

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func okTelemetry(context.Context, int) (TelemetrySample, error) { return TelemetrySample{}, nil }

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    Options
		wantErr []string
		check   func(t *testing.T, o Options)
	}{
		{name: "defaults", opts: Options{Duration: time.Second}, check: func(t *testing.T, o Options) {
			if o.DType != BF16 || o.N != DefaultN || o.SampleInterval != time.Second || o.BatchTarget != DefaultBatchTarget || o.Seed == 0 {
				t.Errorf("defaults not applied: %+v", o)
			}
		}},
		{name: "explicit values kept", opts: Options{Duration: time.Minute, DType: "TF32", N: 4096, Seed: 7, GPUs: []int{1, 0}}, check: func(t *testing.T, o Options) {
			if o.DType != TF32 || o.N != 4096 || o.Seed != 7 || !slices.Equal(o.GPUs, []int{1, 0}) {
				t.Errorf("values changed: %+v", o)
			}
		}},
		{name: "no duration", opts: Options{}, wantErr: []string{"duration is required"}},
		{name: "negative duration", opts: Options{Duration: -time.Second}, wantErr: []string{"duration is required"}},
		{name: "over the cap", opts: Options{Duration: MaxDuration + time.Second}, wantErr: []string{"over the 24h0m0s cap"}},
		{name: "at the cap", opts: Options{Duration: MaxDuration}},
		{name: "unknown dtype", opts: Options{Duration: time.Second, DType: "int8"}, wantErr: []string{`"int8" is not one of bf16, fp16, tf32, fp32, fp64`}},
		{name: "size too small", opts: Options{Duration: time.Second, N: 128}, wantErr: []string{"matrix size 128"}},
		{name: "size not a multiple of 8", opts: Options{Duration: time.Second, N: 8190}, wantErr: []string{"matrix size 8190"}},
		{name: "size too large", opts: Options{Duration: time.Second, N: MaxN + 8}, wantErr: []string{"matrix size"}},
		{name: "ceiling without telemetry", opts: Options{Duration: time.Second, TempCeilingC: 80}, wantErr: []string{"needs telemetry"}},
		{name: "ceiling with telemetry", opts: Options{Duration: time.Second, TempCeilingC: 80, Telemetry: okTelemetry}},
		{name: "negative ceiling", opts: Options{Duration: time.Second, TempCeilingC: -1, Telemetry: okTelemetry}, wantErr: []string{"negative"}},
		{name: "duplicate and negative gpus", opts: Options{Duration: time.Second, GPUs: []int{0, 0, -1}}, wantErr: []string{"gpu 0 is listed twice", "gpu index -1"}},
		{name: "every error at once", opts: Options{DType: "x", N: 3}, wantErr: []string{"duration", "data type", "matrix size"}},
		{name: "duty unset is continuous", opts: Options{Duration: time.Second}, check: func(t *testing.T, o Options) {
			if o.Duty != 1 || o.BatchTarget != DefaultBatchTarget {
				t.Errorf("duty %g, batch target %s; want 1 and %s", o.Duty, o.BatchTarget, DefaultBatchTarget)
			}
		}},
		{name: "duty one", opts: Options{Duration: time.Second, Duty: 1}, check: func(t *testing.T, o Options) {
			if o.Duty != 1 || o.BatchTarget != DefaultBatchTarget {
				t.Errorf("duty %g, batch target %s; want 1 and %s", o.Duty, o.BatchTarget, DefaultBatchTarget)
			}
		}},
		{name: "duty shortens the default batch", opts: Options{Duration: time.Second, Duty: 0.25}, check: func(t *testing.T, o Options) {
			if o.Duty != 0.25 || o.BatchTarget != DefaultBatchTarget/4 {
				t.Errorf("duty %g, batch target %s; want 0.25 and %s", o.Duty, o.BatchTarget, DefaultBatchTarget/4)
			}
		}},
		{name: "duty keeps an explicit batch", opts: Options{Duration: time.Second, Duty: 0.5, BatchTarget: time.Second}, check: func(t *testing.T, o Options) {
			if o.BatchTarget != time.Second {
				t.Errorf("batch target %s, want 1s", o.BatchTarget)
			}
		}},
		{name: "duty above one", opts: Options{Duration: time.Second, Duty: 1.01}, wantErr: []string{"duty 1.01 is not in (0, 1]"}},
		{name: "negative duty", opts: Options{Duration: time.Second, Duty: -0.5}, wantErr: []string{"duty -0.5"}},
		{name: "NaN duty", opts: Options{Duration: time.Second, Duty: math.NaN()}, wantErr: []string{"duty NaN"}},
		{name: "infinite duty", opts: Options{Duration: time.Second, Duty: math.Inf(1)}, wantErr: []string{"duty +Inf"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, err := tc.opts.withDefaults()
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("withDefaults: %v", err)
				}
				if tc.check != nil {
					tc.check(t, o)
				}
				return
			}
			if err == nil {
				t.Fatalf("withDefaults accepted %+v", tc.opts)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestIdleAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		busy time.Duration
		duty float64
		want time.Duration
	}{
		{name: "continuous", busy: 200 * time.Millisecond, duty: 1, want: 0},
		{name: "half", busy: 100 * time.Millisecond, duty: 0.5, want: 100 * time.Millisecond},
		{name: "quarter", busy: 50 * time.Millisecond, duty: 0.25, want: 150 * time.Millisecond},
		{name: "five percent", busy: 10 * time.Millisecond, duty: 0.05, want: 190 * time.Millisecond},
		{name: "no busy time", busy: 0, duty: 0.5, want: 0},
		{name: "unset duty is continuous", busy: time.Second, duty: 0, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := idleAfter(tc.busy, tc.duty)
			// Float rounding may cost a nanosecond or two.
			if d := got - tc.want; d < -2 || d > 2 {
				t.Fatalf("idleAfter(%s, %g) = %s, want %s", tc.busy, tc.duty, got, tc.want)
			}
			if tc.duty > 0 && tc.busy > 0 {
				if share := float64(tc.busy) / float64(tc.busy+got); math.Abs(share-tc.duty) > 1e-6 {
					t.Errorf("busy share %g, want the duty %g", share, tc.duty)
				}
			}
		})
	}
}

func TestIdleEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	idle(ctx, time.Hour)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("idle of an hour with a cancelled context took %s", d)
	}
}

func TestParseDType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    DType
		wantErr bool
	}{
		{"", BF16, false}, {"bf16", BF16, false}, {"BF16", BF16, false}, {"fp16", FP16, false},
		{"tf32", TF32, false}, {"fp32", FP32, false}, {"Fp64", FP64, false},
		{"fp8", "", true}, {"bfloat16", "", true},
	}
	for _, tc := range tests {
		got, err := ParseDType(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseDType(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestDTypeTable checks every data type maps onto cuBLAS types and onto
// kernels that the embedded PTX defines, with element sizes that fit.
func TestDTypeTable(t *testing.T) {
	t.Parallel()
	entries := ptxEntries(string(kernelsPTX))
	tests := []struct {
		d       DType
		bytes   uint64
		data    cuda.DataType
		compute cuda.ComputeType
	}{
		{BF16, 2, cuda.R16BF, cuda.Compute32F},
		{FP16, 2, cuda.R16F, cuda.Compute32F},
		{TF32, 4, cuda.R32F, cuda.Compute32FFastTF32},
		{FP32, 4, cuda.R32F, cuda.Compute32F},
		{FP64, 8, cuda.R64F, cuda.Compute64F},
	}
	if len(tests) != len(DTypes()) {
		t.Fatalf("table covers %d of %d data types", len(tests), len(DTypes()))
	}
	for _, tc := range tests {
		t.Run(string(tc.d), func(t *testing.T) {
			t.Parallel()
			s, ok := specOf(tc.d)
			if !ok {
				t.Fatalf("specOf(%s) missing", tc.d)
			}
			if s.elemBytes != tc.bytes || s.data != tc.data || s.compute != tc.compute {
				t.Errorf("spec = %+v", s)
			}
			for _, k := range []string{s.fill, s.compare} {
				if !slices.Contains(entries, k) {
					t.Errorf("kernel %s is not an .entry of kernels.ptx (%v)", k, entries)
				}
			}
			if want := map[uint64]string{2: "b16", 4: "b32", 8: "b64"}[tc.bytes]; !strings.HasSuffix(s.compare, want) {
				t.Errorf("compare kernel %s does not compare %d-byte elements", s.compare, tc.bytes)
			}
		})
	}
	if _, ok := specOf("int8"); ok {
		t.Error("specOf accepts an unknown type")
	}
}

// TestPTXWellFormed checks the embedded PTX the way the driver will need
// it: a header, seven kernels each with balanced braces and a ret, four
// 64-bit parameters each, and every branch target defined in its kernel.
func TestPTXWellFormed(t *testing.T) {
	t.Parallel()
	ptx := string(kernelsPTX)
	for _, h := range []string{".version 7.0", ".target sm_52", ".address_size 64"} {
		if !strings.Contains(ptx, h+"\n") {
			t.Errorf("PTX lacks %q", h)
		}
	}
	entries := ptxEntries(ptx)
	want := []string{"gpuchaos_fill_f32", "gpuchaos_fill_bf16", "gpuchaos_fill_f16", "gpuchaos_fill_f64",
		"gpuchaos_compare_b16", "gpuchaos_compare_b32", "gpuchaos_compare_b64"}
	if !slices.Equal(entries, want) {
		t.Fatalf("entries = %v; want %v", entries, want)
	}
	if strings.Count(ptx, "{") != strings.Count(ptx, "}") {
		t.Errorf("unbalanced braces")
	}
	bodies := strings.Split(ptx, ".visible .entry ")[1:]
	for i, body := range bodies {
		if got := strings.Count(body, ".param .u64"); got != 4 && !(strings.HasPrefix(body, "gpuchaos_fill") && got == 3) {
			t.Errorf("%s has %d parameters", entries[i], got)
		}
		if !strings.Contains(body, "\tret;") {
			t.Errorf("%s has no ret", entries[i])
		}
		labels := map[string]bool{}
		for _, line := range strings.Split(body, "\n") {
			if l, ok := strings.CutSuffix(strings.TrimSpace(line), ":"); ok {
				labels[l] = true
			}
		}
		for _, line := range strings.Split(body, "\n") {
			if _, target, ok := strings.Cut(line, " bra "); ok {
				if l := strings.TrimSuffix(strings.TrimSpace(target), ";"); !labels[l] {
					t.Errorf("%s branches to undefined label %q", entries[i], l)
				}
			}
		}
	}
}

func TestPTXEntries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ptx  string
		want []string
	}{
		{"none", ".version 7.0\n", nil},
		{"name before paren", ".visible .entry k1(\n.param .u64 a)\n{}\n", []string{"k1"}},
		{"name with space", ".entry k2 (\n", []string{"k2"}},
		{"func is no entry", ".func helper(\n.visible .entry k3(\n", []string{"k3"}},
	}
	for _, tc := range tests {
		if got := ptxEntries(tc.ptx); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ptxEntries = %v; want %v", tc.name, got, tc.want)
		}
	}
}

// TestExpectedBits checks the host mirror of the fill kernels: values in
// [-1, 1), each type's rounding toward zero, and seeds that differ.
func TestExpectedBits(t *testing.T) {
	t.Parallel()
	for _, d := range DTypes() {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			var lo, hi float64 = 2, -2
			distinct := map[uint64]bool{}
			for i := range uint64(20000) {
				b := expectedBits(d, 42, i)
				v := decode(d, b)
				if v < -1 || v >= 1 || math.IsNaN(v) {
					t.Fatalf("element %d = %v (bits %#x) outside [-1, 1)", i, v, b)
				}
				lo, hi = min(lo, v), max(hi, v)
				distinct[b] = true
			}
			if lo > -0.99 || hi < 0.99 {
				t.Errorf("values span [%v, %v]; want nearly [-1, 1)", lo, hi)
			}
			if len(distinct) < 250 {
				t.Errorf("only %d distinct values in 20000", len(distinct))
			}
			if expectedBits(d, 1, 5) == expectedBits(d, 2, 5) && expectedBits(d, 1, 6) == expectedBits(d, 2, 6) {
				t.Error("seed does not change the data")
			}
		})
	}
}

func decode(d DType, b uint64) float64 {
	switch d {
	case BF16:
		return float64(math.Float32frombits(uint32(b) << 16))
	case FP16:
		return f16ToFloat(uint16(b))
	case FP64:
		return math.Float64frombits(b)
	}
	return float64(math.Float32frombits(uint32(b)))
}

func f16ToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h >> 10 & 0x1f)
	m := float64(h & 0x3ff)
	if e == 0 {
		return sign * m * math.Ldexp(1, -24)
	}
	return sign * (1 + m/1024) * math.Ldexp(1, e-15)
}

func TestF32ToF16TowardZero(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   float32
		want uint16
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 0x8000},
		{0.5, 0x3800}, {-1, 0xbc00}, {-0.25, 0xb400},
		{1 - 0x1p-23, 0x3bff},                 // largest below one truncates, not rounds up to 1
		{0x1p-14, 0x0400},                     // smallest normal half
		{0x1p-15, 0x0200},                     // subnormal half
		{0x1p-23, 0x0002},                     // the smallest value a fill draws
		{0x1p-24 * 1.5, 0x0001},               // truncated toward zero
		{float32(1.0009765625 * 0.5), 0x3801}, // exact mantissa bit kept
	}
	for _, tc := range tests {
		if got := f32ToF16TowardZero(tc.in); got != tc.want {
			t.Errorf("f32ToF16TowardZero(%v) = %#04x; want %#04x", tc.in, got, tc.want)
		}
		if back := f16ToFloat(tc.want); math.Abs(back) > math.Abs(float64(tc.in)) {
			t.Errorf("%v rounds away from zero to %v", tc.in, back)
		}
	}
}

func TestSpreadAndFlops(t *testing.T) {
	t.Parallel()
	if got := spreadOf(nil); got != (Spread{}) {
		t.Errorf("spreadOf(nil) = %+v", got)
	}
	in := []float64{5, 1, 3}
	if got := spreadOf(in); got != (Spread{1, 3, 5}) {
		t.Errorf("spreadOf = %+v", got)
	}
	if !slices.Equal(in, []float64{5, 1, 3}) {
		t.Error("spreadOf sorted its input in place")
	}
	if got := flops(8192); got != 2*8192.0*8192*8192 {
		t.Errorf("flops(8192) = %g", got)
	}
}

// TestSamplerCeiling drives the sampler with a fake source: the first GPU
// to reach the ceiling stops the burn once, with its own sample.
func TestSamplerCeiling(t *testing.T) {
	t.Parallel()
	temps := map[int][]float64{0: {40, 60, 90}, 1: {40, 85, 95}}
	var mu sync.Mutex
	calls := map[int]int{}
	tel := func(_ context.Context, gpu int) (TelemetrySample, error) {
		mu.Lock()
		defer mu.Unlock()
		i := min(calls[gpu], len(temps[gpu])-1)
		calls[gpu]++
		if gpu == 1 && i == 0 {
			return TelemetrySample{}, errors.New("nvml: timeout")
		}
		return TelemetrySample{TempC: temps[gpu][i], PowerW: math.NaN()}, nil
	}
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	s := &sampler{opts: Options{TempCeilingC: 80, Telemetry: tel}, gpus: []gpuInfo{{Index: 0}, {Index: 1}}, stop: stop}
	s.sampleAll(ctx)
	if ctx.Err() != nil {
		t.Fatal("stopped below the ceiling")
	}
	s.sampleAll(ctx) // gpu 1 reads 85
	if !errors.Is(context.Cause(ctx), errCeiling) {
		t.Fatalf("cause = %v; want the ceiling", context.Cause(ctx))
	}
	s.sampleAll(context.Background()) // gpu 0 reads 90: the first crossing stays
	trace, nerr, lastErr, crossing := s.result()
	if crossing == nil || crossing.GPU != 1 || crossing.TempC != 85 {
		t.Fatalf("crossing = %+v; want gpu 1 at 85", crossing)
	}
	if nerr != 1 || !strings.Contains(lastErr, "gpu 1: nvml: timeout") {
		t.Errorf("errors = %d %q", nerr, lastErr)
	}
	if len(trace) != 5 {
		t.Errorf("trace has %d samples; want 5", len(trace))
	}
	for _, ts := range trace {
		if ts.Time.IsZero() {
			t.Error("sample without a time")
		}
	}
}

func TestStartClock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		readies   int
		wantCause error
	}{
		{"duration starts once all are ready", 2, errDurationOver},
		{"waits for every gpu", 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, stop := context.WithCancelCause(context.Background())
			ready := make(chan struct{}, 2)
			done := make(chan struct{})
			go func() { startClock(ctx, stop, ready, 2, 20*time.Millisecond); close(done) }()
			for range tc.readies {
				ready <- struct{}{}
			}
			select {
			case <-done:
				if !errors.Is(context.Cause(ctx), tc.wantCause) || tc.wantCause == nil {
					t.Fatalf("clock ended with %v; want %v", context.Cause(ctx), tc.wantCause)
				}
			case <-time.After(300 * time.Millisecond):
				if tc.wantCause != nil {
					t.Fatal("duration never ended")
				}
				stop(errAllDone)
				<-done
			}
		})
	}
}

func TestTelemetryJSON(t *testing.T) {
	t.Parallel()
	s := TelemetrySample{Time: time.Unix(0, 0).UTC(), GPU: 1, TempC: 41, PowerW: math.NaN(), SMClockMHz: 1980, MemClockMHz: math.Inf(1)}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"time":"1970-01-01T00:00:00Z","gpu":1,"temp_c":41,"power_w":null,"sm_clock_mhz":1980,"mem_clock_mhz":null,"clock_event_reasons":null}`
	if string(b) != want {
		t.Errorf("json = %s\nwant   %s", b, want)
	}
	s.ClockEventReasons, s.HasClockEventReasons = 0x4, true
	b, _ = json.Marshal(s)
	if !strings.Contains(string(b), `"clock_event_reasons":4`) {
		t.Errorf("reasons missing: %s", b)
	}
}

// TestRunWithoutGPU checks that a machine without a driver gets a clean
// error naming libcuda.so.1, and bad options fail before the driver.
func TestRunWithoutGPU(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Options{})
	if err == nil || !strings.Contains(err.Error(), "duration is required") {
		t.Errorf("Run without a duration = %v", err)
	}
	if _, derr := cuda.Open(); derr == nil {
		t.Skip("a CUDA driver is present")
	}
	res, err := Run(context.Background(), Options{Duration: time.Second})
	if !errors.Is(err, cuda.ErrNoDriver) || !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Fatalf("Run error = %v; want ErrNoDriver naming libcuda.so.1", err)
	}
	if len(res.GPUs) != 0 {
		t.Errorf("result without a GPU lists GPUs: %+v", res)
	}
}
