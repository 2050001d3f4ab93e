package burn

import (
	_ "embed"
	"fmt"
	"math"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
)

//go:embed kernels.ptx
var kernelsPTX []byte

// DType is the arithmetic a burn runs.
type DType string

// The data types a burn can run.
const (
	// BF16 is bf16 inputs and output with fp32 accumulation on the tensor
	// cores (PyTorch's bf16 a @ b).
	BF16 DType = "bf16"
	// FP16 is fp16 inputs and output with fp32 accumulation on the tensor
	// cores.
	FP16 DType = "fp16"
	// TF32 is fp32 inputs and output multiplied on the tensor cores as
	// TF32 (PyTorch's matmul with allow_tf32, gpu-burn's -tc).
	TF32 DType = "tf32"
	// FP32 is plain fp32 on the CUDA cores.
	FP32 DType = "fp32"
	// FP64 is fp64 (on the fp64 tensor cores where the GPU has them).
	FP64 DType = "fp64"
)

// DTypes lists every data type, the default first.
func DTypes() []DType { return []DType{BF16, FP16, TF32, FP32, FP64} }

// ParseDType reads a data type name, case-insensitively; "" is the
// default, bf16.
func ParseDType(s string) (DType, error) {
	if s == "" {
		return BF16, nil
	}
	for _, d := range DTypes() {
		if strings.EqualFold(s, string(d)) {
			return d, nil
		}
	}
	names := make([]string, 0, 5)
	for _, d := range DTypes() {
		names = append(names, string(d))
	}
	return "", fmt.Errorf("data type %q is not one of %s", s, strings.Join(names, ", "))
}

// dtypeSpec is how a data type maps onto buffers, kernels and cuBLAS.
type dtypeSpec struct {
	elemBytes uint64
	data      cuda.DataType
	compute   cuda.ComputeType
	fill      string // .entry that draws random inputs
	compare   string // .entry that compares outputs bitwise
}

func specOf(d DType) (dtypeSpec, bool) {
	switch d {
	case BF16:
		return dtypeSpec{2, cuda.R16BF, cuda.Compute32F, "gpuchaos_fill_bf16", "gpuchaos_compare_b16"}, true
	case FP16:
		return dtypeSpec{2, cuda.R16F, cuda.Compute32F, "gpuchaos_fill_f16", "gpuchaos_compare_b16"}, true
	case TF32:
		return dtypeSpec{4, cuda.R32F, cuda.Compute32FFastTF32, "gpuchaos_fill_f32", "gpuchaos_compare_b32"}, true
	case FP32:
		return dtypeSpec{4, cuda.R32F, cuda.Compute32F, "gpuchaos_fill_f32", "gpuchaos_compare_b32"}, true
	case FP64:
		return dtypeSpec{8, cuda.R64F, cuda.Compute64F, "gpuchaos_fill_f64", "gpuchaos_compare_b64"}, true
	}
	return dtypeSpec{}, false
}

// splitmix64 is the counter-based hash the fill kernels compute for
// element i; kept here so that a burn can check what the GPU drew.
func splitmix64(seed, i uint64) uint64 {
	z := (i+1)*0x9E3779B97F4A7C15 + seed
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// expectedBits returns the bits the fill kernel of d must write at element
// i for the seed, as the low elemBytes bytes of the result.
func expectedBits(d DType, seed, i uint64) uint64 {
	h := splitmix64(seed, i)
	if d == FP64 {
		return math.Float64bits(float64(h>>11)*0x1p-52 - 1)
	}
	f := float32(h>>40)*0x1p-23 - 1 // exact: 24 bits
	switch d {
	case BF16:
		return uint64(math.Float32bits(f) >> 16) // toward zero
	case FP16:
		return uint64(f32ToF16TowardZero(f))
	}
	return uint64(math.Float32bits(f))
}

// f32ToF16TowardZero converts a float32 in [-1, 1) to IEEE half precision,
// rounding toward zero (PTX cvt.rz.f16.f32).
func f32ToF16TowardZero(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff == 0:
		return sign
	case exp >= -14: // normal half
		return sign | uint16(exp+15)<<10 | uint16(mant>>13)
	case exp >= -25: // subnormal half: shift the implicit bit in
		m := (mant | 0x800000) >> uint(-exp-14+13)
		return sign | uint16(m)
	}
	return sign
}

// ptxEntries returns the names of the .entry kernels in PTX text.
func ptxEntries(ptx string) []string {
	var out []string
	for _, line := range strings.Split(ptx, "\n") {
		f := strings.Fields(line)
		for i, w := range f {
			if w == ".entry" && i+1 < len(f) {
				name, _, _ := strings.Cut(f[i+1], "(")
				out = append(out, name)
			}
		}
	}
	return out
}

// flops is the arithmetic of one N×N×N product: N³ multiply-adds.
func flops(n int) float64 { return 2 * float64(n) * float64(n) * float64(n) }

// mix derives independent seeds for each GPU and buffer from one seed.
func mix(seed uint64, parts ...uint64) uint64 {
	for _, p := range parts {
		seed = splitmix64(seed, p)
	}
	return seed
}
