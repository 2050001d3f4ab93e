package engine

import (
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

func TestMatches(t *testing.T) {
	t.Parallel()
	gpu2 := inventory.Ref{Kind: catalog.ScopeGPU, Node: "node-a", GPU: 2, UUID: "GPU-2", PCI: "00000000:C3:00.0"}
	nodeA := inventory.Ref{Kind: catalog.ScopeNode, Node: "node-a"}
	job := inventory.Ref{Kind: catalog.ScopeJob, Job: "train"}
	one := inventory.Inventory{
		Nodes: []inventory.Node{{Name: "node-a"}},
		Jobs:  []inventory.Job{{Name: "train", Ranks: []inventory.Rank{{Node: "node-a", GPU: 2}}}},
	}
	two := inventory.Inventory{Nodes: []inventory.Node{{Name: "node-a"}, {Name: "node-b"}}}
	tests := []struct {
		name string
		s    probe.Subject
		r    inventory.Ref
		inv  inventory.Inventory
		want bool
	}{
		{"empty subject matches anything", probe.Subject{}, gpu2, one, true},
		{"same node and index", probe.Subject{Node: "node-a", GPU: "2"}, gpu2, one, true},
		{"same node, other index", probe.Subject{Node: "node-a", GPU: "1"}, gpu2, one, false},
		{"other node, same index", probe.Subject{Node: "node-b", GPU: "2"}, gpu2, two, false},
		{"node subject on a gpu target", probe.Subject{Node: "node-a"}, gpu2, one, true},
		{"gpu subject on a node target", probe.Subject{Node: "node-a", GPU: "5"}, nodeA, one, true},
		{"kernel-form bus id", probe.Subject{Node: "node-a", PCI: "0000:c3:00"}, gpu2, one, true},
		{"job with a rank on the gpu", probe.Subject{Job: "train"}, gpu2, one, true},
		{"job subject on a job target", probe.Subject{Job: "train"}, job, one, true},
		{"other job", probe.Subject{Job: "eval"}, job, one, false},
		{"no node: uuid decides", probe.Subject{GPU: "2", UUID: "GPU-2"}, gpu2, two, true},
		{"no node: other uuid", probe.Subject{GPU: "2", UUID: "GPU-9"}, gpu2, one, false},
		{"no node: index on a one-node inventory", probe.Subject{GPU: "2"}, gpu2, one, true},
		{"no node: other index on a one-node inventory", probe.Subject{GPU: "3"}, gpu2, one, false},
		{"no node: index is ambiguous across nodes", probe.Subject{GPU: "2"}, gpu2, two, false},
		{"no node: bus id on a one-node inventory", probe.Subject{PCI: "00000000:C3:00.0"}, gpu2, one, true},
		{"no node: any gpu of the one node on a node target", probe.Subject{GPU: "7"}, nodeA, one, true},
		{"no node: a gpu is not a job", probe.Subject{GPU: "2"}, job, one, false},
		{"scrape job on an exporter's gpu series: uuid decides", probe.Subject{Job: "gpuchaos-agent", GPU: "2", UUID: "GPU-2"}, gpu2, two, true},
		{"scrape job on an exporter's gpu series: other uuid", probe.Subject{Job: "gpuchaos-agent", GPU: "2", UUID: "GPU-9"}, gpu2, one, false},
		{"scrape job with a node and gpu", probe.Subject{Job: "dcgm", Node: "node-a", GPU: "2"}, gpu2, two, true},
		{"unknown job alone concerns nothing", probe.Subject{Job: "eval"}, gpu2, one, false},
		{"known job on another gpu stays a job", probe.Subject{Job: "train", GPU: "5"}, gpu2, one, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Matches(tc.s, tc.r, tc.inv); got != tc.want {
				t.Errorf("Matches(%+v, %+v) = %v, want %v", tc.s, tc.r, got, tc.want)
			}
		})
	}
}
