// Package nccl drives NVIDIA's collective communication library
// (libnccl.so.2) through purego: the binary needs neither cgo nor NCCL's
// headers to build, and a machine without NCCL gets ErrNoNCCL from Open,
// naming every file it tried, never a crash.
//
// The library is found without LD_LIBRARY_PATH by Candidates: the loader's
// own search, the usual system and CUDA folders, and the nvidia/nccl/lib
// folder of a PyTorch (pip) installation; GPUCHAOS_NCCL names one file
// and overrides them all.
//
// NCCL uses the CUDA runtime, which binds devices through their primary
// contexts: make a device's primary context current on the calling OS
// thread (cuda.Device.RetainPrimaryContext) before creating a
// communicator for it or issuing work to it, and keep one goroutine,
// locked to its thread, per communicator. Collectives are asynchronous:
// they return once enqueued on the stream.
//
// ncclCommInitRank takes its ncclUniqueId, a 128-byte struct, by value.
// On amd64 (System V) such a struct is of class MEMORY: the caller copies
// it into the outgoing argument area on the stack, and it takes no
// integer register, so the int after it travels in the third register.
// InitRank lays the call out exactly that way through purego.SyscallN
// (three register arguments, three unused ones, then the sixteen
// eight-byte words of the id as stack arguments); a test checks the
// layout against a real C function compiled with the system's compiler.
//
// Errors carry NCCL's own text for the code (ncclGetErrorString) and, when
// the library has one, its last error message (ncclGetLastError).
package nccl
