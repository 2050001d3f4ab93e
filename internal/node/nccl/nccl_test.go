package nccl

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// fake is the stand-in library built from testdata/fakenccl.c, once per
// test binary.
type fake struct {
	path string
	lib  *Library
	// hooks in the stand-in that are not part of NCCL
	lastArgs, commID, envNVLS uintptr
}

var (
	fakeOnce sync.Once
	fakeLib  *fake
	fakeErr  error
)

// loadFake compiles the stand-in NCCL with the system's C compiler and
// opens it through Open. Without a compiler the test is skipped: the
// point is to check the call layout against a real C ABI, which needs
// real compiled code.
func loadFake(t *testing.T) *fake {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the by-value id layout is implemented for linux/amd64")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build the stand-in libnccl")
	}
	fakeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fakenccl")
		if err != nil {
			fakeErr = err
			return
		}
		so := filepath.Join(dir, "libfakenccl.so")
		out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", so, "testdata/fakenccl.c").CombinedOutput()
		if err != nil {
			fakeErr = errors.New("cc: " + err.Error() + ": " + string(out))
			return
		}
		f := &fake{path: so}
		if f.lib, fakeErr = Open([]string{"/nonexistent/libnccl.so.2", so}); fakeErr != nil {
			return
		}
		h, err := purego.Dlopen(so, purego.RTLD_NOW)
		if err != nil {
			fakeErr = err
			return
		}
		for name, p := range map[string]*uintptr{"fakeLastArgs": &f.lastArgs, "fakeCommID": &f.commID, "fakeEnvNVLS": &f.envNVLS} {
			if *p, fakeErr = purego.Dlsym(h, name); fakeErr != nil {
				return
			}
		}
		fakeLib = f
	})
	if fakeErr != nil {
		t.Fatalf("stand-in libnccl: %v", fakeErr)
	}
	return fakeLib
}

func (f *fake) args(c *Comm) [8]uint64 {
	var out [8]uint64
	purego.SyscallN(f.lastArgs, c.h.Load(), uintptr(unsafe.Pointer(&out[0])))
	return out
}

func (f *fake) id(c *Comm) UniqueID {
	var out UniqueID
	purego.SyscallN(f.commID, c.h.Load(), uintptr(unsafe.Pointer(&out[0])))
	return out
}

// TestUniqueIDByValue is the ABI check: the 128-byte id travels by value
// through InitRank into a real compiled C function, with the int on
// either side of it, and must arrive byte for byte.
func TestUniqueIDByValue(t *testing.T) {
	f := loadFake(t)
	tests := []struct {
		name         string
		nranks, rank int
		fill         func(i int) byte
	}{
		{"library's own id", 4, 3, nil},
		{"every byte distinct", 2, 1, func(i int) byte { return byte(255 - i) }},
		{"high bits set", 8, 0, func(i int) byte { return 0x80 | byte(i) }},
		{"zeros with a last byte", 1, 0, func(i int) byte { return map[bool]byte{true: 0xAB}[i == 127] }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := f.lib.GetUniqueID()
			if err != nil {
				t.Fatal(err)
			}
			if tc.fill != nil {
				for i := range id {
					id[i] = tc.fill(i)
				}
			} else if id[1] != 8 || id[127] != byte((127*7+1)%256) {
				t.Fatalf("GetUniqueID wrote % x; want byte i = 7i+1", id[:4])
			}
			c, err := f.lib.InitRank(tc.nranks, id, tc.rank)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Destroy() }()
			if got := f.id(c); got != id {
				t.Errorf("the C side received id % x…; want % x…", got[:16], id[:16])
			}
			if n, _ := c.Count(); n != tc.nranks {
				t.Errorf("nranks arrived as %d; want %d", n, tc.nranks)
			}
			if r, _ := c.Rank(); r != tc.rank {
				t.Errorf("rank arrived as %d; want %d (the int after the struct must go in the third register)", r, tc.rank)
			}
		})
	}
}

// TestCollectiveArguments checks each binding's argument order against
// the C signatures in nccl.h, which the stand-in copies.
func TestCollectiveArguments(t *testing.T) {
	f := loadFake(t)
	c, err := f.lib.InitRank(2, UniqueID{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Destroy() }()
	const send, recv, stream = 0x1000, 0x2000, 0x3000
	tests := []struct {
		name string
		call func() error
		want [8]uint64
	}{
		{"all-reduce", func() error { return c.AllReduce(send, recv, 12345, Bfloat16, Sum, stream) },
			[8]uint64{send, recv, 12345, uint64(Bfloat16), uint64(Sum), stream}},
		{"all-gather", func() error { return c.AllGather(send, recv, 77, Float16, stream) },
			[8]uint64{send, recv, 77, uint64(Float16), 0, stream}},
		{"reduce-scatter", func() error { return c.ReduceScatter(send, recv, 1<<40, Float32, Max, stream) },
			[8]uint64{send, recv, 1 << 40, uint64(Float32), uint64(Max), stream}},
		{"broadcast", func() error { return c.Broadcast(send, recv, 9, Bfloat16, 1, stream) },
			[8]uint64{send, recv, 9, uint64(Bfloat16), 1, stream}},
		{"send", func() error { return c.Send(send, 5, Float32, 0, stream) },
			[8]uint64{send, 0, 5, uint64(Float32), 0, stream}},
		{"recv", func() error { return c.Recv(recv, 6, Float16, 1, stream) },
			[8]uint64{0, recv, 6, uint64(Float16), 1, stream}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err != nil {
				t.Fatal(err)
			}
			if got := f.args(c); got != tc.want {
				t.Errorf("C received %#x; want %#x", got, tc.want)
			}
		})
	}
}

func TestInitAll(t *testing.T) {
	f := loadFake(t)
	comms, err := f.lib.InitAll([]int{3, 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range comms {
		if r, _ := c.Rank(); r != i {
			t.Errorf("communicator %d has rank %d", i, r)
		}
		if dev := f.args(c)[0]; dev != []uint64{3, 1}[i] {
			t.Errorf("communicator %d got device %d", i, dev)
		}
		if err := c.Abort(); err != nil {
			t.Error(err)
		}
		if err := c.Abort(); err != nil { // a second abort does nothing
			t.Error(err)
		}
	}
	if _, err := f.lib.InitAll(nil); err == nil {
		t.Error("InitAll(nil) succeeded")
	}
}

func TestErrors(t *testing.T) {
	f := loadFake(t)
	if v, err := f.lib.Version(); err != nil || v != 22803 || VersionString(v) != "2.28.3" {
		t.Errorf("Version = %d (%s), %v; want 22803 (2.28.3)", v, VersionString(v), err)
	}
	// A group closed without being opened: the stand-in fails as NCCL
	// does, with its code, its text and a last-error message.
	err := f.lib.GroupEnd()
	var e *Error
	if !errors.As(err, &e) || e.Code != InvalidUsage || !IsCode(err, InvalidUsage) {
		t.Fatalf("GroupEnd error = %v; want an *Error with InvalidUsage", err)
	}
	for _, want := range []string{"ncclGroupEnd", "invalid usage", "NCCL error 5", "without ncclGroupStart"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := f.lib.GroupStart(); err != nil {
		t.Fatal(err)
	}
	if err := f.lib.GroupEnd(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lib.InitRank(2, UniqueID{}, 2); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("InitRank(rank 2 of 2) error = %v; want out of range", err)
	}
	// The stand-in plays a remote error on a clique of 99.
	c, err := f.lib.InitRank(99, UniqueID{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Abort() }()
	if err := c.AsyncError(); !IsCode(err, RemoteError) || !strings.Contains(err.Error(), "peer vanished") {
		t.Errorf("AsyncError = %v; want RemoteError with the last-error text", err)
	}
	ok, err := f.lib.InitRank(2, UniqueID{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.AsyncError(); err != nil {
		t.Errorf("AsyncError on a healthy communicator = %v", err)
	}
	if err := ok.Destroy(); err != nil || ok.Destroy() != nil {
		t.Errorf("Destroy twice: %v", err)
	}
}

// TestDisableNVLS checks that the setting reaches the C environment that
// NCCL reads, not only Go's copy of it. It changes the process
// environment, so it is not parallel.
func TestDisableNVLS(t *testing.T) {
	f := loadFake(t)
	t.Setenv("NCCL_NVLS_ENABLE", "1")
	if err := DisableNVLS(); err != nil {
		t.Fatal(err)
	}
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	if err != nil {
		t.Skip("no libc.so.6")
	}
	getenv, err := purego.Dlsym(libc, "getenv")
	if err != nil {
		t.Fatal(err)
	}
	name := []byte("NCCL_NVLS_ENABLE\x00")
	r, _, _ := purego.SyscallN(getenv, uintptr(unsafe.Pointer(&name[0])))
	if got := cString(r); got != "0" {
		t.Fatalf("C getenv(NCCL_NVLS_ENABLE) = %q after DisableNVLS; want 0", got)
	}
	// The stand-in reads it at its first InitRank, as NCCL does.
	c, err := f.lib.InitRank(1, UniqueID{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Destroy()
	if v, _, _ := purego.SyscallN(f.envNVLS); int32(v) == 1 {
		t.Errorf("the C library read NCCL_NVLS_ENABLE=1")
	}
}

func TestOpenFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		candidates []string
		contains   []string
	}{
		{"nothing to try", nil, []string{"no candidate files", EnvLibrary}},
		{"absent files named", []string{"/nonexistent/a/libnccl.so.2", "/nonexistent/b/libnccl.so.2"},
			[]string{"/nonexistent/a/libnccl.so.2", "/nonexistent/b/libnccl.so.2", EnvLibrary}},
		{"a library that is not NCCL", []string{"libc.so.6"}, []string{"libc.so.6 (no symbol ncclGetVersion)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, err := Open(tc.candidates)
			if err == nil || l != nil || !errors.Is(err, ErrNoNCCL) {
				t.Fatalf("Open = %v, %v; want ErrNoNCCL", l, err)
			}
			for _, c := range tc.contains {
				if !strings.Contains(err.Error(), c) {
					t.Errorf("error %q lacks %q", err, c)
				}
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	t.Parallel()
	site := "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
	tests := []struct {
		name    string
		env     map[string]string
		files   []string // what glob finds
		want    []string // exactly, when set
		first   string
		has     []string
		hasNot  []string
		orderOf [2]string // the first must come before the second
	}{
		{name: "override wins alone", env: map[string]string{EnvLibrary: "/x/libnccl.so.2", "LD_LIBRARY_PATH": "/y"},
			files: []string{site}, want: []string{"/x/libnccl.so.2"}},
		{name: "loader first, then system folders", first: Soname,
			has:     []string{"/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"},
			orderOf: [2]string{"/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"}},
		{name: "LD_LIBRARY_PATH and CUDA_HOME folders, empty entries skipped",
			env: map[string]string{"LD_LIBRARY_PATH": "/a::/b", "CUDA_HOME": "/cuda"},
			has: []string{"/a/libnccl.so.2", "/b/libnccl.so.2", "/cuda/lib64/libnccl.so.2"}, hasNot: []string{"/libnccl.so.2"},
			orderOf: [2]string{"/b/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"}},
		{name: "PyTorch wheel found by glob, after the system folders", files: []string{site},
			has: []string{site}, orderOf: [2]string{"/usr/local/cuda/lib64/libnccl.so.2", site}},
		{name: "virtualenv and home", env: map[string]string{"VIRTUAL_ENV": "/venv", "HOME": "/home/u"},
			files: []string{"/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
				"/home/u/.local/lib/python3.10/site-packages/nvidia/nccl/lib/libnccl.so.2"},
			has: []string{"/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
				"/home/u/.local/lib/python3.10/site-packages/nvidia/nccl/lib/libnccl.so.2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			glob := func(pattern string) ([]string, error) {
				var out []string
				for _, f := range tc.files {
					if ok, _ := filepath.Match(pattern, f); ok {
						out = append(out, f)
					}
				}
				return out, nil
			}
			got := Candidates(func(k string) string { return tc.env[k] }, glob)
			if tc.want != nil && !slices.Equal(got, tc.want) {
				t.Fatalf("Candidates = %q; want %q", got, tc.want)
			}
			if tc.first != "" && got[0] != tc.first {
				t.Errorf("first candidate %q; want %q", got[0], tc.first)
			}
			for _, h := range tc.has {
				if !slices.Contains(got, h) {
					t.Errorf("candidates lack %q: %q", h, got)
				}
			}
			for _, h := range tc.hasNot {
				if slices.Contains(got, h) {
					t.Errorf("candidates hold %q", h)
				}
			}
			if a, b := slices.Index(got, tc.orderOf[0]), slices.Index(got, tc.orderOf[1]); tc.orderOf[0] != "" && (a < 0 || b < 0 || a > b) {
				t.Errorf("%q (at %d) must come before %q (at %d)", tc.orderOf[0], a, tc.orderOf[1], b)
			}
			seen := map[string]bool{}
			for _, c := range got {
				if seen[c] {
					t.Errorf("%q listed twice", c)
				}
				seen[c] = true
			}
		})
	}
}

func TestSizesAndVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		t    DataType
		want uint64
	}{{Bfloat16, 2}, {Float16, 2}, {Float32, 4}, {Float64, 8}, {Int8, 1}, {Uint64, 8}, {DataType(42), 0}} {
		if got := tc.t.Size(); got != tc.want {
			t.Errorf("DataType(%d).Size() = %d; want %d", tc.t, got, tc.want)
		}
	}
	for _, tc := range []struct {
		code int
		want string
	}{{22803, "2.28.3"}, {21903, "2.19.3"}, {2804, "2.8.4"}, {2708, "2.7.8"}} {
		if got := VersionString(tc.code); got != tc.want {
			t.Errorf("VersionString(%d) = %q; want %q", tc.code, got, tc.want)
		}
	}
}
