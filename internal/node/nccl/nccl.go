package nccl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
)

// EnvLibrary names the environment variable that, when set, is the only
// NCCL library file Candidates returns.
const EnvLibrary = "GPUCHAOS_NCCL"

// Soname is the file name NCCL 2 is loaded by.
const Soname = "libnccl.so.2"

// ErrNoNCCL means no loadable NCCL library was found.
var ErrNoNCCL = errors.New("no NCCL library found")

// Result is an ncclResult_t.
type Result int

// Codes of ncclResult_t (nccl.h).
const (
	Success            Result = 0
	UnhandledCUDAError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
	Timeout            Result = 8
)

// Error is a failed NCCL call.
type Error struct {
	// Call is the NCCL function that failed, e.g. "ncclAllReduce".
	Call string
	// Code is the ncclResult_t it returned.
	Code Result
	// Message is ncclGetErrorString's text for Code.
	Message string
	// Detail is ncclGetLastError's message, which usually says what went
	// wrong (the transport, the peer); empty when NCCL has none.
	Detail string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: NCCL error %d", e.Call, e.Code)
	if e.Message != "" {
		s = fmt.Sprintf("%s: %s (NCCL error %d)", e.Call, e.Message, e.Code)
	}
	if e.Detail != "" {
		s += ": " + strings.TrimSpace(e.Detail)
	}
	return s
}

// IsCode reports whether err is (or wraps) an *Error with the code.
func IsCode(err error, code Result) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// DataType is an ncclDataType_t.
type DataType int

// Element types (nccl.h).
const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	Bfloat16 DataType = 9
)

// Size returns the size of one element in bytes, or 0 for an unknown
// type.
func (t DataType) Size() uint64 {
	switch t {
	case Int8, Uint8:
		return 1
	case Float16, Bfloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// RedOp is an ncclRedOp_t, a built-in reduction.
type RedOp int

// Reductions (nccl.h).
const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4
)

// UniqueIDBytes is NCCL_UNIQUE_ID_BYTES, the size of an ncclUniqueId.
const UniqueIDBytes = 128

// UniqueID is an ncclUniqueId: one rank draws it (GetUniqueID) and every
// rank passes the same bytes to InitRank. It carries the drawing rank's
// bootstrap address, so it is only meaningful while that process lives.
type UniqueID [UniqueIDBytes]byte

// funcs holds the addresses of the NCCL functions used.
type funcs struct {
	getVersion, getUniqueID, commInitRank, commInitAll       uintptr
	commDestroy, commAbort, commGetAsyncError                uintptr
	getErrorString, getLastError                             uintptr
	allReduce, allGather, reduceScatter, broadcast           uintptr
	send, recv, groupStart, groupEnd, commCount, commUserRnk uintptr
}

// symbols lists every function with the field its address goes to.
func (f *funcs) symbols() []struct {
	name string
	addr *uintptr
} {
	return []struct {
		name string
		addr *uintptr
	}{
		{"ncclGetVersion", &f.getVersion},
		{"ncclGetUniqueId", &f.getUniqueID},
		{"ncclCommInitRank", &f.commInitRank},
		{"ncclCommInitAll", &f.commInitAll},
		{"ncclCommDestroy", &f.commDestroy},
		{"ncclCommAbort", &f.commAbort},
		{"ncclCommGetAsyncError", &f.commGetAsyncError},
		{"ncclGetErrorString", &f.getErrorString},
		{"ncclGetLastError", &f.getLastError},
		{"ncclAllReduce", &f.allReduce},
		{"ncclAllGather", &f.allGather},
		{"ncclReduceScatter", &f.reduceScatter},
		{"ncclBroadcast", &f.broadcast},
		{"ncclSend", &f.send},
		{"ncclRecv", &f.recv},
		{"ncclGroupStart", &f.groupStart},
		{"ncclGroupEnd", &f.groupEnd},
		{"ncclCommCount", &f.commCount},
		{"ncclCommUserRank", &f.commUserRnk},
	}
}

// Library is a loaded NCCL. It holds only function addresses, so it is
// safe for concurrent use; it is never unloaded, because NCCL keeps
// threads and CUDA resources alive past the last communicator.
type Library struct {
	f funcs
	// Path is the candidate that was loaded.
	Path string
}

// Candidates lists the files Open tries, best first. With GPUCHAOS_NCCL
// set, it is the only candidate. Otherwise: libnccl.so.2 through the
// dynamic loader's own search (LD_LIBRARY_PATH, the ld.so cache); the same
// name in each LD_LIBRARY_PATH folder, CUDA_HOME and CUDA_PATH, the usual
// system and CUDA folders; then the nvidia/nccl/lib folder of every
// Python site-packages that glob finds under VIRTUAL_ENV, CONDA_PREFIX,
// /opt/*/.venv, /opt/conda, /usr/local, /usr and ~/.local, which is where
// PyTorch's pip wheels put their NCCL. getenv reads the environment and
// glob expands a pattern (filepath.Glob); both are parameters so that
// tests can fake them.
func Candidates(getenv func(string) string, glob func(string) ([]string, error)) []string {
	if p := getenv(EnvLibrary); p != "" {
		return []string{p}
	}
	out := []string{Soname}
	seen := map[string]bool{Soname: true}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	dirs := append(cuda.LibraryDirs(getenv), "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/lib",
		"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/nccl/lib", "/opt/nccl/lib")
	for _, d := range dirs {
		add(filepath.Join(d, Soname))
	}
	var roots []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if r := getenv(v); r != "" {
			roots = append(roots, r)
		}
	}
	roots = append(roots, "/opt/*/.venv", "/opt/conda", "/usr/local", "/usr")
	if h := getenv("HOME"); h != "" {
		roots = append(roots, filepath.Join(h, ".local"))
	}
	for _, r := range roots {
		for _, sp := range []string{"site-packages", "dist-packages"} {
			matches, err := glob(filepath.Join(r, "lib", "python3*", sp, "nvidia", "nccl", "lib", Soname))
			if err != nil {
				continue
			}
			for _, m := range matches {
				add(m)
			}
		}
	}
	return out
}

// Open loads the first candidate (see Candidates) that loads and exports
// every function used. The error wraps ErrNoNCCL and names every file
// tried with the first reason it failed.
func Open(candidates []string) (*Library, error) {
	var reasons []string
	for _, p := range candidates {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			reasons = append(reasons, p)
			continue
		}
		l := &Library{Path: p}
		var missing string
		for _, s := range l.f.symbols() {
			a, err := purego.Dlsym(h, s.name)
			if err != nil || a == 0 {
				missing = s.name
				break
			}
			*s.addr = a
		}
		if missing != "" {
			reasons = append(reasons, fmt.Sprintf("%s (no symbol %s)", p, missing))
			continue
		}
		return l, nil
	}
	if len(candidates) == 0 {
		return nil, fmt.Errorf("%w: no candidate files (set %s to the path of %s)", ErrNoNCCL, EnvLibrary, Soname)
	}
	return nil, fmt.Errorf("%w: tried %s (set %s to the path of %s)", ErrNoNCCL, strings.Join(reasons, ", "), EnvLibrary, Soname)
}

// call invokes a C function and returns its int result. Pointers are
// converted to uintptr in the argument list itself, so go:uintptrescapes
// keeps what they point to alive and in place for the call.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) Result {
	r, _, _ := purego.SyscallN(fn, args...)
	return Result(int32(uint32(r)))
}

// check turns a result into an *Error naming the call, or nil. comm may be
// 0: ncclGetLastError then reports the thread's last error.
func (l *Library) check(name string, code Result, comm uintptr) error {
	if code == Success {
		return nil
	}
	e := &Error{Call: name, Code: code, Message: l.errorString(code)}
	r, _, _ := purego.SyscallN(l.f.getLastError, comm)
	e.Detail = cString(r)
	return e
}

// errorString is ncclGetErrorString's text for code.
func (l *Library) errorString(code Result) string {
	r, _, _ := purego.SyscallN(l.f.getErrorString, uintptr(code))
	return cString(r)
}

// cString copies a NUL-terminated string that NCCL owns (at most 4 KiB
// of it). The address comes back from C as an integer; reading it as a
// pointer through memory, rather than converting it, keeps vet quiet about
// a conversion that is sound here because the memory is C's, not Go's.
func cString(addr uintptr) string {
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	if p == nil {
		return ""
	}
	var b []byte
	for i := 0; i < 4096; i++ {
		c := *(*byte)(unsafe.Add(p, i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// DisableNVLS sets NCCL_NVLS_ENABLE=0 in this process's environment, where
// NCCL reads it when the first communicator is created, so NCCL never
// uses NVLink SHARP (NVLS) and its multicast objects: on a shared host a
// program that uses them can put every GPU out of service. Go passes the
// change on to the C environment (natively with cgo, through purego's
// fake cgo without), so call it before the first InitRank or InitAll.
func DisableNVLS() error {
	if err := os.Setenv("NCCL_NVLS_ENABLE", "0"); err != nil {
		return fmt.Errorf("disable NCCL NVLS: %w", err)
	}
	return nil
}

// Version returns NCCL's version code (ncclGetVersion): 10000·major +
// 100·minor + patch since 2.9, e.g. 22803 for 2.28.3.
func (l *Library) Version() (int, error) {
	var v int32
	if err := l.check("ncclGetVersion", call(l.f.getVersion, uintptr(unsafe.Pointer(&v))), 0); err != nil {
		return 0, err
	}
	return int(v), nil
}

// VersionString formats a version code from Version as major.minor.patch.
func VersionString(code int) string {
	if code < 10000 { // NCCL up to 2.8: 1000·major + 100·minor + patch
		return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
}

// GetUniqueID draws a new communicator id (ncclGetUniqueId). It starts
// NCCL's bootstrap listener in this process.
func (l *Library) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := l.check("ncclGetUniqueId", call(l.f.getUniqueID, uintptr(unsafe.Pointer(&id[0]))), 0); err != nil {
		return UniqueID{}, err
	}
	return id, nil
}

// Comm is an NCCL communicator: one rank of a clique. Its methods issue
// work for its device, so call them on the thread where that device's
// primary context is current. Abort and AsyncError may be called from
// any thread, also while another thread is inside a call on the same
// communicator (that is how a call stuck on a vanished peer is freed);
// nothing else may.
type Comm struct {
	l *Library
	// h is the ncclComm_t, 0 once destroyed or aborted. It is atomic
	// because Abort may run on another thread while a call is in flight.
	h atomic.Uintptr
}

// idWords returns the id as the sixteen eight-byte words it occupies on
// the stack when passed by value.
func idWords(id *UniqueID) [UniqueIDBytes / 8]uintptr {
	var w [UniqueIDBytes / 8]uintptr
	for i := range w {
		w[i] = *(*uintptr)(unsafe.Pointer(&id[i*8]))
	}
	return w
}

// callIntIntStructInt calls a C function of the shape
// f(void *p, int a, struct{char[128]} id, int b) under the System V amd64
// ABI: p, a and b go in the first three integer registers (the struct is
// of class MEMORY and takes none), the next three registers are unused,
// and the struct's sixteen words are the first stack arguments, in
// order. purego's trampoline stores arguments 7 to 32 at the bottom of the
// outgoing stack area, which is where the callee reads its stack
// arguments. ncclCommInitRank has this shape.
//
//go:uintptrescapes
func callIntIntStructInt(fn uintptr, p uintptr, a int, id *UniqueID, b int) Result {
	if runtime.GOARCH != "amd64" {
		// arm64 passes a struct over 16 bytes by reference, not by copy:
		// this layout would be wrong there.
		panic("nccl: passing ncclUniqueId by value is implemented for amd64 only")
	}
	w := idWords(id)
	r, _, _ := purego.SyscallN(fn, p, uintptr(a), uintptr(b), 0, 0, 0,
		w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7],
		w[8], w[9], w[10], w[11], w[12], w[13], w[14], w[15])
	return Result(int32(uint32(r)))
}

// InitRank creates this rank's communicator of a clique of nranks
// (ncclCommInitRank). It blocks until every rank has called it with the
// same id, so the ranks must call it from different threads or
// processes. The device is the one whose primary context is current on
// the calling thread.
func (l *Library) InitRank(nranks int, id UniqueID, rank int) (*Comm, error) {
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("ncclCommInitRank: rank %d of %d is out of range", rank, nranks)
	}
	var h uintptr
	code := callIntIntStructInt(l.f.commInitRank, uintptr(unsafe.Pointer(&h)), nranks, &id, rank)
	if err := l.check("ncclCommInitRank", code, 0); err != nil {
		return nil, fmt.Errorf("rank %d of %d: %w", rank, nranks, err)
	}
	c := &Comm{l: l}
	c.h.Store(h)
	return c, nil
}

// InitAll creates one communicator per CUDA device ordinal in devices, in
// one call from one thread (ncclCommInitAll); communicator i is rank i
// and drives devices[i].
func (l *Library) InitAll(devices []int) ([]*Comm, error) {
	if len(devices) == 0 {
		return nil, errors.New("ncclCommInitAll: no devices")
	}
	hs := make([]uintptr, len(devices))
	devs := make([]int32, len(devices))
	for i, d := range devices {
		devs[i] = int32(d)
	}
	code := call(l.f.commInitAll, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(devices)), uintptr(unsafe.Pointer(&devs[0])))
	if err := l.check("ncclCommInitAll", code, 0); err != nil {
		return nil, err
	}
	out := make([]*Comm, len(hs))
	for i, h := range hs {
		out[i] = &Comm{l: l}
		out[i].h.Store(h)
	}
	return out, nil
}

// Destroy frees the communicator once its queued work is done
// (ncclCommDestroy). Destroying nil or a destroyed communicator does
// nothing.
func (c *Comm) Destroy() error {
	if c == nil {
		return nil
	}
	h := c.h.Swap(0)
	if h == 0 {
		return nil
	}
	return c.l.check("ncclCommDestroy", call(c.l.f.commDestroy, h), 0)
}

// Abort stops the communicator's operations on the device and frees it
// (ncclCommAbort): the way out when a peer is gone or a call failed.
// It may run while another thread is inside a call on the communicator;
// calls that start afterwards fail with ErrAborted without reaching NCCL.
// Aborting twice, or after Destroy, does nothing.
func (c *Comm) Abort() error {
	if c == nil {
		return nil
	}
	h := c.h.Swap(0)
	if h == 0 {
		return nil
	}
	return c.l.check("ncclCommAbort", call(c.l.f.commAbort, h), 0)
}

// ErrAborted is returned by calls on a communicator after Abort or
// Destroy.
var ErrAborted = errors.New("the NCCL communicator was aborted or destroyed")

// handle returns the live ncclComm_t or ErrAborted.
func (c *Comm) handle() (uintptr, error) {
	if h := c.h.Load(); h != 0 {
		return h, nil
	}
	return 0, ErrAborted
}

// AsyncError returns the error NCCL found while running queued work (a
// peer that vanished, a network failure), or nil
// (ncclCommGetAsyncError). InProgress is not an error.
func (c *Comm) AsyncError() error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	var r int32
	if err := c.l.check("ncclCommGetAsyncError", call(c.l.f.commGetAsyncError, h, uintptr(unsafe.Pointer(&r))), h); err != nil {
		return err
	}
	if code := Result(r); code != Success && code != InProgress {
		return c.l.check("asynchronous operation", code, h)
	}
	return nil
}

// Count returns the number of ranks in the communicator's clique.
func (c *Comm) Count() (int, error) {
	h, err := c.handle()
	if err != nil {
		return 0, err
	}
	var n int32
	if err := c.l.check("ncclCommCount", call(c.l.f.commCount, h, uintptr(unsafe.Pointer(&n))), h); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Rank returns the communicator's rank in its clique.
func (c *Comm) Rank() (int, error) {
	h, err := c.handle()
	if err != nil {
		return 0, err
	}
	var n int32
	if err := c.l.check("ncclCommUserRank", call(c.l.f.commUserRnk, h, uintptr(unsafe.Pointer(&n))), h); err != nil {
		return 0, err
	}
	return int(n), nil
}

// AllReduce reduces count elements of send over all ranks into recv on
// every rank, in stream order (ncclAllReduce). send and recv are device
// addresses; stream is a CUstream of the communicator's device.
func (c *Comm) AllReduce(send, recv uintptr, count uint64, t DataType, op RedOp, stream uintptr) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	return c.l.check("ncclAllReduce", call(c.l.f.allReduce, send, recv, uintptr(count), uintptr(t), uintptr(op), h, stream), h)
}

// AllGather gathers sendCount elements from every rank into recv, rank
// i's at element i·sendCount (ncclAllGather).
func (c *Comm) AllGather(send, recv uintptr, sendCount uint64, t DataType, stream uintptr) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	return c.l.check("ncclAllGather", call(c.l.f.allGather, send, recv, uintptr(sendCount), uintptr(t), h, stream), h)
}

// ReduceScatter reduces nranks·recvCount elements of send over all ranks
// and leaves block i of the result in rank i's recv
// (ncclReduceScatter).
func (c *Comm) ReduceScatter(send, recv uintptr, recvCount uint64, t DataType, op RedOp, stream uintptr) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	return c.l.check("ncclReduceScatter", call(c.l.f.reduceScatter, send, recv, uintptr(recvCount), uintptr(t), uintptr(op), h, stream), h)
}

// Broadcast copies count elements of root's send into every rank's recv
// (ncclBroadcast).
func (c *Comm) Broadcast(send, recv uintptr, count uint64, t DataType, root int, stream uintptr) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	return c.l.check("ncclBroadcast", call(c.l.f.broadcast, send, recv, uintptr(count), uintptr(t), uintptr(root), h, stream), h)
}

// Send sends count elements to rank peer (ncclSend); the peer must post a
// matching Recv. Pair them inside GroupStart/GroupEnd when a rank both
// sends and receives, or the two sides can wait on each other.
func (c *Comm) Send(send uintptr, count uint64, t DataType, peer int, stream uintptr) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	return c.l.check("ncclSend", call(c.l.f.send, send, uintptr(count), uintptr(t), uintptr(peer), h, stream), h)
}

// Recv receives count elements from rank peer into recv (ncclRecv).
func (c *Comm) Recv(recv uintptr, count uint64, t DataType, peer int, stream uintptr) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	return c.l.check("ncclRecv", call(c.l.f.recv, recv, uintptr(count), uintptr(t), uintptr(peer), h, stream), h)
}

// GroupStart opens a group (ncclGroupStart): the calls up to GroupEnd on
// this thread are issued together.
func (l *Library) GroupStart() error {
	return l.check("ncclGroupStart", call(l.f.groupStart), 0)
}

// GroupEnd closes a group and issues its calls (ncclGroupEnd).
func (l *Library) GroupEnd() error {
	return l.check("ncclGroupEnd", call(l.f.groupEnd), 0)
}
