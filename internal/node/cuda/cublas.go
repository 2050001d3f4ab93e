package cuda

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNoBLAS means no loadable cuBLAS library was found.
var ErrNoBLAS = errors.New("no cuBLAS library")

// BLASError is a failed cuBLAS call.
type BLASError struct {
	// Call is the cuBLAS function that failed.
	Call string
	// Status is the cublasStatus_t it returned.
	Status int
	// Message is cuBLAS' text for Status (cublasGetStatusString).
	Message string
}

func (e *BLASError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("%s: %s (%d)", e.Call, e.Message, e.Status)
	}
	return fmt.Sprintf("%s: cuBLAS status %d", e.Call, e.Status)
}

// DataType is a cudaDataType_t: the element type of a matrix.
type DataType int

// Matrix element types.
const (
	R32F  DataType = 0  // CUDA_R_32F
	R64F  DataType = 1  // CUDA_R_64F
	R16F  DataType = 2  // CUDA_R_16F
	R16BF DataType = 14 // CUDA_R_16BF
)

// ComputeType is a cublasComputeType_t: the arithmetic a GEMM does.
type ComputeType int

// Compute types.
const (
	// Compute32F accumulates in fp32; with bf16 or fp16 inputs it runs on
	// the tensor cores.
	Compute32F ComputeType = 68
	// Compute32FFastTF32 lets fp32 inputs run on the tensor cores as TF32.
	Compute32FFastTF32 ComputeType = 77
	// Compute64F is fp64 throughout.
	Compute64F ComputeType = 70
)

// Op is a cublasOperation_t.
type Op int

// Operations on an input matrix.
const (
	OpN Op = 0 // as is
	OpT Op = 1 // transposed
)

// GemmAlgoDefault is CUBLAS_GEMM_DEFAULT: cuBLAS' heuristics choose.
const GemmAlgoDefault = -1

// blasFuncs holds the cuBLAS function addresses.
type blasFuncs struct {
	create, destroy, setStream, setMathMode, setAtomicsMode uintptr
	setPointerMode, getVersion, getStatusString, gemmEx     uintptr
}

func (f *blasFuncs) symbols() []symbol {
	return []symbol{
		{[]string{"cublasCreate_v2"}, &f.create},
		{[]string{"cublasDestroy_v2"}, &f.destroy},
		{[]string{"cublasSetStream_v2"}, &f.setStream},
		{[]string{"cublasSetMathMode"}, &f.setMathMode},
		{[]string{"cublasSetAtomicsMode"}, &f.setAtomicsMode},
		{[]string{"cublasSetPointerMode_v2"}, &f.setPointerMode},
		{[]string{"cublasGetVersion_v2"}, &f.getVersion},
		{[]string{"cublasGetStatusString"}, &f.getStatusString},
		{[]string{"cublasGemmEx"}, &f.gemmEx},
	}
}

// BLAS is the loaded cuBLAS library; safe for concurrent use (it holds
// only function addresses) and never unloaded.
type BLAS struct {
	f    blasFuncs
	Path string // the file that was loaded
}

// LibraryDirs returns the directories a user points CUDA libraries at:
// each of LD_LIBRARY_PATH, then lib64 and lib under CUDA_HOME and
// CUDA_PATH. Callers add their library's usual places after them.
func LibraryDirs(getenv func(string) string) []string {
	var dirs []string
	for _, d := range strings.Split(getenv("LD_LIBRARY_PATH"), ":") {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if h := getenv(v); h != "" {
			dirs = append(dirs, filepath.Join(h, "lib64"), filepath.Join(h, "lib"))
		}
	}
	return dirs
}

// BLASCandidates lists the cuBLAS files OpenBLAS tries, in order: each
// soname (newest CUDA first) through the dynamic loader's own search
// (LD_LIBRARY_PATH, the ld.so cache), then in each LD_LIBRARY_PATH
// directory, CUDA_HOME and CUDA_PATH, and the toolkit's usual place
// /usr/local/cuda, which the loader's cache often lacks. getenv reads the
// environment.
func BLASCandidates(getenv func(string) string) []string {
	sonames := []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}
	dirs := append(LibraryDirs(getenv), "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu")
	out := append([]string(nil), sonames...)
	seen := map[string]bool{}
	for _, s := range sonames {
		for _, d := range dirs {
			p := filepath.Join(d, s)
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// OpenBLAS loads the first cuBLAS library among candidates (see
// BLASCandidates) that loads and exports every function used. The error
// wraps ErrNoBLAS and says what was tried.
func OpenBLAS(candidates []string) (*BLAS, error) {
	var firstErr error
	for _, p := range candidates {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		b := &BLAS{Path: p}
		if err := resolve(b.f.symbols(), func(n string) (uintptr, error) { return purego.Dlsym(h, n) }); err != nil {
			firstErr = fmt.Errorf("%s: %w", p, err)
			continue
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w (tried %d paths, libcublas.so.13 first): %v", ErrNoBLAS, len(candidates), firstErr)
}

func (b *BLAS) check(name string, status int) error {
	if status == 0 {
		return nil
	}
	e := &BLASError{Call: name, Status: status}
	if b.f.getStatusString != 0 {
		r, _, _ := purego.SyscallN(b.f.getStatusString, uintptr(status))
		e.Message = goString(*(**byte)(unsafe.Pointer(&r)))
	}
	return e
}

// Handle is a cuBLAS handle, bound to the context current when it was
// created; use it only on that context's thread.
type Handle struct {
	b *BLAS
	h uintptr
}

// Version returns the cuBLAS version of a handle's library, as
// 10000·major + 100·minor + patch.
func (h *Handle) Version() (int, error) {
	var v int32
	if err := h.b.check("cublasGetVersion_v2", call(h.b.f.getVersion, h.h, uintptr(unsafe.Pointer(&v)))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// Math modes and atomics settings.
const (
	mathDefault         = 0 // CUBLAS_DEFAULT_MATH
	atomicsNotAllowed   = 0 // CUBLAS_ATOMICS_NOT_ALLOWED
	pointerModeHostMode = 0 // CUBLAS_POINTER_MODE_HOST
)

// NewHandle creates a cuBLAS handle in the current context with settings
// that make results bitwise reproducible run to run: default math mode
// (the compute type of each call decides tensor-core use), atomics not
// allowed (so no split-K reduction through atomics), and scalars read
// from host memory.
func (b *BLAS) NewHandle() (*Handle, error) {
	h := &Handle{b: b}
	if err := b.check("cublasCreate_v2", call(b.f.create, uintptr(unsafe.Pointer(&h.h)))); err != nil {
		return nil, err
	}
	for _, s := range []struct {
		name string
		fn   uintptr
		v    uintptr
	}{
		{"cublasSetMathMode", b.f.setMathMode, mathDefault},
		{"cublasSetAtomicsMode", b.f.setAtomicsMode, atomicsNotAllowed},
		{"cublasSetPointerMode_v2", b.f.setPointerMode, pointerModeHostMode},
	} {
		if err := b.check(s.name, call(s.fn, h.h, s.v)); err != nil {
			_ = h.Destroy()
			return nil, err
		}
	}
	return h, nil
}

// Destroy releases the handle.
func (h *Handle) Destroy() error {
	if h == nil || h.h == 0 {
		return nil
	}
	err := h.b.check("cublasDestroy_v2", call(h.b.f.destroy, h.h))
	h.h = 0
	return err
}

// SetStream makes the handle issue its work to s.
func (h *Handle) SetStream(s Stream) error {
	return h.b.check("cublasSetStream_v2", call(h.b.f.setStream, h.h, s.h))
}

// Gemm describes C = Alpha·op(A)·op(B) + Beta·C in column-major order, A
// being M×K, B K×N and C M×N after the operations.
type Gemm struct {
	TransA, TransB Op
	M, N, K        int
	Alpha, Beta    float64
	A              DevicePtr
	AType          DataType
	LDA            int
	B              DevicePtr
	BType          DataType
	LDB            int
	C              DevicePtr
	CType          DataType
	LDC            int
	Compute        ComputeType
	// Algo is a cublasGemmAlgo_t; GemmAlgoDefault lets cuBLAS choose.
	Algo int
}

// GemmEx issues the product to the handle's stream (cublasGemmEx). Alpha
// and Beta are passed as fp64 for Compute64F and as fp32 otherwise, as
// cuBLAS requires.
func (h *Handle) GemmEx(g Gemm) error {
	if g.Compute == Compute64F {
		alpha, beta := g.Alpha, g.Beta
		return h.b.check("cublasGemmEx", h.gemmEx(g, uintptr(unsafe.Pointer(&alpha)), uintptr(unsafe.Pointer(&beta))))
	}
	alpha, beta := float32(g.Alpha), float32(g.Beta)
	return h.b.check("cublasGemmEx", h.gemmEx(g, uintptr(unsafe.Pointer(&alpha)), uintptr(unsafe.Pointer(&beta))))
}

// gemmEx passes the scalars as pointers converted in the caller's
// argument list, so go:uintptrescapes keeps them on the heap and alive
// for the call (cuBLAS reads them during it, in host pointer mode).
//
//go:uintptrescapes
func (h *Handle) gemmEx(g Gemm, alpha, beta uintptr) int {
	return call(h.b.f.gemmEx, h.h, uintptr(g.TransA), uintptr(g.TransB),
		uintptr(g.M), uintptr(g.N), uintptr(g.K), alpha,
		uintptr(g.A), uintptr(g.AType), uintptr(g.LDA),
		uintptr(g.B), uintptr(g.BType), uintptr(g.LDB), beta,
		uintptr(g.C), uintptr(g.CType), uintptr(g.LDC),
		uintptr(g.Compute), uintptr(uint32(int32(g.Algo))))
}
