//go:build !cgo

package gpu

import "fmt"

// OpenNVML fails in a binary built without cgo: go-nvml needs it to call
// libnvidia-ml. The error wraps ErrUnavailable, as on a machine without
// the driver.
func OpenNVML() (Source, error) {
	return nil, fmt.Errorf("%w: this gpuchaos was built without cgo, which NVML needs", ErrUnavailable)
}
