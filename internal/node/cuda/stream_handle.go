package cuda

// Handle returns the stream's raw CUstream. Libraries that take a
// cudaStream_t from the same context (NCCL, for one) need it: the runtime
// and the driver share stream handles. The stream stays owned by its
// creator; the handle is valid until Destroy.
func (s Stream) Handle() uintptr { return s.h }
