package topo

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
