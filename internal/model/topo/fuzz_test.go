package topo

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.txt")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X \n")
	key := regexp.MustCompile(`^(\d+)-(\d+)$`)
	f.Fuzz(func(t *testing.T, in string) {
		m, err := Parse(strings.NewReader(in))
		if err != nil {
			if m != nil {
				t.Errorf("Parse returned a matrix with error %v", err)
			}
			if !strings.HasPrefix(err.Error(), "topo: ") {
				t.Errorf("error %q does not start with topo:", err)
			}
			return
		}
		n := len(m.GPUs)
		if n == 0 {
			t.Fatal("no GPUs without an error")
		}
		if len(m.Links) != n*(n-1)/2 {
			t.Errorf("%d links for %d GPUs", len(m.Links), n)
		}
		for i, g := range m.GPUs {
			if g.Index != i {
				t.Errorf("GPUs[%d].Index = %d", i, g.Index)
			}
			if g.NUMANodes != nil && (len(g.NUMANodes) < 2 || g.NUMANode == nil || *g.NUMANode != g.NUMANodes[0]) {
				t.Errorf("GPU%d: numa_node %v, numa_nodes %v", i, g.NUMANode, g.NUMANodes)
			}
		}
		for k, v := range m.Links {
			mm := key.FindStringSubmatch(k)
			if mm == nil {
				t.Fatalf("link key %q", k)
			}
			var i, j int
			fmt.Sscan(mm[1], &i)
			fmt.Sscan(mm[2], &j)
			if i >= j || j >= n || v == "" || v == "X" {
				t.Errorf("link %s = %q with %d GPUs", k, v, n)
			}
		}
	})
}

// FuzzNodeList checks that ParseNodeList's result is ascending and within
// bounds, and that FormatNodeList writes it back to a list that parses to
// the same nodes.
func FuzzNodeList(f *testing.F) {
	for _, s := range []string{"0", "0,3-9,11-17", "1,19-25,27-33", "0-1023", "5-4", "0,,1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		nodes, err := ParseNodeList(s)
		if err != nil {
			return
		}
		if len(nodes) == 0 {
			t.Fatalf("ParseNodeList(%q): no nodes, no error", s)
		}
		for i, n := range nodes {
			if n < 0 || n >= maxNode || i > 0 && n <= nodes[i-1] {
				t.Fatalf("ParseNodeList(%q) = %v: not ascending within [0,%d)", s, nodes, maxNode)
			}
		}
		back, err := ParseNodeList(FormatNodeList(nodes))
		if err != nil || !slices.Equal(back, nodes) {
			t.Fatalf("round trip of %v via %q = %v, %v", nodes, FormatNodeList(nodes), back, err)
		}
	})
}
