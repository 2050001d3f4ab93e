package cuda

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Context is a device's primary context, retained. Its methods act on the
// context that is current on the calling OS thread: call them only from
// the goroutine, locked to its thread, that called SetCurrent.
type Context struct {
	d   *Driver
	dev Device
	h   uintptr
}

// Device returns the device the context belongs to.
func (c *Context) Device() Device { return c.dev }

// SetCurrent binds the context to the calling OS thread.
func (c *Context) SetCurrent() error {
	return c.d.check("cuCtxSetCurrent", call(c.d.f.cuCtxSetCurrent, c.h))
}

// Release gives back the retained primary context. The driver destroys it
// (and frees everything allocated in it) when the last retain is released.
func (c *Context) Release() error {
	return c.d.check("cuDevicePrimaryCtxRelease", call(c.d.f.cuDevicePrimaryCtxRelease, uintptr(c.dev.handle)))
}

// Synchronize waits for all work in the context to finish.
func (c *Context) Synchronize() error {
	return c.d.check("cuCtxSynchronize", call(c.d.f.cuCtxSynchronize))
}

// MemInfo returns the free and total device memory in bytes.
func (c *Context) MemInfo() (free, total uint64, err error) {
	if err := c.d.check("cuMemGetInfo_v2", call(c.d.f.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total)))); err != nil {
		return 0, 0, err
	}
	return free, total, nil
}

// DevicePtr is an address in device memory.
type DevicePtr uintptr

// Alloc allocates bytes of device memory (cuMemAlloc: plain device
// memory, never managed memory).
func (c *Context) Alloc(bytes uint64) (DevicePtr, error) {
	var p DevicePtr
	if err := c.d.check("cuMemAlloc_v2", call(c.d.f.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes))); err != nil {
		return 0, fmt.Errorf("allocate %d bytes: %w", bytes, err)
	}
	return p, nil
}

// Free frees device memory from Alloc. Freeing 0 does nothing.
func (c *Context) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return c.d.check("cuMemFree_v2", call(c.d.f.cuMemFree, uintptr(p)))
}

// Memset sets n bytes at p to v, synchronously.
func (c *Context) Memset(p DevicePtr, v byte, n uint64) error {
	return c.d.check("cuMemsetD8_v2", call(c.d.f.cuMemsetD8, uintptr(p), uintptr(v), uintptr(n)))
}

// MemsetAsync sets n bytes at p to v, in stream order.
func (c *Context) MemsetAsync(p DevicePtr, v byte, n uint64, s Stream) error {
	return c.d.check("cuMemsetD8Async", call(c.d.f.cuMemsetD8Async, uintptr(p), uintptr(v), uintptr(n), s.h))
}

// CopyToDevice copies src into device memory at dst and waits for it.
func (c *Context) CopyToDevice(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return c.d.check("cuMemcpyHtoD_v2", call(c.d.f.cuMemcpyHtoD, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src))))
}

// CopyFromDevice copies len(dst) bytes from device memory at src and
// waits for it.
func (c *Context) CopyFromDevice(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return c.d.check("cuMemcpyDtoH_v2", call(c.d.f.cuMemcpyDtoH, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst))))
}

// HostBuffer is page-locked (pinned) host memory from HostAlloc: the copy
// engines reach it directly, so copies from it run at full PCIe speed and
// can be asynchronous. It lives outside the Go heap until Free.
type HostBuffer struct {
	p    unsafe.Pointer
	size uint64
}

// Bytes returns the buffer as a slice; it is valid until Free.
func (h HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(h.p), h.size) }

// Len returns the buffer's size in bytes.
func (h HostBuffer) Len() uint64 { return h.size }

// HostAlloc allocates bytes of pinned host memory (cuMemHostAlloc, no
// flags).
func (c *Context) HostAlloc(bytes uint64) (HostBuffer, error) {
	var p unsafe.Pointer
	if err := c.d.check("cuMemHostAlloc", call(c.d.f.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes), 0)); err != nil {
		return HostBuffer{}, fmt.Errorf("allocate %d pinned bytes: %w", bytes, err)
	}
	return HostBuffer{p: p, size: bytes}, nil
}

// FreeHost frees pinned memory from HostAlloc.
func (c *Context) FreeHost(h HostBuffer) error {
	if h.p == nil {
		return nil
	}
	return c.d.check("cuMemFreeHost", call(c.d.f.cuMemFreeHost, uintptr(h.p)))
}

// CopyToDeviceAsync copies n bytes from pinned memory into device memory,
// in stream order.
func (c *Context) CopyToDeviceAsync(dst DevicePtr, src HostBuffer, n uint64, s Stream) error {
	if n > src.size {
		return fmt.Errorf("copy %d bytes from a %d-byte host buffer", n, src.size)
	}
	return c.d.check("cuMemcpyHtoDAsync_v2", call(c.d.f.cuMemcpyHtoDAsync, uintptr(dst), uintptr(src.p), uintptr(n), s.h))
}

// CopyFromDeviceAsync copies n bytes from device memory into pinned
// memory, in stream order.
func (c *Context) CopyFromDeviceAsync(dst HostBuffer, src DevicePtr, n uint64, s Stream) error {
	if n > dst.size {
		return fmt.Errorf("copy %d bytes into a %d-byte host buffer", n, dst.size)
	}
	return c.d.check("cuMemcpyDtoHAsync_v2", call(c.d.f.cuMemcpyDtoHAsync, uintptr(dst.p), uintptr(src), uintptr(n), s.h))
}

// Stream is a CUDA stream: work issued to it runs in order.
type Stream struct {
	d *Driver
	h uintptr
}

// streamNonBlocking is CU_STREAM_NON_BLOCKING: the stream does not wait
// for the legacy default stream.
const streamNonBlocking = 1

// NewStream creates a stream that does not synchronise with the legacy
// default stream.
func (c *Context) NewStream() (Stream, error) {
	s := Stream{d: c.d}
	if err := c.d.check("cuStreamCreate", call(c.d.f.cuStreamCreate, uintptr(unsafe.Pointer(&s.h)), streamNonBlocking)); err != nil {
		return Stream{}, err
	}
	return s, nil
}

// Destroy destroys the stream once its work is done.
func (s Stream) Destroy() error {
	if s.h == 0 {
		return nil
	}
	return s.d.check("cuStreamDestroy", call(s.d.f.cuStreamDestroy, s.h))
}

// Synchronize waits for the stream's work to finish.
func (s Stream) Synchronize() error {
	return s.d.check("cuStreamSynchronize", call(s.d.f.cuStreamSynchronize, s.h))
}

// Event marks a point in a stream; two events give the GPU time between
// them.
type Event struct {
	d *Driver
	h uintptr
}

// eventBlockingSync is CU_EVENT_BLOCKING_SYNC: a thread waiting on the
// event sleeps instead of spinning, so a burn costs no CPU core per GPU.
const eventBlockingSync = 1

// NewEvent creates a timing event; waiting on it sleeps rather than spins.
func (c *Context) NewEvent() (Event, error) {
	e := Event{d: c.d}
	if err := c.d.check("cuEventCreate", call(c.d.f.cuEventCreate, uintptr(unsafe.Pointer(&e.h)), eventBlockingSync)); err != nil {
		return Event{}, err
	}
	return e, nil
}

// Record records the event in the stream.
func (e Event) Record(s Stream) error {
	return e.d.check("cuEventRecord", call(e.d.f.cuEventRecord, e.h, s.h))
}

// Synchronize waits until the work before the event's record is done.
func (e Event) Synchronize() error {
	return e.d.check("cuEventSynchronize", call(e.d.f.cuEventSynchronize, e.h))
}

// Destroy destroys the event.
func (e Event) Destroy() error {
	if e.h == 0 {
		return nil
	}
	return e.d.check("cuEventDestroy", call(e.d.f.cuEventDestroy, e.h))
}

// ElapsedMillis returns the GPU time from start to end in milliseconds
// (resolution about half a microsecond). Both must have completed.
func ElapsedMillis(start, end Event) (float32, error) {
	var ms float32
	if err := start.d.check("cuEventElapsedTime", call(start.d.f.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start.h, end.h)); err != nil {
		return 0, err
	}
	return ms, nil
}

// Module is loaded GPU code.
type Module struct {
	d *Driver
	h uintptr
}

// Function is a kernel in a loaded module.
type Function struct {
	d    *Driver
	h    uintptr
	Name string
}

// JIT options of cuModuleLoadDataEx.
const (
	jitErrorLogBuffer          = 5
	jitErrorLogBufferSizeBytes = 6
)

// LoadModule loads PTX text (or a cubin) into the context; the driver
// compiles PTX for the device. A compile failure includes the driver's
// error log.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	img := make([]byte, len(image)+1) // the driver reads PTX up to a NUL
	copy(img, image)
	log := make([]byte, 8192)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferSizeBytes}
	vals := []uintptr{uintptr(unsafe.Pointer(&log[0])), uintptr(len(log))}
	var pin runtime.Pinner
	pin.Pin(&log[0])
	pin.Pin(&img[0])
	defer pin.Unpin()
	m := &Module{d: c.d}
	code := call(c.d.f.cuModuleLoadDataEx, uintptr(unsafe.Pointer(&m.h)), uintptr(unsafe.Pointer(&img[0])),
		uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	if err := c.d.check("cuModuleLoadDataEx", code); err != nil {
		if msg := cString(log); msg != "" {
			return nil, fmt.Errorf("%w: %s", err, msg)
		}
		return nil, err
	}
	return m, nil
}

// Function looks a kernel up by its .entry name.
func (m *Module) Function(name string) (Function, error) {
	cname := append([]byte(name), 0)
	f := Function{d: m.d, Name: name}
	if err := m.d.check("cuModuleGetFunction", call(m.d.f.cuModuleGetFunction, uintptr(unsafe.Pointer(&f.h)), m.h, uintptr(unsafe.Pointer(&cname[0])))); err != nil {
		return Function{}, fmt.Errorf("kernel %s: %w", name, err)
	}
	return f, nil
}

// Unload unloads the module.
func (m *Module) Unload() error {
	return m.d.check("cuModuleUnload", call(m.d.f.cuModuleUnload, m.h))
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Launch starts f on the stream with the kernel parameters args, in the
// order of the kernel's .param list. Each argument must have the size of
// its parameter: DevicePtr, uint64, int64, float64 (8 bytes) or uint32,
// int32, float32 (4 bytes); any other type is an error, because a wrong
// size would hand the kernel garbage. The parameters are copied at launch,
// so args may change once Launch returns.
func (f Function) Launch(grid, block Dim3, sharedBytes uint32, s Stream, args ...any) error {
	slots, err := packParams(args)
	if err != nil {
		return fmt.Errorf("launch %s: %w", f.Name, err)
	}
	// The driver reads an array of pointers to the values: pin both so
	// the pointers it holds stay valid for the call.
	var pin runtime.Pinner
	defer pin.Unpin()
	var ptrs []unsafe.Pointer
	if len(slots) > 0 {
		pin.Pin(&slots[0])
		ptrs = make([]unsafe.Pointer, len(slots))
		for i := range slots {
			ptrs[i] = unsafe.Pointer(&slots[i])
		}
		pin.Pin(&ptrs[0])
	}
	var params uintptr
	if len(ptrs) > 0 {
		params = uintptr(unsafe.Pointer(&ptrs[0]))
	}
	code := call(f.d.f.cuLaunchKernel, f.h,
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(sharedBytes), s.h, params, 0)
	if err := f.d.check("cuLaunchKernel", code); err != nil {
		return fmt.Errorf("launch %s: %w", f.Name, err)
	}
	return nil
}

// packParams puts each argument in its own 8-byte slot, little-endian, so
// a 4-byte parameter reads its value from the slot's first four bytes.
func packParams(args []any) ([]uint64, error) {
	slots := make([]uint64, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case DevicePtr:
			slots[i] = uint64(v)
		case uint64:
			slots[i] = v
		case int64:
			slots[i] = uint64(v)
		case float64:
			slots[i] = math.Float64bits(v)
		case uint32:
			slots[i] = uint64(v)
		case int32:
			slots[i] = uint64(uint32(v))
		case float32:
			slots[i] = uint64(math.Float32bits(v))
		default:
			return nil, fmt.Errorf("argument %d: type %T has no fixed kernel parameter size", i, a)
		}
	}
	return slots, nil
}
