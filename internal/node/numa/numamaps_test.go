package numa

import (
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestParseNUMAMapsCaptured(t *testing.T) {
	t.Parallel()
	// Sums from testdata/README.md's grep over each file.
	cases := []struct {
		file     string
		mappings int
		n0Pages  uint64
		check    func(t *testing.T, ms []Mapping)
	}{
		{file: "numa_maps.cat.txt", mappings: 37, n0Pages: 437},
		{file: "numa_maps.python.txt", mappings: 110, n0Pages: 5420},
		{file: "numa_maps.bind.txt", mappings: 121, n0Pages: 4524, check: func(t *testing.T, ms []Mapping) {
			var bound, spaced *Mapping
			for i := range ms {
				if ms[i].Policy == "bind:0" {
					bound = &ms[i]
				}
				if ms[i].File == "/tmp/numa test file.dat" {
					spaced = &ms[i]
				}
			}
			if bound == nil || bound.Pages[0] != 1024 || bound.PageSize != 4096 || bound.Start != 0x7f1fd4000000 {
				t.Errorf("bound mapping %+v, want bind:0 with 1024 pages of 4096 bytes at 7f1fd4000000", bound)
			}
			if spaced == nil || spaced.Pages[0] != 16 || spaced.Policy != "default" {
				t.Errorf("file with spaces %+v, want 16 pages, policy default", spaced)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			t.Parallel()
			f, err := os.Open("testdata/" + c.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ms, err := ParseNUMAMaps(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != c.mappings {
				t.Errorf("%d mappings, want %d", len(ms), c.mappings)
			}
			p := Sum(ms)
			if p.Bytes[0] != c.n0Pages*4096 || p.Total() != p.Bytes[0] {
				t.Errorf("placement %v, want %d bytes on node 0 only", p.Bytes, c.n0Pages*4096)
			}
			if r := p.RemoteRatio(0); r != 0 {
				t.Errorf("remote ratio to node 0 %v, want 0", r)
			}
			if r := p.RemoteRatio(1); r != 1 {
				t.Errorf("remote ratio to node 1 %v, want 1", r)
			}
			if c.check != nil {
				c.check(t, ms)
			}
		})
	}
}

func TestParseNUMAMapsLines(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		line string
		want Mapping
		err  string
	}{
		{name: "two nodes interleaved on the heap",
			line: "55d0c0a00000 interleave:0-1 heap anon=300 dirty=300 N0=150 N1=150 kernelpagesize_kB=4",
			want: Mapping{Start: 0x55d0c0a00000, Policy: "interleave:0-1", Heap: true, Pages: map[int]uint64{0: 150, 1: 150}, PageSize: 4096}},
		{name: "weighted interleave has a space in its name",
			line: "7f0000000000 weighted interleave:0-1 anon=4 N1=4 kernelpagesize_kB=4",
			want: Mapping{Start: 0x7f0000000000, Policy: "weighted interleave:0-1", Pages: map[int]uint64{1: 4}, PageSize: 4096}},
		{name: "hugetlb on the stack-less far node",
			line: "7f4000000000 bind=static:1 file=/dev/hugepages/x huge dirty=2 N1=2 kernelpagesize_kB=1048576",
			want: Mapping{Start: 0x7f4000000000, Policy: "bind=static:1", File: "/dev/hugepages/x", Huge: true, Pages: map[int]uint64{1: 2}, PageSize: 1 << 30}},
		{name: "stack", line: "7ffd00000000 prefer (many):1 stack anon=3 dirty=3 N1=3 kernelpagesize_kB=4",
			want: Mapping{Start: 0x7ffd00000000, Policy: "prefer (many):1", Stack: true, Pages: map[int]uint64{1: 3}, PageSize: 4096}},
		{name: "nothing resident", line: "7f1fd4466000 default file=/usr/lib/x",
			want: Mapping{Start: 0x7f1fd4466000, Policy: "default", File: "/usr/lib/x"}},
		{name: "escaped backslash and tab", line: `1000 default file=/a\134b\011c N0=1 kernelpagesize_kB=4`,
			want: Mapping{Start: 0x1000, Policy: "default", File: "/a\\b\tc", Pages: map[int]uint64{0: 1}, PageSize: 4096}},
		{name: "address not hex", line: "zz default N0=1 kernelpagesize_kB=4", err: "not hex"},
		{name: "no policy", line: "1000", err: "no policy"},
		{name: "pages without page size", line: "1000 default N0=1", err: "without kernelpagesize_kB"},
		{name: "node twice", line: "1000 default N0=1 N0=2 kernelpagesize_kB=4", err: "twice"},
		{name: "node too high", line: "1000 default N5000=1 kernelpagesize_kB=4", err: "not a node"},
		{name: "count not a number", line: "1000 default N0=x kernelpagesize_kB=4", err: "not a count"},
		{name: "overflow", line: "1000 default N0=18446744073709551615 kernelpagesize_kB=4", err: "overflow"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ms, err := ParseNUMAMaps(strings.NewReader(c.line + "\n"))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ParseNUMAMaps(%q): %v, want an error with %q", c.line, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != 1 {
				t.Fatalf("%d mappings, want 1", len(ms))
			}
			g, w := ms[0], c.want
			if g.Start != w.Start || g.Policy != w.Policy || g.File != w.File || g.Heap != w.Heap || g.Stack != w.Stack ||
				g.Huge != w.Huge || g.PageSize != w.PageSize || len(g.Pages) != len(w.Pages) {
				t.Fatalf("got %+v\nwant %+v", g, w)
			}
			for n, p := range w.Pages {
				if g.Pages[n] != p {
					t.Fatalf("node %d: %d pages, want %d", n, g.Pages[n], p)
				}
			}
		})
	}
}

// TestReadNUMAMapsSelf maps and touches memory bound to node 0 in this
// process and finds it in the process's own numa_maps.
func TestReadNUMAMapsSelf(t *testing.T) {
	const size = 2 << 20
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	mask := uint64(1) // node 0
	if _, _, e := unix.Syscall6(unix.SYS_MBIND, uintptr(unsafe.Pointer(&mem[0])), size, 2 /* MPOL_BIND */, uintptr(unsafe.Pointer(&mask)), 64, 0); e != 0 {
		t.Fatalf("mbind: %v", e)
	}
	for i := 0; i < size; i += os.Getpagesize() {
		mem[i] = 1
	}
	ms, err := ReadNUMAMaps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(mem)
	start := uint64(uintptr(unsafe.Pointer(&mem[0])))
	for _, m := range ms {
		if m.Start == start {
			if m.Policy != "bind:0" || m.Bytes()[0] != size {
				t.Fatalf("mapping %+v, want bind:0 with %d bytes on node 0", m, size)
			}
			return
		}
	}
	t.Fatalf("mapping at %x not in numa_maps", start)
}

func FuzzParseNUMAMaps(f *testing.F) {
	for _, name := range []string{"numa_maps.cat.txt", "numa_maps.bind.txt"} {
		if b, err := os.ReadFile("testdata/" + name); err == nil {
			f.Add(string(b))
		}
	}
	f.Add("55d0c0a00000 weighted interleave:0-1 heap anon=300 N0=150 N1=150 kernelpagesize_kB=4\n")
	f.Add("7f4000000000 bind=static:1 file=/a\\040b huge dirty=2 N1=2 kernelpagesize_kB=1048576\n")
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := ParseNUMAMaps(strings.NewReader(s))
		if err != nil {
			return
		}
		p := Sum(ms)
		var total uint64
		for _, m := range ms {
			if m.Policy == "" {
				t.Fatalf("mapping without a policy: %+v", m)
			}
			for _, b := range m.Bytes() {
				total += b
			}
		}
		if p.Total() != total {
			t.Fatalf("Sum total %d, mappings %d", p.Total(), total)
		}
		if r := p.RemoteRatio(0); math.IsNaN(r) || r < 0 || r > 1 {
			t.Fatalf("remote ratio %v", r)
		}
	})
}
