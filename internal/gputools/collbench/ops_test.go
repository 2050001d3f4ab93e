package collbench

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"
)

func TestBusFactor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		op   Op
		n    int
		want float64
	}{
		{AllReduce, 2, 1}, {AllReduce, 8, 1.75}, {AllReduce, 1, 0},
		{AllGather, 2, 0.5}, {AllGather, 8, 0.875},
		{ReduceScatter, 4, 0.75}, {AllToAll, 8, 0.875},
		{Broadcast, 2, 1}, {Broadcast, 16, 1},
		{Op("reduce"), 4, 0}, {AllReduce, 0, 0},
	}
	for _, tc := range tests {
		if got := BusFactor(tc.op, tc.n); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("BusFactor(%s, %d) = %g; want %g", tc.op, tc.n, got, tc.want)
		}
	}
}

func TestShapeOf(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tests := []struct {
		name   string
		op     Op
		n      int
		d      DType
		target uint64
		want   Shape
	}{
		{"all-reduce bf16", AllReduce, 2, BF16, 256 * mib, Shape{Bytes: 256 * mib, Count: 128 * mib, Block: 128 * mib, SendBytes: 256 * mib, RecvBytes: 256 * mib}},
		{"all-reduce rounds down to whole elements", AllReduce, 2, FP32, 1023, Shape{Bytes: 1020, Count: 255, Block: 255, SendBytes: 1020, RecvBytes: 1020}},
		// nccl-tests: S is the whole gathered array, each rank sends S/n.
		{"all-gather", AllGather, 2, BF16, 256 * mib, Shape{Bytes: 256 * mib, Count: 128 * mib, Block: 64 * mib, SendBytes: 128 * mib, RecvBytes: 256 * mib}},
		{"reduce-scatter", ReduceScatter, 4, FP32, 64 * mib, Shape{Bytes: 64 * mib, Count: 16 * mib, Block: 4 * mib, SendBytes: 64 * mib, RecvBytes: 16 * mib}},
		{"all-to-all", AllToAll, 8, FP16, 16 * mib, Shape{Bytes: 16 * mib, Count: 8 * mib, Block: mib, SendBytes: 16 * mib, RecvBytes: 16 * mib}},
		{"block rounds down for 3 ranks", AllGather, 3, BF16, 1000, Shape{Bytes: 996, Count: 498, Block: 166, SendBytes: 332, RecvBytes: 996}},
		{"too small for the ranks", ReduceScatter, 8, FP32, 16, Shape{}},
		{"broadcast", Broadcast, 2, BF16, 2 * mib, Shape{Bytes: 2 * mib, Count: mib, Block: mib, SendBytes: 2 * mib, RecvBytes: 2 * mib}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ShapeOf(tc.op, tc.n, tc.d, tc.target); got != tc.want {
				t.Errorf("ShapeOf = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestBandwidths(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		op           Op
		n            int
		bytes        uint64
		sec          float64
		algbw, busbw float64
	}{
		// 256 MiB in 887.8 µs, as measured on 2×H200: 302.37 GB/s.
		{"all-reduce 2 ranks", AllReduce, 2, 268435456, 887.8e-6, 302.36, 302.36},
		{"all-reduce 8 ranks", AllReduce, 8, 1e9, 0.01, 100, 175},
		{"all-gather", AllGather, 2, 268435456, 546.1e-6, 491.55, 245.78},
		{"broadcast", Broadcast, 4, 2e9, 1, 2, 2},
		{"zero time", AllReduce, 2, 1, 0, 0, 0},
	}
	for _, tc := range tests {
		a, b := Bandwidths(tc.op, tc.n, tc.bytes, tc.sec)
		if math.Abs(a-tc.algbw) > 0.01 || math.Abs(b-tc.busbw) > 0.01 {
			t.Errorf("%s: Bandwidths = %.2f, %.2f; want %.2f, %.2f", tc.name, a, b, tc.algbw, tc.busbw)
		}
	}
}

func TestSizes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		lo, hi   uint64
		factor   int
		want     []uint64
		wantNone bool
	}{
		{"defaults", 1 << 20, 256 << 20, 2, []uint64{1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20, 128 << 20, 256 << 20}, false},
		{"max always last", 1 << 20, 100 << 20, 4, []uint64{1 << 20, 4 << 20, 16 << 20, 64 << 20, 100 << 20}, false},
		{"one size", 8, 8, 2, []uint64{8}, false},
		{"no overflow near the top", 1 << 62, 1<<63 + 1, 2, []uint64{1 << 62, 1 << 63, 1<<63 + 1}, false},
		{"bad factor", 1, 8, 1, nil, true},
		{"max below min", 8, 4, 2, nil, true},
	}
	for _, tc := range tests {
		got := Sizes(tc.lo, tc.hi, tc.factor)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: Sizes = %v; want %v", tc.name, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	ops := []struct {
		in      string
		want    []Op
		wantErr bool
	}{
		{"", []Op{AllReduce}, false},
		{"all", Ops(), false},
		{"all-gather, all_reduce,all_gather", []Op{AllGather, AllReduce}, false},
		{"ALL_TO_ALL", []Op{AllToAll}, false},
		{"reduce", nil, true},
	}
	for _, tc := range ops {
		got, err := ParseOps(tc.in)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("ParseOps(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for in, want := range map[string]DType{"": BF16, "BF16": BF16, "half": FP16, "fp32": FP32} {
		if got, err := ParseDType(in); err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseDType("fp8"); err == nil {
		t.Error("ParseDType(fp8) succeeded")
	}
}

// TestPatternExact checks what the correctness check rests on: the
// pattern stays in [-a, a], uses the whole range, differs between ranks,
// and any sum over n ranks, with every partial sum, is an integer the type
// holds exactly.
func TestPatternExact(t *testing.T) {
	t.Parallel()
	for _, d := range []DType{BF16, FP16, FP32} {
		for _, n := range []int{2, 3, 8, 32, 64, 256} {
			a := Amplitude(d, n)
			if a < 1 || a > 8 || n*a > d.exactLimit() {
				t.Fatalf("Amplitude(%s, %d) = %d: sums could leave the exact range", d, n, a)
			}
			seen := map[int]bool{}
			same := 0
			for i := range uint64(4096) {
				partial := 0
				for r := range n {
					v := Pattern(r, i, a)
					if v < -a || v > a {
						t.Fatalf("Pattern(%d, %d, %d) = %d, outside ±%d", r, i, a, v, a)
					}
					seen[v] = true
					partial += v
					if float64(partial) != roundTrip(d, float64(partial)) {
						t.Fatalf("%s: partial sum %d is not exact", d, partial)
					}
				}
				if Pattern(0, i, a) == Pattern(1, i, a) {
					same++
				}
			}
			if len(seen) != 2*a+1 {
				t.Errorf("%s n=%d: pattern took %d of %d values", d, n, len(seen), 2*a+1)
			}
			if float64(same)/4096 > 2.0/float64(2*a+1) {
				t.Errorf("%s n=%d: ranks 0 and 1 agree on %d of 4096 elements", d, n, same)
			}
		}
	}
	if Amplitude(BF16, 257) != 0 || Amplitude(FP32, 257) != 8 {
		t.Error("bf16 cannot check 257 ranks exactly; fp32 can")
	}
}

// roundTrip stores v in the type and reads it back.
func roundTrip(d DType, v float64) float64 {
	buf := encode(d, []float64{v})
	return decode(d, buf, 0)
}

// encode writes values in the type's bits, as NCCL would leave them
// (exact for the small integers used here).
func encode(d DType, vals []float64) []byte {
	var b bytes.Buffer
	for _, v := range vals {
		switch d {
		case FP32:
			_ = binary.Write(&b, binary.LittleEndian, math.Float32bits(float32(v)))
		case BF16:
			_ = binary.Write(&b, binary.LittleEndian, uint16(math.Float32bits(float32(v))>>16))
		case FP16:
			_ = binary.Write(&b, binary.LittleEndian, floatToHalf(float32(v)))
		}
	}
	return b.Bytes()
}

// floatToHalf converts integers and NaN, all the tests need.
func floatToHalf(f float32) uint16 {
	if f != f {
		return 0x7e00
	}
	if f == 0 {
		return 0
	}
	var sign uint16
	if f < 0 {
		sign, f = 0x8000, -f
	}
	e := int(math.Floor(math.Log2(float64(f))))
	frac := uint16((float64(f)/math.Ldexp(1, e) - 1) * 1024)
	return sign | uint16(e+15)<<10 | frac
}

// TestExpected checks the expected outputs against the definitions of
// the operations, computed from the inputs the long way.
func TestExpected(t *testing.T) {
	t.Parallel()
	const n, block, amp = 3, 5, 8
	count := uint64(n * block)
	in := func(r int) []int { // rank r's input, count elements
		out := make([]int, count)
		for i := range out {
			out[i] = Pattern(r, uint64(i), amp)
		}
		return out
	}
	for rank := range n {
		for i := range count {
			sum := 0
			for r := range n {
				sum += in(r)[i]
			}
			if got := Expected(AllReduce, n, rank, count, i, amp); got != sum {
				t.Fatalf("all-reduce rank %d [%d] = %d; want %d", rank, i, got, sum)
			}
			// all-gather: block j of the output is rank j's first block.
			if got, want := Expected(AllGather, n, rank, block, i, amp), in(int(i / block))[i%block]; got != want {
				t.Fatalf("all-gather rank %d [%d] = %d; want %d", rank, i, got, want)
			}
			if got, want := Expected(Broadcast, n, rank, count, i, amp), in(0)[i]; got != want {
				t.Fatalf("broadcast rank %d [%d] = %d; want %d", rank, i, got, want)
			}
			// all-to-all: block j of rank's output is block rank of rank j's input.
			j := int(i / block)
			if got, want := Expected(AllToAll, n, rank, block, i, amp), in(j)[uint64(rank)*block+i%block]; got != want {
				t.Fatalf("all-to-all rank %d [%d] = %d; want %d", rank, i, got, want)
			}
		}
		for i := range uint64(block) {
			sum := 0
			for r := range n {
				sum += in(r)[uint64(rank)*block+i]
			}
			if got := Expected(ReduceScatter, n, rank, block, i, amp); got != sum {
				t.Fatalf("reduce-scatter rank %d [%d] = %d; want %d", rank, i, got, sum)
			}
		}
	}
}

func TestCountWrong(t *testing.T) {
	t.Parallel()
	const n, rank, block, amp = 2, 1, 64, 8
	for _, d := range []DType{BF16, FP16, FP32} {
		for _, op := range Ops() {
			count := uint64(n * block)
			if op == ReduceScatter {
				count = block
			}
			vals := make([]float64, count)
			for i := range vals {
				vals[i] = float64(Expected(op, n, rank, block, uint64(i), amp))
			}
			if w := countWrong(op, d, n, rank, block, count, amp, encode(d, vals)); w != 0 {
				t.Errorf("%s %s: %d wrong in a correct output", d, op, w)
			}
			bad := slices.Clone(vals)
			bad[3] += 1               // off by one
			bad[count-1] = math.NaN() // never written (the sentinel)
			if w := countWrong(op, d, n, rank, block, count, amp, encode(d, bad)); w != 2 {
				t.Errorf("%s %s: %d wrong; want 2", d, op, w)
			}
		}
	}
	// The sentinel the benchmark writes, all bytes 0xFF, is NaN in every
	// type and so never counts as right.
	for _, d := range []DType{BF16, FP16, FP32} {
		if v := decode(d, bytes.Repeat([]byte{0xFF}, 4), 0); !math.IsNaN(v) {
			t.Errorf("%s: 0xFF… decodes to %g, not NaN", d, v)
		}
	}
	if halfToFloat(0x3c00) != 1 || halfToFloat(0xc800) != -8 || halfToFloat(0x0001) != math.Ldexp(1, -24) || !math.IsInf(halfToFloat(0x7c00), 1) {
		t.Error("halfToFloat is wrong on 1, -8, the smallest subnormal or +Inf")
	}
}

// TestKernelsASCII guards the PTX: ptxas refuses any non-ASCII byte, even
// in a comment (seen on an H200: "Unexpected non-ASCII character").
func TestKernelsASCII(t *testing.T) {
	t.Parallel()
	for i, c := range kernelsPTX {
		if c > 0x7f {
			line := bytes.Count(kernelsPTX[:i], []byte("\n")) + 1
			t.Fatalf("kernels.ptx line %d has a non-ASCII byte", line)
		}
	}
	for _, name := range []string{"gpuchaos_nccl_fill_bf16", "gpuchaos_nccl_fill_f16", "gpuchaos_nccl_fill_f32"} {
		if !bytes.Contains(kernelsPTX, []byte(".entry "+name+"(")) {
			t.Errorf("kernels.ptx lacks %s", name)
		}
	}
}
