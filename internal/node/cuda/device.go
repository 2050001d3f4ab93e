package cuda

import (
	"bytes"
	"fmt"
	"unsafe"
)

// Attribute is a CUdevice_attribute.
type Attribute int

// Device attributes that gpuchaos reads.
const (
	AttrMaxThreadsPerBlock     Attribute = 1
	AttrMultiprocessorCount    Attribute = 16
	AttrPCIBusID               Attribute = 33
	AttrPCIDeviceID            Attribute = 34
	AttrPCIDomainID            Attribute = 50
	AttrComputeCapabilityMajor Attribute = 75
	AttrComputeCapabilityMinor Attribute = 76
)

// Device is one CUDA device, by its CUDA ordinal. CUDA orders devices
// fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, and honours
// CUDA_VISIBLE_DEVICES, so the ordinal need not match nvidia-smi's index:
// match devices by PCIBusID.
type Device struct {
	d       *Driver
	handle  int32
	Ordinal int
}

// Device returns the device with the CUDA ordinal.
func (d *Driver) Device(ordinal int) (Device, error) {
	var h int32
	if err := d.check("cuDeviceGet", call(d.f.cuDeviceGet, uintptr(unsafe.Pointer(&h)), uintptr(ordinal))); err != nil {
		return Device{}, fmt.Errorf("device %d: %w", ordinal, err)
	}
	return Device{d: d, handle: h, Ordinal: ordinal}, nil
}

// Name returns the product name, e.g. "NVIDIA H200".
func (dev Device) Name() (string, error) {
	buf := make([]byte, 256)
	if err := dev.d.check("cuDeviceGetName", call(dev.d.f.cuDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(dev.handle))); err != nil {
		return "", err
	}
	return cString(buf), nil
}

// PCIBusID returns the bus id as the driver writes it,
// domain:bus:device.function with a four-digit domain (0000:18:00.0).
func (dev Device) PCIBusID() (string, error) {
	buf := make([]byte, 32)
	if err := dev.d.check("cuDeviceGetPCIBusId", call(dev.d.f.cuDeviceGetPCIBusId, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(dev.handle))); err != nil {
		return "", err
	}
	return cString(buf), nil
}

// Attribute reads one device attribute.
func (dev Device) Attribute(a Attribute) (int, error) {
	var v int32
	if err := dev.d.check("cuDeviceGetAttribute", call(dev.d.f.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(dev.handle))); err != nil {
		return 0, fmt.Errorf("attribute %d: %w", a, err)
	}
	return int(v), nil
}

// ComputeCapability returns the major and minor compute capability (9, 0
// on Hopper).
func (dev Device) ComputeCapability() (major, minor int, err error) {
	if major, err = dev.Attribute(AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = dev.Attribute(AttrComputeCapabilityMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// TotalMemory returns the device memory size in bytes.
func (dev Device) TotalMemory() (uint64, error) {
	var n uint64
	if err := dev.d.check("cuDeviceTotalMem_v2", call(dev.d.f.cuDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(dev.handle))); err != nil {
		return 0, err
	}
	return n, nil
}

// RetainPrimaryContext retains the device's primary context (the one the
// CUDA runtime and frameworks share) and makes it current on the calling
// thread. The caller must have locked its goroutine to the thread and must
// call Release when done.
func (dev Device) RetainPrimaryContext() (*Context, error) {
	var h uintptr
	if err := dev.d.check("cuDevicePrimaryCtxRetain", call(dev.d.f.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&h)), uintptr(dev.handle))); err != nil {
		return nil, fmt.Errorf("device %d: %w", dev.Ordinal, err)
	}
	c := &Context{d: dev.d, dev: dev, h: h}
	if err := c.SetCurrent(); err != nil {
		_ = c.Release()
		return nil, err
	}
	return c, nil
}

// cString returns the text of buf up to its first NUL.
func cString(buf []byte) string {
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf)
}
