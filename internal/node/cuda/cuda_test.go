package cuda

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestOpenWithoutDriver(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		path     string
		contains []string
	}{
		{"library absent", "libgpuchaos-no-such-driver.so.1", []string{"libgpuchaos-no-such-driver.so.1", "absent"}},
		// libc loads but exports no CUDA symbol: the first lookup fails.
		{"library without the API", "libc.so.6", []string{"libc.so.6", "symbol cuInit"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := openDriver(tc.path)
			if err == nil || d != nil {
				t.Fatalf("openDriver(%q) = %v, %v; want an error", tc.path, d, err)
			}
			if !errors.Is(err, ErrNoDriver) {
				t.Errorf("error %q does not wrap ErrNoDriver", err)
			}
			for _, c := range tc.contains {
				if !strings.Contains(err.Error(), c) {
					t.Errorf("error %q lacks %q", err, c)
				}
			}
		})
	}
}

// TestOpenHere checks the real entry point: on a machine without a GPU it
// must fail cleanly and name libcuda.so.1.
func TestOpenHere(t *testing.T) {
	t.Parallel()
	d, err := Open()
	if err == nil {
		n, cerr := d.DeviceCount()
		t.Skipf("a CUDA driver is present (%d devices, %v): nothing to check here", n, cerr)
	}
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), DriverLibrary) {
		t.Fatalf("Open() error = %q; want ErrNoDriver naming %s", err, DriverLibrary)
	}
}

func TestOpenBLASFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		candidates []string
		contains   string
	}{
		{"nothing to try", nil, "tried 0 paths"},
		{"absent", []string{"/nonexistent/libcublas.so.13"}, "/nonexistent/libcublas.so.13"},
		{"not cuBLAS", []string{"libc.so.6"}, "symbol cublasCreate_v2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := OpenBLAS(tc.candidates)
			if !errors.Is(err, ErrNoBLAS) {
				t.Fatalf("OpenBLAS error = %v; want ErrNoBLAS", err)
			}
			if !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("error %q lacks %q", err, tc.contains)
			}
		})
	}
}

func TestBLASCandidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		env       map[string]string
		wantFirst []string // the candidates must start with these
		want      []string // and contain these
		wantNot   []string
	}{
		{
			name:      "bare environment",
			wantFirst: []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"},
			want:      []string{"/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12"},
		},
		{
			name: "LD_LIBRARY_PATH before the usual places",
			env:  map[string]string{"LD_LIBRARY_PATH": "/opt/a::/opt/b"},
			want: []string{"/opt/a/libcublas.so.13", "/opt/b/libcublas.so.12"},
		},
		{
			name: "CUDA_HOME",
			env:  map[string]string{"CUDA_HOME": "/opt/cuda-13.0"},
			want: []string{"/opt/cuda-13.0/lib64/libcublas.so.13"},
			// an empty LD_LIBRARY_PATH entry must not become the
			// current directory
			wantNot: []string{"libcublas.so.13/libcublas.so.13", "/libcublas.so.13"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := BLASCandidates(func(k string) string { return tc.env[k] })
			if len(tc.wantFirst) > 0 && !slices.Equal(got[:len(tc.wantFirst)], tc.wantFirst) {
				t.Errorf("first candidates = %q; want %q", got[:len(tc.wantFirst)], tc.wantFirst)
			}
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("candidates lack %q: %q", w, got)
				}
			}
			for _, w := range tc.wantNot {
				if slices.Contains(got, w) {
					t.Errorf("candidates hold %q", w)
				}
			}
			// LD_LIBRARY_PATH entries come before /usr/local/cuda.
			if tc.env["LD_LIBRARY_PATH"] != "" {
				if slices.Index(got, "/opt/a/libcublas.so.13") > slices.Index(got, "/usr/local/cuda/lib64/libcublas.so.13") {
					t.Errorf("LD_LIBRARY_PATH comes after /usr/local/cuda: %q", got)
				}
			}
			seen := map[string]bool{}
			for _, c := range got {
				if seen[c] {
					t.Errorf("candidate %q listed twice", c)
				}
				seen[c] = true
			}
		})
	}
}

func TestPackParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []any
		want    []uint64
		wantErr string
	}{
		{"none", nil, []uint64{}, ""},
		{"pointer and sizes", []any{DevicePtr(0x7f0000001000), uint64(1 << 40), uint32(7)}, []uint64{0x7f0000001000, 1 << 40, 7}, ""},
		{"negative int32 keeps four bytes", []any{int32(-1)}, []uint64{0xffffffff}, ""},
		{"negative int64", []any{int64(-2)}, []uint64{math.MaxUint64 - 1}, ""},
		{"floats as bits", []any{float32(1), float64(-2)}, []uint64{0x3f800000, 0xc000000000000000}, ""},
		{"plain int refused", []any{uint64(1), 5}, nil, "argument 1: type int"},
		{"slice refused", []any{[]byte{1}}, nil, "argument 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := packParams(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("packParams error = %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("packParams = %#x, %v; want %#x", got, err, tc.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	exported := map[string]uintptr{"cuA": 1, "cuB_v2": 2, "cuB": 3}
	lookup := func(n string) (uintptr, error) {
		if p, ok := exported[n]; ok {
			return p, nil
		}
		return 0, errors.New("undefined symbol")
	}
	tests := []struct {
		name    string
		names   [][]string
		want    []uintptr
		wantErr string
	}{
		{"single names", [][]string{{"cuA"}}, []uintptr{1}, ""},
		{"first alternative wins", [][]string{{"cuB_v2", "cuB"}}, []uintptr{2}, ""},
		{"falls back to the old name", [][]string{{"cuC_v2", "cuB"}}, []uintptr{3}, ""},
		{"missing names the first", [][]string{{"cuA"}, {"cuD_v2", "cuD"}}, nil, "symbol cuD_v2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addrs := make([]uintptr, len(tc.names))
			syms := make([]symbol, len(tc.names))
			for i, n := range tc.names {
				syms[i] = symbol{n, &addrs[i]}
			}
			err := resolve(syms, lookup)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("resolve error = %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(addrs, tc.want) {
				t.Fatalf("resolve = %v, %v; want %v", addrs, err, tc.want)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"driver with name and text", &Error{Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Message: "out of memory"}, "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"},
		{"driver with name only", &Error{Call: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE"}, "cuInit: CUDA_ERROR_NO_DEVICE (100)"},
		{"driver unknown code", &Error{Call: "cuInit", Code: 12345}, "cuInit: CUDA error 12345"},
		{"blas with text", &BLASError{Call: "cublasGemmEx", Status: 7, Message: "the parameters are not valid"}, "cublasGemmEx: the parameters are not valid (7)"},
		{"blas without text", &BLASError{Call: "cublasCreate_v2", Status: 1}, "cublasCreate_v2: cuBLAS status 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q; want %q", got, tc.want)
			}
		})
	}
	wrapped := errors.Join(errors.New("context"), &Error{Call: "cuMemAlloc_v2", Code: ErrorOutOfMemory})
	if !IsCode(wrapped, ErrorOutOfMemory) || IsCode(wrapped, ErrorNoDevice) {
		t.Errorf("IsCode does not see through wrapping")
	}
}

func TestCString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   []byte
		want string
	}{
		{[]byte("NVIDIA H200\x00junk"), "NVIDIA H200"},
		{[]byte("no terminator"), "no terminator"},
		{[]byte{0, 'x'}, ""},
	}
	for _, tc := range tests {
		if got := cString(tc.in); got != tc.want {
			t.Errorf("cString(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
