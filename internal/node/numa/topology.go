package numa

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// SysNodeDir is where Linux lists the NUMA nodes.
const SysNodeDir = "/sys/devices/system/node"

// MaxNode bounds the node numbers the parsers accept: Linux builds with at
// most 1024 nodes (MAX_NUMNODES with NODES_SHIFT 10).
const MaxNode = 1023

// Node is one NUMA node.
type Node struct {
	// ID is the kernel's node number.
	ID int `json:"id"`
	// CPUs are the node's online CPUs, sorted; empty for a memory-only
	// node (CXL memory, HBM exposed as a node).
	CPUs []int `json:"cpus"`
	// MemTotal and MemFree are the node's memory in bytes, from its
	// meminfo; zero for a node without memory.
	MemTotal uint64 `json:"mem_total_bytes"`
	MemFree  uint64 `json:"mem_free_bytes"`
	// Distance maps every online node, this one included, to the SLIT
	// distance from this node (10 is local).
	Distance map[int]int `json:"distance"`
}

// Topology is the machine's online NUMA nodes, in increasing ID.
type Topology struct {
	Nodes []Node `json:"nodes"`
}

// ReadTopology reads the online nodes under root, which is SysNodeDir on a
// live system ("" means SysNodeDir) or a copy of it in tests: the node
// list from root/online, and from each root/nodeN its cpulist, meminfo and
// distance.
func ReadTopology(root string) (Topology, error) {
	if root == "" {
		root = SysNodeDir
	}
	b, err := os.ReadFile(filepath.Join(root, "online"))
	if err != nil {
		return Topology{}, fmt.Errorf("read numa topology: %w", err)
	}
	ids, err := ParseCPUList(string(b))
	if err != nil {
		return Topology{}, fmt.Errorf("read numa topology: online nodes: %w", err)
	}
	if len(ids) == 0 {
		return Topology{}, fmt.Errorf("read numa topology: %s lists no online node", filepath.Join(root, "online"))
	}
	t := Topology{Nodes: make([]Node, 0, len(ids))}
	for _, id := range ids {
		if id > MaxNode {
			return Topology{}, fmt.Errorf("read numa topology: node %d is above %d", id, MaxNode)
		}
		n, err := readNode(root, id, ids)
		if err != nil {
			return Topology{}, fmt.Errorf("read numa topology: %w", err)
		}
		t.Nodes = append(t.Nodes, n)
	}
	return t, nil
}

func readNode(root string, id int, online []int) (Node, error) {
	dir := filepath.Join(root, "node"+strconv.Itoa(id))
	n := Node{ID: id}
	b, err := os.ReadFile(filepath.Join(dir, "cpulist"))
	if err != nil {
		return Node{}, fmt.Errorf("node %d: %w", id, err)
	}
	if n.CPUs, err = ParseCPUList(string(b)); err != nil {
		return Node{}, fmt.Errorf("node %d: %w", id, err)
	}
	if b, err = os.ReadFile(filepath.Join(dir, "meminfo")); err != nil {
		return Node{}, fmt.Errorf("node %d: %w", id, err)
	}
	mi, err := ParseNodeMeminfo(b)
	if err != nil {
		return Node{}, fmt.Errorf("node %d: meminfo: %w", id, err)
	}
	n.MemTotal, n.MemFree = mi["MemTotal"], mi["MemFree"]
	if b, err = os.ReadFile(filepath.Join(dir, "distance")); err != nil {
		return Node{}, fmt.Errorf("node %d: %w", id, err)
	}
	if n.Distance, err = ParseDistance(string(b), online); err != nil {
		return Node{}, fmt.Errorf("node %d: %w", id, err)
	}
	return n, nil
}

// ParseNodeMeminfo reads a node's meminfo ("Node 0 MemFree:  4015216 kB"
// per line) into bytes by field name. Lines without a kB unit (the
// HugePages_* counts) keep their plain number.
func ParseNodeMeminfo(b []byte) (map[string]uint64, error) {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 4 || f[0] != "Node" || !strings.HasSuffix(f[2], ":") {
			return nil, fmt.Errorf("line %q is not \"Node N Field: value [kB]\"", sc.Text())
		}
		v, err := strconv.ParseUint(f[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		switch {
		case len(f) == 5 && f[4] == "kB":
			if v > ^uint64(0)>>10 {
				return nil, fmt.Errorf("line %q: value overflows", sc.Text())
			}
			v <<= 10
		case len(f) != 4:
			return nil, fmt.Errorf("line %q: unknown unit", sc.Text())
		}
		out[strings.TrimSuffix(f[2], ":")] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if _, ok := out["MemTotal"]; !ok {
		return nil, errors.New("no MemTotal line")
	}
	return out, nil
}

// ParseDistance reads a node's distance line, whose k-th number is the
// distance to the k-th online node, into a map by node ID.
func ParseDistance(s string, online []int) (map[int]int, error) {
	f := strings.Fields(s)
	if len(f) != len(online) {
		return nil, fmt.Errorf("distance %q: %d numbers for %d online nodes", strings.TrimSpace(s), len(f), len(online))
	}
	out := make(map[int]int, len(f))
	for k, x := range f {
		d, err := strconv.Atoi(x)
		if err != nil || d < 0 || d > 255 {
			return nil, fmt.Errorf("distance %q: %q is not a distance (0-255)", strings.TrimSpace(s), x)
		}
		out[online[k]] = d
	}
	return out, nil
}

// Node returns the node with the given ID.
func (t Topology) Node(id int) (Node, bool) {
	for _, n := range t.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return Node{}, false
}

// IDs returns the node IDs, in order.
func (t Topology) IDs() []int {
	out := make([]int, len(t.Nodes))
	for i, n := range t.Nodes {
		out[i] = n.ID
	}
	return out
}

// NodeOfCPU returns the node a CPU belongs to, or -1.
func (t Topology) NodeOfCPU(cpu int) int {
	for _, n := range t.Nodes {
		if _, ok := slices.BinarySearch(n.CPUs, cpu); ok {
			return n.ID
		}
	}
	return -1
}

// HasCPUs reports whether the node has online CPUs.
func HasCPUs(n Node) bool { return len(n.CPUs) > 0 }

// HasMemory reports whether the node has memory.
func HasMemory(n Node) bool { return n.MemTotal > 0 }

// Farthest returns the node other than from that keep accepts and that is
// farthest from from by the distance table; ties go to the lower ID, and a
// node missing from the table counts as nearest. It fails when from is not
// a node or no other node is accepted.
func (t Topology) Farthest(from int, keep func(Node) bool) (int, error) {
	src, ok := t.Node(from)
	if !ok {
		return -1, fmt.Errorf("node %d is not online (online: %s)", from, FormatCPUList(t.IDs()))
	}
	best, bestD := -1, -1
	for _, n := range t.Nodes {
		if n.ID == from || (keep != nil && !keep(n)) {
			continue
		}
		if d := src.Distance[n.ID]; d > bestD {
			best, bestD = n.ID, d
		}
	}
	if best < 0 {
		return -1, fmt.Errorf("no node other than %d qualifies (online: %s)", from, FormatCPUList(t.IDs()))
	}
	return best, nil
}
