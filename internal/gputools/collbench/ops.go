package collbench

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/node/nccl"
)

// Op is a collective operation the benchmark runs.
type Op string

// The operations, named as nccl-tests names its binaries.
const (
	AllReduce     Op = "all_reduce"     // sum over all ranks, result on every rank
	AllGather     Op = "all_gather"     // every rank's block, concatenated, on every rank
	ReduceScatter Op = "reduce_scatter" // sum over all ranks, block i on rank i
	Broadcast     Op = "broadcast"      // rank 0's buffer on every rank
	AllToAll      Op = "all_to_all"     // block j of rank i to block i of rank j (grouped send/recv)
)

// Ops lists every operation, the default first.
func Ops() []Op { return []Op{AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll} }

// ParseOps reads a comma-separated list of operations, or "all". Hyphens
// may stand for underscores (all-reduce).
func ParseOps(s string) ([]Op, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return []Op{AllReduce}, nil
	}
	if strings.EqualFold(s, "all") {
		return Ops(), nil
	}
	var out []Op
	for _, p := range strings.Split(s, ",") {
		name := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(p)), "-", "_")
		var found bool
		for _, o := range Ops() {
			if string(o) == name {
				if !containsOp(out, o) {
					out = append(out, o)
				}
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("operation %q is not one of all_reduce, all_gather, reduce_scatter, broadcast, all_to_all or all", p)
		}
	}
	return out, nil
}

func containsOp(ops []Op, o Op) bool {
	for _, x := range ops {
		if x == o {
			return true
		}
	}
	return false
}

// BusFactor is the ratio busbw/algbw of nccl-tests (doc/PERFORMANCE.md)
// for n ranks: what each rank's link must carry relative to the size, so
// that the bus bandwidth compares with the hardware's whatever n is.
func BusFactor(op Op, n int) float64 {
	if n < 1 {
		return 0
	}
	f := float64(n-1) / float64(n)
	switch op {
	case AllReduce:
		return 2 * f
	case AllGather, ReduceScatter, AllToAll:
		return f
	case Broadcast:
		return 1
	}
	return 0
}

// DType is an element type the benchmark moves.
type DType string

// The element types.
const (
	BF16 DType = "bf16"
	FP16 DType = "fp16"
	FP32 DType = "fp32"
)

// ParseDType reads a type name; "" is bf16.
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "half", "float16":
		return FP16, nil
	case "fp32", "float", "float32":
		return FP32, nil
	}
	return "", fmt.Errorf("data type %q is not one of bf16, fp16 or fp32", s)
}

// ncclType is the NCCL enum for the type.
func (d DType) ncclType() nccl.DataType {
	switch d {
	case FP16:
		return nccl.Float16
	case FP32:
		return nccl.Float32
	}
	return nccl.Bfloat16
}

// Size is the size of one element in bytes.
func (d DType) Size() uint64 { return d.ncclType().Size() }

// exactLimit is the largest integer magnitude up to which every integer is
// exactly representable in the type (2^(mantissa bits+1)).
func (d DType) exactLimit() int {
	switch d {
	case FP16:
		return 2048
	case FP32:
		return 1 << 24
	}
	return 256
}

// Shape is how one size of one operation is laid out, counted as
// nccl-tests counts it.
type Shape struct {
	// Bytes is the size S of the operation: the larger of a rank's input
	// and output buffers (the whole gathered or scattered array for
	// all-gather and reduce-scatter, a rank's whole send buffer for
	// all-to-all). algbw = Bytes/time.
	Bytes uint64
	// Count is Bytes in elements.
	Count uint64
	// Block is the per-rank block in elements for all-gather,
	// reduce-scatter and all-to-all (the count NCCL is given); Count for
	// the others.
	Block uint64
	// SendBytes and RecvBytes are a rank's input and output buffer sizes.
	SendBytes, RecvBytes uint64
}

// ShapeOf lays out an operation of about target bytes over n ranks. For
// the block operations the size is rounded down to a whole block per
// rank; a zero Count means the target is too small for n ranks.
func ShapeOf(op Op, n int, d DType, target uint64) Shape {
	es := d.Size()
	switch op {
	case AllGather, ReduceScatter, AllToAll:
		block := target / (uint64(n) * es)
		count := block * uint64(n)
		s := Shape{Bytes: count * es, Count: count, Block: block, SendBytes: count * es, RecvBytes: count * es}
		switch op {
		case AllGather:
			s.SendBytes = block * es
		case ReduceScatter:
			s.RecvBytes = block * es
		}
		return s
	}
	count := target / es
	return Shape{Bytes: count * es, Count: count, Block: count, SendBytes: count * es, RecvBytes: count * es}
}

// Bandwidths returns algbw = bytes/seconds and busbw = algbw·BusFactor,
// both in GB/s (10^9 bytes per second, as nccl-tests).
func Bandwidths(op Op, n int, bytes uint64, seconds float64) (algbw, busbw float64) {
	if seconds <= 0 {
		return 0, 0
	}
	algbw = float64(bytes) / seconds / 1e9
	return algbw, algbw * BusFactor(op, n)
}

// Sizes lists the sweep: min, min·factor, … up to max, with max itself
// last when the steps skip it.
func Sizes(minBytes, maxBytes uint64, factor int) []uint64 {
	if minBytes == 0 || maxBytes < minBytes || factor < 2 {
		return nil
	}
	var out []uint64
	s := minBytes
	for s <= maxBytes {
		out = append(out, s)
		if s > maxBytes/uint64(factor) {
			break
		}
		s *= uint64(factor)
	}
	if out[len(out)-1] != maxBytes {
		out = append(out, maxBytes)
	}
	return out
}

// Amplitude is the largest magnitude of the test pattern for n ranks: the
// values are integers in [-a, a], and a sum over n ranks, with every
// partial sum on the way, stays within the type's exact integers, so a
// correct reduction is exact in any order. It is at most 8 and 0 when
// even ±1 could not be summed exactly.
func Amplitude(d DType, n int) int {
	if n < 1 {
		return 0
	}
	return min(8, d.exactLimit()/n)
}

// Pattern is the test value of element i of rank's input, an integer in
// [-amp, amp]. A counter-based hash of (rank, i), so that a block from the
// wrong rank or at the wrong offset almost always differs; the PTX fill
// kernel computes the same function.
func Pattern(rank int, i uint64, amp int) int {
	x := (i+1)*0x9E3779B97F4A7C15 + (uint64(rank)+1)*0xBF58476D1CE4E5B9
	x ^= x >> 31
	x *= 0x94D049BB133111EB
	x ^= x >> 29
	m := uint32(2*amp + 1)
	return int(uint32(x>>32)%m) - amp
}

// Expected is the correct value of element i of rank's output for the
// operation over n ranks, with inputs from Pattern and blocks of block
// elements.
func Expected(op Op, n, rank int, block, i uint64, amp int) int {
	switch op {
	case AllReduce:
		return sumOver(n, i, amp)
	case AllGather:
		return Pattern(int(i/block), i%block, amp)
	case ReduceScatter:
		return sumOver(n, uint64(rank)*block+i, amp)
	case Broadcast:
		return Pattern(0, i, amp)
	case AllToAll:
		// Block j of the output came from rank j's block for this rank.
		return Pattern(int(i/block), uint64(rank)*block+i%block, amp)
	}
	return math.MinInt
}

func sumOver(n int, i uint64, amp int) int {
	s := 0
	for r := range n {
		s += Pattern(r, i, amp)
	}
	return s
}

// decode reads element i of a little-endian buffer of type d as a
// float64.
func decode(d DType, buf []byte, i uint64) float64 {
	switch d {
	case FP32:
		b := buf[i*4:]
		return float64(math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24))
	case FP16:
		return halfToFloat(uint16(buf[i*2]) | uint16(buf[i*2+1])<<8)
	}
	return float64(math.Float32frombits(uint32(uint16(buf[i*2])|uint16(buf[i*2+1])<<8) << 16))
}

// halfToFloat converts IEEE binary16 bits.
func halfToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * frac * math.Ldexp(1, -24)
	case 0x1f:
		if frac == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * (1 + frac/1024) * math.Ldexp(1, exp-15)
}

// countWrong compares the first count elements of out with the expected
// output of rank; NaN (the sentinel a missing write leaves) never
// matches.
func countWrong(op Op, d DType, n, rank int, block, count uint64, amp int, out []byte) uint64 {
	var wrong uint64
	for i := range count {
		if decode(d, out, i) != float64(Expected(op, n, rank, block, i, amp)) {
			wrong++
		}
	}
	return wrong
}
