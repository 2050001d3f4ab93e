package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DriverLibrary is the file name of the CUDA driver library that Open loads.
const DriverLibrary = "libcuda.so.1"

// ErrNoDriver means the CUDA driver library could not be loaded or did not
// initialise: no NVIDIA driver is installed, or no GPU is usable.
var ErrNoDriver = errors.New("no CUDA driver found")

// Error is a failed CUDA driver API call.
type Error struct {
	// Call is the driver function that failed, e.g. "cuMemAlloc_v2".
	Call string
	// Code is the CUresult the call returned.
	Code int
	// Name and Message are the driver's name and text for Code
	// (cuGetErrorName, cuGetErrorString); empty when the driver has none.
	Name    string
	Message string
}

func (e *Error) Error() string {
	switch {
	case e.Name != "" && e.Message != "":
		return fmt.Sprintf("%s: %s (%d): %s", e.Call, e.Name, e.Code, e.Message)
	case e.Name != "":
		return fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, e.Code)
	default:
		return fmt.Sprintf("%s: CUDA error %d", e.Call, e.Code)
	}
}

// Codes of CUresult that callers may want to recognise.
const (
	// ErrorOutOfMemory is CUDA_ERROR_OUT_OF_MEMORY.
	ErrorOutOfMemory = 2
	// ErrorNoDevice is CUDA_ERROR_NO_DEVICE.
	ErrorNoDevice = 100
)

// IsCode reports whether err is (or wraps) a driver *Error with the code.
func IsCode(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// driverFuncs holds the addresses of the driver functions used. The _v2
// names are the ABI that cuda.h has mapped the plain names to since
// CUDA 4 (64-bit sizes); the plain names are the old 32-bit ABI.
type driverFuncs struct {
	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString            uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute    uintptr
	cuDeviceGetPCIBusId, cuDeviceTotalMem                                   uintptr
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease                     uintptr
	cuCtxSetCurrent, cuCtxSynchronize                                       uintptr
	cuMemGetInfo, cuMemAlloc, cuMemFree, cuMemsetD8, cuMemsetD8Async        uintptr
	cuMemcpyHtoD, cuMemcpyDtoH, cuMemcpyHtoDAsync, cuMemcpyDtoHAsync        uintptr
	cuMemHostAlloc, cuMemFreeHost                                           uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize                    uintptr
	cuEventCreate, cuEventRecord, cuEventSynchronize, cuEventElapsedTime    uintptr
	cuEventDestroy                                                          uintptr
	cuModuleLoadDataEx, cuModuleGetFunction, cuModuleUnload, cuLaunchKernel uintptr
}

// symbols lists every symbol with the field it fills, in lookup order.
// Where a symbol has alternatives, the first one the library exports wins.
func (f *driverFuncs) symbols() []symbol {
	return []symbol{
		{[]string{"cuInit"}, &f.cuInit},
		{[]string{"cuDriverGetVersion"}, &f.cuDriverGetVersion},
		{[]string{"cuGetErrorName"}, &f.cuGetErrorName},
		{[]string{"cuGetErrorString"}, &f.cuGetErrorString},
		{[]string{"cuDeviceGetCount"}, &f.cuDeviceGetCount},
		{[]string{"cuDeviceGet"}, &f.cuDeviceGet},
		{[]string{"cuDeviceGetName"}, &f.cuDeviceGetName},
		{[]string{"cuDeviceGetAttribute"}, &f.cuDeviceGetAttribute},
		{[]string{"cuDeviceGetPCIBusId"}, &f.cuDeviceGetPCIBusId},
		{[]string{"cuDeviceTotalMem_v2"}, &f.cuDeviceTotalMem},
		{[]string{"cuDevicePrimaryCtxRetain"}, &f.cuDevicePrimaryCtxRetain},
		{[]string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}, &f.cuDevicePrimaryCtxRelease},
		{[]string{"cuCtxSetCurrent"}, &f.cuCtxSetCurrent},
		{[]string{"cuCtxSynchronize"}, &f.cuCtxSynchronize},
		{[]string{"cuMemGetInfo_v2"}, &f.cuMemGetInfo},
		{[]string{"cuMemAlloc_v2"}, &f.cuMemAlloc},
		{[]string{"cuMemFree_v2"}, &f.cuMemFree},
		{[]string{"cuMemsetD8_v2"}, &f.cuMemsetD8},
		{[]string{"cuMemsetD8Async"}, &f.cuMemsetD8Async},
		{[]string{"cuMemcpyHtoD_v2"}, &f.cuMemcpyHtoD},
		{[]string{"cuMemcpyDtoH_v2"}, &f.cuMemcpyDtoH},
		{[]string{"cuMemcpyHtoDAsync_v2"}, &f.cuMemcpyHtoDAsync},
		{[]string{"cuMemcpyDtoHAsync_v2"}, &f.cuMemcpyDtoHAsync},
		{[]string{"cuMemHostAlloc"}, &f.cuMemHostAlloc},
		{[]string{"cuMemFreeHost"}, &f.cuMemFreeHost},
		{[]string{"cuStreamCreate"}, &f.cuStreamCreate},
		{[]string{"cuStreamDestroy_v2", "cuStreamDestroy"}, &f.cuStreamDestroy},
		{[]string{"cuStreamSynchronize"}, &f.cuStreamSynchronize},
		{[]string{"cuEventCreate"}, &f.cuEventCreate},
		{[]string{"cuEventRecord"}, &f.cuEventRecord},
		{[]string{"cuEventSynchronize"}, &f.cuEventSynchronize},
		// CUDA 12.8 added a _v2 with the same signature; CUDA 13's header
		// maps the plain name to it.
		{[]string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}, &f.cuEventElapsedTime},
		{[]string{"cuEventDestroy_v2", "cuEventDestroy"}, &f.cuEventDestroy},
		{[]string{"cuModuleLoadDataEx"}, &f.cuModuleLoadDataEx},
		{[]string{"cuModuleGetFunction"}, &f.cuModuleGetFunction},
		{[]string{"cuModuleUnload"}, &f.cuModuleUnload},
		{[]string{"cuLaunchKernel"}, &f.cuLaunchKernel},
	}
}

// symbol is one function to look up: alternative names, best first, and
// where to store its address.
type symbol struct {
	names []string
	addr  *uintptr
}

// resolve looks every symbol up in the library handle with lookup, which
// returns an error when the library does not export the name.
func resolve(syms []symbol, lookup func(name string) (uintptr, error)) error {
	for _, s := range syms {
		var firstErr error
		for _, n := range s.names {
			p, err := lookup(n)
			if err == nil && p != 0 {
				*s.addr = p
				firstErr = nil
				break
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("symbol %s: %w", n, err)
			}
		}
		if *s.addr == 0 {
			return firstErr
		}
	}
	return nil
}

// Driver is the loaded CUDA driver library. It is safe for concurrent use:
// it holds only function addresses. It is never unloaded, because
// unloading libcuda while any thread still has a context is undefined.
type Driver struct {
	f driverFuncs
}

// Open loads libcuda.so.1 and initialises the driver (cuInit). Without an
// NVIDIA driver it returns an error wrapping ErrNoDriver that names the
// library; it never panics.
func Open() (*Driver, error) {
	return openDriver(DriverLibrary)
}

func openDriver(path string) (*Driver, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is absent or cannot be loaded: %v", ErrNoDriver, path, err)
	}
	d := &Driver{}
	if err := resolve(d.f.symbols(), func(n string) (uintptr, error) { return purego.Dlsym(h, n) }); err != nil {
		return nil, fmt.Errorf("%w: %s is not a usable CUDA driver: %w", ErrNoDriver, path, err)
	}
	if err := d.check("cuInit", call(d.f.cuInit, 0)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	return d, nil
}

// call invokes a C function and returns its int result (a CUresult or
// cublasStatus_t). Callers convert pointers to uintptr in the argument
// list itself: go:uintptrescapes then moves what they point to onto the
// heap and keeps it alive until the call returns, as for SyscallN.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int {
	r, _, _ := purego.SyscallN(fn, args...)
	return int(int32(uint32(r)))
}

// check turns a CUresult into an *Error naming the call, or nil.
func (d *Driver) check(name string, code int) error {
	if code == 0 {
		return nil
	}
	return &Error{Call: name, Code: code, Name: d.errorText(d.f.cuGetErrorName, code), Message: d.errorText(d.f.cuGetErrorString, code)}
}

// errorText asks the driver for the name or the text of code; an unknown
// code leaves the output unset and gives "".
func (d *Driver) errorText(fn uintptr, code int) string {
	if fn == 0 {
		return ""
	}
	var s *byte
	if call(fn, uintptr(code), uintptr(unsafe.Pointer(&s))) != 0 {
		return ""
	}
	return goString(s)
}

// goString copies a NUL-terminated C string that the driver owns.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// Version returns the CUDA version the driver supports, as 1000·major +
// 10·minor (13000 for CUDA 13.0).
func (d *Driver) Version() (int, error) {
	var v int32
	if err := d.check("cuDriverGetVersion", call(d.f.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount returns how many CUDA devices the driver sees.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	if err := d.check("cuDeviceGetCount", call(d.f.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return 0, err
	}
	return int(n), nil
}
