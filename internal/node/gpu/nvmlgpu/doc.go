// Package nvmlgpu is gpu.Source over NVML, through go-nvml and cgo: the
// one package that links the NVIDIA management library, so that what
// reads GPUs through gpu.Source (the twin's GPUs among them) does not.
// In a binary built without cgo, Open fails with gpu.ErrUnavailable; in
// one built with the nvmlmock tag (measurements only), Open opens eight
// mock H200s instead of the library (open_nvmlmock.go says why).
package nvmlgpu
