package numa

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestReadTopologyCaptured(t *testing.T) {
	t.Parallel()
	topo, err := ReadTopology("testdata/onenode")
	if err != nil {
		t.Fatal(err)
	}
	if got := topo.IDs(); !slices.Equal(got, []int{0}) {
		t.Fatalf("nodes %v, want [0]", got)
	}
	n := topo.Nodes[0]
	if !slices.Equal(n.CPUs, []int{0, 1}) {
		t.Errorf("cpus %v, want [0 1]", n.CPUs)
	}
	// From testdata/onenode/node0/meminfo: 5990176 kB and 4737308 kB.
	if n.MemTotal != 5990176<<10 || n.MemFree != 4737308<<10 {
		t.Errorf("memory total %d free %d, want %d and %d", n.MemTotal, n.MemFree, 5990176<<10, 4737308<<10)
	}
	if n.Distance[0] != 10 || len(n.Distance) != 1 {
		t.Errorf("distance %v, want map[0:10]", n.Distance)
	}
	if _, err := topo.Farthest(0, HasMemory); err == nil {
		t.Error("Farthest found a second node on a one-node machine")
	}
}

// TestReadTopologyLive reads this machine's own tree and checks it
// against what the scheduler says: every CPU this process may use is on
// some node.
func TestReadTopologyLive(t *testing.T) {
	t.Parallel()
	topo, err := ReadTopology("")
	if err != nil {
		t.Fatal(err)
	}
	cpus, err := Affinity(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cpus {
		if topo.NodeOfCPU(c) < 0 {
			t.Errorf("cpu %d of this process is on no node of %+v", c, topo.IDs())
		}
	}
	if len(cpus) > runtime.NumCPU() {
		t.Errorf("affinity %v has more cpus than runtime.NumCPU %d", cpus, runtime.NumCPU())
	}
	var mem uint64
	for _, n := range topo.Nodes {
		mem += n.MemTotal
	}
	if mem == 0 {
		t.Error("no node has memory")
	}
}

// writeTree builds a node tree in a temporary directory: files maps a
// path under the root to its content.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func meminfo(node, totalKB, freeKB string) string {
	return "Node " + node + " MemTotal:       " + totalKB + " kB\nNode " + node + " MemFree:        " + freeKB +
		" kB\nNode " + node + " HugePages_Total:     0\n"
}

// twoSockets is a two-socket layout in the shape of a DGX H100's.
func twoSockets() map[string]string {
	return map[string]string{
		"online":          "0-1\n",
		"node0/cpulist":   "0-55,112-167\n",
		"node0/meminfo":   meminfo("0", "1056561896", "1000000000"),
		"node0/distance":  "10 21\n",
		"node1/cpulist":   "56-111,168-223\n",
		"node1/meminfo":   meminfo("1", "1056919788", "900000000"),
		"node1/distance":  "21 10\n",
		"node2/cpulist":   "not read: node 2 is offline\n",
		"node2/distance2": "",
	}
}

func TestReadTopologyLayouts(t *testing.T) {
	t.Parallel()
	withMemOnly := twoSockets()
	withMemOnly["online"] = "0-2"
	withMemOnly["node0/distance"] = "10 21 14"
	withMemOnly["node1/distance"] = "21 10 24"
	withMemOnly["node2/cpulist"] = "\n"
	withMemOnly["node2/meminfo"] = meminfo("2", "268435456", "268435456")
	withMemOnly["node2/distance"] = "14 24 10"
	sparse := map[string]string{
		"online":         "0,2\n",
		"node0/cpulist":  "0-3",
		"node0/meminfo":  meminfo("0", "1024", "512"),
		"node0/distance": "10 20",
		"node2/cpulist":  "4-7",
		"node2/meminfo":  meminfo("2", "1024", "512"),
		"node2/distance": "20 10",
	}
	badDistance := twoSockets()
	badDistance["node1/distance"] = "21\n"
	noMeminfo := twoSockets()
	delete(noMeminfo, "node1/meminfo")
	cases := []struct {
		name  string
		files map[string]string
		ids   []int
		// farthest[i] is Farthest(ids[i], HasCPUs), -1 for an error.
		farthestCPU []int
		farthestMem []int
		err         string
	}{
		{name: "two sockets", files: twoSockets(), ids: []int{0, 1}, farthestCPU: []int{1, 0}, farthestMem: []int{1, 0}},
		{name: "memory-only third node", files: withMemOnly, ids: []int{0, 1, 2},
			farthestCPU: []int{1, 0, 1}, farthestMem: []int{1, 2, 1}},
		{name: "sparse node numbers", files: sparse, ids: []int{0, 2}, farthestCPU: []int{2, 0}, farthestMem: []int{2, 0}},
		{name: "distance row too short", files: badDistance, err: "1 numbers for 2 online nodes"},
		{name: "meminfo missing", files: noMeminfo, err: "node 1"},
		{name: "no online file", files: map[string]string{"node0/cpulist": "0"}, err: "online"},
		{name: "nothing online", files: map[string]string{"online": "\n"}, err: "no online node"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			topo, err := ReadTopology(writeTree(t, c.files))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ReadTopology: %v, want an error with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(topo.IDs(), c.ids) {
				t.Fatalf("nodes %v, want %v", topo.IDs(), c.ids)
			}
			for i, id := range c.ids {
				if got, _ := topo.Farthest(id, HasCPUs); got != c.farthestCPU[i] {
					t.Errorf("Farthest(%d, HasCPUs) = %d, want %d", id, got, c.farthestCPU[i])
				}
				if got, _ := topo.Farthest(id, HasMemory); got != c.farthestMem[i] {
					t.Errorf("Farthest(%d, HasMemory) = %d, want %d", id, got, c.farthestMem[i])
				}
			}
		})
	}
}

func TestNodeOfCPU(t *testing.T) {
	t.Parallel()
	topo, err := ReadTopology(writeTree(t, twoSockets()))
	if err != nil {
		t.Fatal(err)
	}
	for cpu, want := range map[int]int{0: 0, 55: 0, 56: 1, 111: 1, 112: 0, 223: 1, 224: -1} {
		if got := topo.NodeOfCPU(cpu); got != want {
			t.Errorf("NodeOfCPU(%d) = %d, want %d", cpu, got, want)
		}
	}
	if _, err := topo.Farthest(5, nil); err == nil {
		t.Error("Farthest from a node that is not online succeeded")
	}
}

func TestParseNodeMeminfo(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/onenode/node0/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseNodeMeminfo(b)
	if err != nil {
		t.Fatal(err)
	}
	if m["MemUsed"] != 1252868<<10 || m["HugePages_Total"] != 0 {
		t.Errorf("MemUsed %d HugePages_Total %d, want %d and 0", m["MemUsed"], m["HugePages_Total"], 1252868<<10)
	}
	for _, bad := range []string{"Node 0 MemTotal: x kB", "MemTotal: 1 kB", "Node 0 MemTotal: 1 MB", "Node 0 MemFree: 1 kB",
		"Node 0 MemTotal: 18446744073709551615 kB"} {
		if _, err := ParseNodeMeminfo([]byte(bad)); err == nil {
			t.Errorf("ParseNodeMeminfo(%q) succeeded", bad)
		}
	}
}

func FuzzParseNodeMeminfo(f *testing.F) {
	if b, err := os.ReadFile("testdata/onenode/node0/meminfo"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(meminfo("1", "10", "5")))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseNodeMeminfo(b)
		if err == nil && m == nil {
			t.Fatal("nil map without an error")
		}
	})
}

func FuzzParseDistance(f *testing.F) {
	f.Add("10 21\n", 2)
	f.Add("10", 1)
	f.Add("10 21 14", 2)
	f.Fuzz(func(t *testing.T, s string, n int) {
		online := seq(0, min(max(n, 0), 64)-1)
		d, err := ParseDistance(s, online)
		if err != nil {
			return
		}
		if len(d) != len(online) {
			t.Fatalf("ParseDistance(%q, %v) = %v: one entry per online node expected", s, online, d)
		}
	})
}
