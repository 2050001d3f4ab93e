// Package cuda drives NVIDIA GPUs through the CUDA driver API
// (libcuda.so.1) and cuBLAS (libcublas.so.*), both loaded at run time with
// purego: the binary needs neither cgo nor a CUDA toolkit to build, and a
// machine without a GPU gets an error from Open, never a crash.
//
// The driver API binds a context to the calling OS thread. Every method
// that issues work (memory, streams, events, modules, launches, cuBLAS
// handles) therefore runs on the thread on which Context.SetCurrent was
// last called: lock the goroutine to its thread first
// (runtime.LockOSThread) and keep one goroutine per GPU. Methods are not
// safe for concurrent use on the same object unless they say so.
//
// Kernels come as PTX text carried in the binary (//go:embed); the driver
// compiles it for the GPU at load time, so one binary serves every
// architecture the PTX target allows.
//
// Errors name the call that failed and the driver's own name and text for
// the code (cuGetErrorName, cuGetErrorString; cublasGetStatusString), as
// *Error and *BLASError; callers branch on ErrNoDriver and ErrNoBLAS when
// the libraries are absent.
package cuda
