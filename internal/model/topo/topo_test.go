package topo

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestGolden parses every testdata/*.txt and compares the JSON with
// testdata/*.golden.json; go test -update rewrites them.
func TestGolden(t *testing.T) {
	t.Parallel()
	inputs, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, path := range inputs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m, err := Parse(f)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got, err := json.MarshalIndent(m, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := strings.TrimSuffix(path, ".txt") + ".golden.json"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from %s:\n got:\n%s\nwant:\n%s", path, golden, got, want)
			}
		})
	}
}

func parseFile(t *testing.T, name string) *Matrix {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := Parse(f)
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return m
}

func intp(v int) *int { return &v }

func eqIntp(a, b *int) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

// TestShapes asserts the facts each capture must yield, independent of the
// golden files.
func TestShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file      string
		gpus      int
		nics      int
		links     map[string]string
		nicLinks  map[string]string
		gpu       int // a GPU to check
		cpu       string
		numa, gid *int
		numaNodes []int
		nicDev    map[string]string
	}{
		// A 4x GB200 box (NUMA Affinity lists), and a container that
		// leaves CPU and NUMA Affinity blank.
		{file: "gb200x4-nics.txt", gpus: 4, nics: 8,
			links:    map[string]string{"0-1": "NV18", "2-3": "NV18"},
			nicLinks: map[string]string{"GPU0-NIC0": "SYS", "NIC2-NIC3": "PIX", "NIC6-NIC7": "PIX"},
			gpu:      2, cpu: "72-143", numa: intp(1), gid: intp(18),
			numaNodes: []int{1, 19, 20, 21, 22, 23, 24, 25, 27, 28, 29, 30, 31, 32, 33},
			nicDev:    map[string]string{"NIC7": "mlx5_7"}},
		{file: "h100x8-container-blank-affinity.txt", gpus: 8, nics: 2,
			links:    map[string]string{"0-7": "NV18"},
			nicLinks: map[string]string{"GPU0-NIC0": "PIX", "GPU7-NIC1": "PIX", "NIC0-NIC1": "SYS"},
			gpu:      3, cpu: ""},
		// Real pastes: vLLM's collect_env on a box whose
		// nvidia-smi left CPU and NUMA Affinity blank (tabs expanded to
		// spaces), and lmdeploy's check_env with device-named NIC columns
		// and no GPU NUMA ID column.
		{file: "vllm19607-blank-affinity.txt", gpus: 2, nics: 8,
			links:    map[string]string{"0-1": "NV12"},
			nicLinks: map[string]string{"GPU0-NIC6": "PXB", "GPU1-NIC0": "SYS", "NIC0-NIC1": "PIX", "NIC6-NIC7": "PIX", "NIC0-NIC2": "SYS"},
			gpu:      1, cpu: ""},
		{file: "lmdeploy1944-mlx-header.txt", gpus: 2, nics: 8,
			links:    map[string]string{"0-1": "NV12"},
			nicLinks: map[string]string{"GPU0-mlx5_6": "PXB", "GPU1-mlx5_4": "NODE", "GPU0-mlx5_0": "SYS", "mlx5_2-mlx5_3": "PIX"},
			gpu:      1, cpu: "48-95,144-191", numa: intp(1),
			nicDev: map[string]string{"mlx5_7": "mlx5_7"}},
		{file: "h200x2-real.txt", gpus: 2, links: map[string]string{"0-1": "NV18"}, gpu: 1, cpu: "0-31", numa: intp(0)},
		{file: "h200x2-real-tty.txt", gpus: 2, links: map[string]string{"0-1": "NV18"}, gpu: 0, cpu: "0-31", numa: intp(0)},
		{file: "h100x8-nics.txt", gpus: 8, nics: 10,
			links:    map[string]string{"0-1": "NV18", "3-4": "NV18", "6-7": "NV18"},
			nicLinks: map[string]string{"GPU0-NIC0": "PIX", "GPU4-NIC6": "PIX", "GPU0-NIC6": "SYS", "GPU1-NIC0": "NODE", "NIC4-NIC5": "PIX", "NIC0-NIC9": "SYS"},
			gpu:      5, cpu: "56-111,168-223", numa: intp(1),
			nicDev: map[string]string{"NIC0": "mlx5_0", "NIC9": "mlx5_9"}},
		{file: "pcie4x-spaces.txt", gpus: 4,
			links: map[string]string{"0-1": "PIX", "0-2": "SYS", "2-3": "PHB", "1-3": "SYS"},
			gpu:   2, cpu: "16-31,48-63", numa: intp(1)},
		{file: "pcie4x-node.txt", gpus: 4,
			links: map[string]string{"0-1": "PXB", "0-2": "NODE", "2-3": "PXB"},
			gpu:   3, cpu: ""},
		{file: "single.txt", gpus: 1, links: map[string]string{}, gpu: 0, cpu: "0-31", numa: intp(0)},
		{file: "v100x2-old-mlx.txt", gpus: 2, nics: 2,
			links:    map[string]string{"0-1": "NV4"},
			nicLinks: map[string]string{"GPU0-mlx5_0": "PIX", "GPU1-mlx5_0": "SYS", "mlx5_0-mlx5_1": "SYS"},
			gpu:      1, cpu: "20-39",
			nicDev: map[string]string{"mlx5_1": "mlx5_1"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			m := parseFile(t, tt.file)
			if len(m.GPUs) != tt.gpus || len(m.NICs) != tt.nics {
				t.Fatalf("%d GPUs, %d NICs; want %d, %d", len(m.GPUs), len(m.NICs), tt.gpus, tt.nics)
			}
			for i, g := range m.GPUs {
				if g.Index != i {
					t.Errorf("GPUs[%d].Index = %d", i, g.Index)
				}
			}
			if want := tt.gpus * (tt.gpus - 1) / 2; len(m.Links) != want {
				t.Errorf("%d links, want %d (every GPU pair once)", len(m.Links), want)
			}
			for k, v := range tt.links {
				if m.Links[k] != v {
					t.Errorf("Links[%s] = %q, want %q", k, m.Links[k], v)
				}
			}
			for k, v := range tt.nicLinks {
				if m.NICLinks[k] != v {
					t.Errorf("NICLinks[%s] = %q, want %q", k, m.NICLinks[k], v)
				}
			}
			g := m.GPUs[tt.gpu]
			if g.CPUAffinity != tt.cpu || !eqIntp(g.NUMANode, tt.numa) || !eqIntp(g.GPUNUMAID, tt.gid) || !slices.Equal(g.NUMANodes, tt.numaNodes) {
				t.Errorf("GPU%d = %+v, want cpu %q numa %v gpu-numa %v", tt.gpu, g, tt.cpu, tt.numa, tt.gid)
			}
			devs := map[string]string{}
			for _, n := range m.NICs {
				devs[n.Label] = n.Device
			}
			for k, v := range tt.nicDev {
				if devs[k] != v {
					t.Errorf("NIC %s device = %q, want %q", k, devs[k], v)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	const hdr = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "topo: no header line"},
		{"not topo", "hello\nworld\n", "topo: no header line"},
		{"short row", hdr + "GPU0\t X \tNV4\tNV4\t0-7\t0\nGPU1\tNV4\t X \tNV4\t0-7\t0\nGPU2\tNV4\tNV4\t X \t0-7\n",
			"topo: line 4: row GPU2 has 4 cells, header has 5"},
		{"long row", hdr + "GPU0\t X \tNV4\tNV4\t0-7\t0\t9\n", "topo: line 2: row GPU0 has 6 cells, header has 5"},
		{"unknown row", hdr + "GPU0\t X \tNV4\tNV4\t0-7\t0\nGPU7\tNV4\t X \tNV4\t0-7\t0\n", `topo: line 3: row "GPU7" is not a column of the header`},
		{"missing row", hdr + "GPU0\t X \tNV4\tNV4\t0-7\t0\nGPU1\tNV4\t X \tNV4\t0-7\t0\n\nLegend:\n", "topo: line 1: the header has GPU2 but no row follows for it"},
		{"duplicate row", hdr + "GPU0\t X \tNV4\tNV4\t0-7\t0\nGPU0\t X \tNV4\tNV4\t0-7\t0\n", "topo: line 3: second row for GPU0 (first on line 2)"},
		{"bad cell", hdr + "GPU0\t X \tnv4\tNV4\t0-7\t0\n", `topo: line 2: row GPU0, column GPU1: "nv4" is not a connection type`},
		{"X off diagonal", hdr + "GPU0\t X \tX\tNV4\t0-7\t0\n", `topo: line 2: row GPU0, column GPU1: "X" where the diagonal`},
		{"no X on diagonal", hdr + "GPU0\tNV4\tNV4\tNV4\t0-7\t0\n", `topo: line 2: row GPU0, column GPU0: "NV4" where the diagonal`},
		{"asymmetric", hdr + "GPU0\t X \tNV4\tNV4\t0-7\t0\nGPU1\tSYS\t X \tNV4\t0-7\t0\nGPU2\tNV4\tNV4\t X \t0-7\t0\n",
			"topo: line 2: GPU0-GPU1 is NV4 but GPU1-GPU0 on line 3 is SYS"},
		{"bad numa", hdr + "GPU0\t X \tNV4\tNV4\t0-7\tzero\n", `topo: line 2: row GPU0: NUMA Affinity "zero" is neither`},
		{"gpu numbering", "\tGPU0\tGPU2\tCPU Affinity\n", "topo: line 1: header: column GPU2 where GPU1 was expected"},
		{"unknown trailing column", "\tGPU0\tCPU Affinity\tColour\n", `topo: line 1: header: unknown column "Colour" after "CPU Affinity"`},
		{"duplicate column", "\tGPU0\tNIC0\tNIC0\tCPU Affinity\n", "topo: line 1: header: column NIC0 appears twice"},
		// A real paste (vllm-project/vllm#13855) whose copy lost the tab
		// between NIC8 and NIC9 in the header and between two cells in
		// GPU4-7's rows; it must fail, not shift columns.
		{"merged header cells", "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tNIC1\tNIC2\tNIC3\tNIC4\tNIC5\tNIC6\tNIC7\tNIC8NIC9\tNIC10\tNIC11\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n" +
			"GPU0\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tPXB\tNODE\tNODE\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A\n",
			"topo: line 2: row GPU0 has 23 cells, header has 22"},
		{"GPU after NIC", "\tGPU0\tNIC0\tGPU1\tCPU Affinity\n", "topo: line 1: header: GPU column GPU1 after a NIC column"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("Parse() = %+v, want error %q", m, tt.want)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Parse() error = %q, want prefix %q", err, tt.want)
			}
		})
	}
}

func TestParseInputBound(t *testing.T) {
	t.Parallel()
	const matrix = "\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X \n\nLegend:\n"
	pad := func(n int) string { return strings.Repeat(" ", n-len(matrix)) }
	tests := []struct {
		name string
		r    io.Reader
		err  bool
	}{
		{"exactly the limit", strings.NewReader(matrix + pad(MaxInput)), false},
		{"one byte over", strings.NewReader(matrix + pad(MaxInput+1)), true},
		{"endless", &endless{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.r)
			if tt.err != (err != nil) {
				t.Fatalf("Parse = %v, want error %v", err, tt.err)
			}
			if err != nil && !strings.Contains(err.Error(), "over the limit of 1048576 bytes") {
				t.Errorf("error %q does not name the limit", err)
			}
			if e, ok := tt.r.(*endless); ok && e.n > MaxInput+64<<10 {
				t.Errorf("read %d bytes of an endless input, want about the limit", e.n)
			}
		})
	}
}

// endless reads NUL bytes for ever, counting them.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	clear(p)
	e.n += len(p)
	return len(p), nil
}

func TestJSONShape(t *testing.T) {
	t.Parallel()
	m := parseFile(t, "single.txt")
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"gpus":[{"index":0,"cpu_affinity":"0-31","numa_node":0,"gpu_numa_id":null}],"links":{}}`
	if string(b) != want {
		t.Errorf("JSON = %s\nwant   %s", b, want)
	}
}

func TestNodeList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []int // nil: an error
		out  string
	}{
		{"0", []int{0}, "0"},
		{"0,3-9,11-17", []int{0, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17}, "0,3-9,11-17"},
		{"1,19-25,27-33", []int{1, 19, 20, 21, 22, 23, 24, 25, 27, 28, 29, 30, 31, 32, 33}, "1,19-25,27-33"},
		{"0-1", []int{0, 1}, "0,1"},
		{"1023", []int{1023}, "1023"},
		{"1024", nil, ""},
		{"3-1", nil, ""},
		{"3-3", nil, ""},
		{"2,1", nil, ""},
		{"0,0", nil, ""},
		{"0-2,2", nil, ""},
		{"", nil, ""},
		{"0,", nil, ""},
		{"-1", nil, ""},
		{"a", nil, ""},
		{"0-", nil, ""},
	}
	for _, tt := range tests {
		got, err := ParseNodeList(tt.in)
		if tt.want == nil {
			if err == nil {
				t.Errorf("ParseNodeList(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseNodeList(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			continue
		}
		if s := FormatNodeList(got); s != tt.out {
			t.Errorf("FormatNodeList(%v) = %q, want %q", got, s, tt.out)
		}
	}
}
