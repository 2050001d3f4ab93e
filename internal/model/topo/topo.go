package topo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Matrix is the parsed output of nvidia-smi topo -m. Its JSON form is the
// output of 'gpuchaos topo parse' (DESIGN.md §4).
type Matrix struct {
	// GPUs are the GPU rows in index order.
	GPUs []GPU `json:"gpus"`
	// NICs are the network devices in the matrix, in column order.
	NICs []NIC `json:"nics,omitempty"`
	// Links maps "i-j" (GPU indexes, i < j) to the connection between the
	// two GPUs as printed: NV<n> (n bonded NVLinks), PIX, PXB, PHB, NODE
	// or SYS.
	Links map[string]string `json:"links"`
	// NICLinks maps "GPUi-NICk" and "NICa-NICb" (a before b in column
	// order), using the column labels, to the connection between them.
	NICLinks map[string]string `json:"nic_links,omitempty"`
}

// GPU is one GPU row.
type GPU struct {
	// Index is the n of GPUn.
	Index int `json:"index"`
	// CPUAffinity is the CPU list close to the GPU as printed
	// ("0-55,112-167"); empty when nvidia-smi reports N/A or has no such
	// column.
	CPUAffinity string `json:"cpu_affinity"`
	// NUMANode is the host NUMA node close to the GPU (NUMA Affinity);
	// nil when N/A, blank or absent. When NUMA Affinity is a list (Grace
	// systems print "0,3-9,11-17": the CPU node, then the memory-only nodes
	// of the GPUs), it is the first node listed, the one that holds the
	// CPUs in CPUAffinity, and NUMANodes holds the whole list.
	NUMANode *int `json:"numa_node"`
	// NUMANodes is every node of a NUMA Affinity list, ascending as
	// printed; nil when NUMA Affinity is a single node, so that JSON output
	// for such boxes is what it was.
	NUMANodes []int `json:"numa_nodes,omitempty"`
	// GPUNUMAID is the NUMA node of the GPU's own memory, set on systems
	// that expose GPU memory as a NUMA node (Grace Hopper, Blackwell);
	// nil when N/A or absent.
	GPUNUMAID *int `json:"gpu_numa_id"`
}

// NIC is one network device column.
type NIC struct {
	// Label is the column header: NIC0 on current drivers, the device
	// name (mlx5_0) on older ones.
	Label string `json:"label"`
	// Device is the device name, from the "NIC Legend" section or the
	// label itself when the header already names the device.
	Device string `json:"device,omitempty"`
}

// The trailing columns after the device columns, by header text.
const (
	colCPUAffinity  = "CPU Affinity"
	colNUMAAffinity = "NUMA Affinity"
	colGPUNUMAID    = "GPU NUMA ID"
)

// affinityCols lists the trailing columns known, each as the words that
// make up its header; a header token run must match one of them.
var affinityCols = [][]string{
	{"CPU", "Affinity"},
	{"NUMA", "Affinity"},
	{"GPU", "NUMA", "ID"},
}

var (
	ansiRE = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)
	gpuRE  = regexp.MustCompile(`^GPU\d+$`)
	nicRE  = regexp.MustCompile(`^NIC(\d+):\s*(\S+)$`)
	// linkRE accepts every connection name nvidia-smi has printed (X,
	// NV<n>, PIX, PXB, PHB, NODE, SYS, SOC) and future ones in the same
	// style, and rejects everything else so a shifted column is caught.
	linkRE = regexp.MustCompile(`^[A-Z]+[0-9]*$`)
)

// MaxInput is the most Parse reads: 1 MiB. nvidia-smi topo -m prints a few
// KiB even on a box of 8 GPUs and 10 NICs (about 150 bytes a row); the
// bound keeps a wrong input (a binary, /dev/zero, an endless pipe) from
// being read without end, and bounds every line with it.
const MaxInput = 1 << 20

// column is one header column.
type column struct {
	name string
	gpu  int // GPU index, or -1 for a NIC
}

// Parse reads nvidia-smi topo -m output. Text before the header and the
// legend after the matrix are skipped, except the NIC legend, which names
// the NICs. Errors name the line at fault.
func Parse(r io.Reader) (*Matrix, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxInput+1))
	if err != nil {
		return nil, fmt.Errorf("topo: read: %w", err)
	}
	if len(data) > MaxInput {
		return nil, fmt.Errorf("topo: input over the limit of %d bytes (1 MiB); nvidia-smi topo -m prints a few KiB", MaxInput)
	}
	data = ansiRE.ReplaceAll(data, nil)
	lines := strings.Split(string(bytes.ReplaceAll(data, []byte("\r"), nil)), "\n")

	hi := -1
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "GPU0" && (len(f) == 1 || f[1] != "X") {
			hi = i
			break
		}
	}
	if hi < 0 {
		return nil, errors.New("topo: no header line (a line of column names starting with GPU0); is this nvidia-smi topo -m output?")
	}
	devs, trailing, err := parseHeader(strings.Fields(lines[hi]))
	if err != nil {
		return nil, fmt.Errorf("topo: line %d: %w", hi+1, err)
	}
	ncols := len(devs) + len(trailing)
	index := make(map[string]int, len(devs))
	for i, c := range devs {
		index[c.name] = i
	}

	cells := make([][]string, len(devs)) // cells[row][col], device columns only
	rowLine := make([]int, len(devs))
	m := &Matrix{Links: map[string]string{}}
	end := len(lines)
	for i := hi + 1; i < len(lines); i++ {
		f := strings.Fields(lines[i])
		if len(f) == 0 || f[0] == "Legend:" {
			end = i
			break
		}
		lineNo := i + 1
		label := f[0]
		ri, ok := index[label]
		if !ok {
			return nil, fmt.Errorf("topo: line %d: row %q is not a column of the header", lineNo, label)
		}
		if cells[ri] != nil {
			return nil, fmt.Errorf("topo: line %d: second row for %s (first on line %d)", lineNo, label, rowLine[ri])
		}
		row := f[1:]
		isGPU := devs[ri].gpu >= 0
		// NIC rows carry no affinity values, only empty tab cells. GPU rows
		// in containers and cloud VMs may leave CPU and NUMA Affinity
		// blank, which splitting at white space cannot tell from absent;
		// gpuAffinity lines up what is there.
		if len(row) < len(devs) || len(row) > ncols || !isGPU && len(row) != ncols && len(row) != len(devs) ||
			isGPU && !blanksFit(trailing, ncols-len(row)) {
			return nil, fmt.Errorf("topo: line %d: row %s has %d cells, header has %d", lineNo, label, len(row), ncols)
		}
		for ci := range devs {
			c := row[ci]
			if (ci == ri) != (c == "X") {
				return nil, fmt.Errorf("topo: line %d: row %s, column %s: %q where the diagonal should be X and only there", lineNo, label, devs[ci].name, c)
			}
			if !linkRE.MatchString(c) {
				return nil, fmt.Errorf("topo: line %d: row %s, column %s: %q is not a connection type", lineNo, label, devs[ci].name, c)
			}
		}
		cells[ri] = row[:len(devs)]
		rowLine[ri] = lineNo
		if isGPU {
			g, err := gpuAffinity(devs[ri].gpu, trailing, row[len(devs):])
			if err != nil {
				return nil, fmt.Errorf("topo: line %d: row %s: %w", lineNo, label, err)
			}
			m.GPUs = append(m.GPUs, g)
		}
	}
	for i, c := range devs {
		if cells[i] == nil {
			return nil, fmt.Errorf("topo: line %d: the header has %s but no row follows for it", hi+1, c.name)
		}
	}

	for a := range devs {
		for b := a + 1; b < len(devs); b++ {
			ab, ba := cells[a][b], cells[b][a]
			if ab != ba {
				return nil, fmt.Errorf("topo: line %d: %s-%s is %s but %s-%s on line %d is %s",
					rowLine[a], devs[a].name, devs[b].name, ab, devs[b].name, devs[a].name, rowLine[b], ba)
			}
			da, db := devs[a], devs[b]
			switch {
			case da.gpu >= 0 && db.gpu >= 0:
				i, j := min(da.gpu, db.gpu), max(da.gpu, db.gpu)
				m.Links[strconv.Itoa(i)+"-"+strconv.Itoa(j)] = ab
			case da.gpu >= 0 || db.gpu >= 0:
				g, n := da, db
				if g.gpu < 0 {
					g, n = db, da
				}
				m.setNICLink(g.name+"-"+n.name, ab)
			default:
				m.setNICLink(da.name+"-"+db.name, ab)
			}
		}
	}

	legend := nicLegend(lines[end:])
	for _, c := range devs {
		if c.gpu >= 0 {
			continue
		}
		dev, ok := legend[c.name]
		if !ok && !nicLabelRE.MatchString(c.name) {
			dev = c.name // an older header names the device itself
		}
		m.NICs = append(m.NICs, NIC{Label: c.name, Device: dev})
	}
	slices.SortFunc(m.GPUs, func(a, b GPU) int { return a.Index - b.Index })
	return m, nil
}

var nicLabelRE = regexp.MustCompile(`^NIC\d+$`)

func (m *Matrix) setNICLink(key, v string) {
	if m.NICLinks == nil {
		m.NICLinks = map[string]string{}
	}
	m.NICLinks[key] = v
}

// parseHeader splits the header tokens into device columns and the
// trailing affinity columns.
func parseHeader(f []string) ([]column, []string, error) {
	var devs []column
	var trailing []string
	ngpu := 0
	seen := map[string]bool{}
	for i := 0; i < len(f); {
		if name, n := matchAffinity(f[i:]); n > 0 {
			trailing = append(trailing, name)
			i += n
			continue
		}
		if len(trailing) > 0 {
			return nil, nil, fmt.Errorf("header: unknown column %q after %q", f[i], trailing[len(trailing)-1])
		}
		tok := f[i]
		if seen[tok] {
			return nil, nil, fmt.Errorf("header: column %s appears twice", tok)
		}
		seen[tok] = true
		c := column{name: tok, gpu: -1}
		if gpuRE.MatchString(tok) {
			// nvidia-smi numbers GPU columns GPU0, GPU1, … in order; any
			// other numbering means the header is not what we think.
			if want := "GPU" + strconv.Itoa(ngpu); tok != want {
				return nil, nil, fmt.Errorf("header: column %s where %s was expected", tok, want)
			}
			c.gpu = ngpu
			ngpu++
		}
		devs = append(devs, c)
		i++
	}
	for i := 1; i < len(devs); i++ {
		if devs[i].gpu >= 0 && devs[i-1].gpu < 0 {
			return nil, nil, fmt.Errorf("header: GPU column %s after a NIC column", devs[i].name)
		}
	}
	return devs, trailing, nil
}

// matchAffinity reports which trailing column the tokens at the start of f
// spell, and how many tokens it takes.
func matchAffinity(f []string) (string, int) {
	for _, words := range affinityCols {
		if len(f) >= len(words) && equal(f[:len(words)], words) {
			return strings.Join(words, " "), len(words)
		}
	}
	return "", 0
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// blanksFit reports whether a GPU row can be missing its first n trailing
// cells: none, or CPU Affinity together with the NUMA Affinity that
// nvidia-smi derives from it (and GPU NUMA ID after them), never CPU
// Affinity alone, which would shift a CPU list into NUMA Affinity.
func blanksFit(trailing []string, n int) bool {
	if n == 0 {
		return true
	}
	return !slices.Contains(trailing[n:], colNUMAAffinity) && !slices.Contains(trailing[n:], colCPUAffinity)
}

// gpuAffinity reads a GPU row's trailing cells. When there are fewer
// values than columns, the missing ones are the leading ones: nvidia-smi
// leaves CPU Affinity and NUMA Affinity blank where it cannot read the
// GPU's affinity (containers, cloud VMs) but still prints GPU NUMA ID.
func gpuAffinity(index int, names, vals []string) (GPU, error) {
	g := GPU{Index: index}
	names = names[len(names)-len(vals):]
	for i, name := range names {
		v := vals[i]
		if v == "N/A" {
			continue
		}
		switch name {
		case colCPUAffinity:
			g.CPUAffinity = v
		case colNUMAAffinity:
			nodes, err := ParseNodeList(v)
			if err != nil {
				return GPU{}, fmt.Errorf("%s %q is neither a NUMA node number, a list of them, nor N/A", name, v)
			}
			g.NUMANode = &nodes[0]
			if len(nodes) > 1 {
				g.NUMANodes = nodes
			}
		case colGPUNUMAID:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return GPU{}, fmt.Errorf("%s %q is neither a NUMA node number nor N/A", name, v)
			}
			g.GPUNUMAID = &n
		}
	}
	return g, nil
}

// maxNode bounds the node numbers ParseNodeList accepts, and so the length
// of its result: Linux allows 1<<10 NUMA nodes (CONFIG_NODES_SHIFT 10).
const maxNode = 1 << 10

// ParseNodeList reads a NUMA node list as nvidia-smi prints it, "0",
// "0,3-9,11-17", into the nodes it names, in ascending order. Ranges and
// single nodes must ascend without overlap, as the kernel's list format
// (cpulist) writes them, and each node is below 1024.
func ParseNodeList(s string) ([]int, error) {
	var nodes []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := nodeNum(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = nodeNum(hi); err != nil {
				return nil, err
			}
			if b <= a {
				return nil, fmt.Errorf("range %s does not ascend", part)
			}
		}
		if len(nodes) > 0 && a <= nodes[len(nodes)-1] {
			return nil, fmt.Errorf("%s is not above the nodes before it", part)
		}
		for n := a; n <= b; n++ {
			nodes = append(nodes, n)
		}
	}
	return nodes, nil
}

func nodeNum(s string) (int, error) {
	if s == "" || len(s) > 4 || !isDigits(s) {
		return 0, fmt.Errorf("%q is not a node number", s)
	}
	n, _ := strconv.Atoi(s)
	if n >= maxNode {
		return 0, fmt.Errorf("node %d is above %d", n, maxNode-1)
	}
	return n, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatNodeList writes nodes (ascending) in the list form ParseNodeList
// reads, runs of three or more as ranges: [0 3 4 5 6] is "0,3-6".
func FormatNodeList(nodes []int) string {
	var b strings.Builder
	for i := 0; i < len(nodes); {
		j := i
		for j+1 < len(nodes) && nodes[j+1] == nodes[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(nodes[i]))
		switch {
		case j == i+1:
			b.WriteString("," + strconv.Itoa(nodes[j]))
		case j > i+1:
			b.WriteString("-" + strconv.Itoa(nodes[j]))
		}
		i = j + 1
	}
	return b.String()
}

// nicLegend reads "  NIC0: mlx5_0" lines from the NIC legend.
func nicLegend(lines []string) map[string]string {
	out := map[string]string{}
	in := false
	for _, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case t == "NIC Legend:":
			in = true
		case in:
			if mm := nicRE.FindStringSubmatch(t); mm != nil {
				out["NIC"+mm[1]] = mm[2]
			}
		}
	}
	return out
}
