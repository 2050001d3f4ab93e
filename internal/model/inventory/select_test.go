package inventory

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// twinInventory is the twin's default cluster: gpu-node-0 and gpu-node-1
// with 8 H200 each and job llm-pretrain of 16 ranks, rank r on node r/8,
// GPU r%8.
func twinInventory() Inventory {
	var inv Inventory
	for n := range 2 {
		node := Node{Name: fmt.Sprintf("gpu-node-%d", n), Labels: map[string]string{"rack": fmt.Sprintf("r%d", n), "gpu": "h200"}}
		for g := range 8 {
			node.GPUs = append(node.GPUs, GPU{
				Index: g,
				UUID:  fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", n, g),
				PCI:   fmt.Sprintf("00000000:%02X:00.0", 0x18+0x10*g),
				Model: "NVIDIA H200",
			})
		}
		inv.Nodes = append(inv.Nodes, node)
	}
	job := Job{Name: "llm-pretrain"}
	for r := range 16 {
		job.Ranks = append(job.Ranks, Rank{Rank: r, Node: fmt.Sprintf("gpu-node-%d", r/8), GPU: r % 8})
	}
	inv.Jobs = append(inv.Jobs, job)
	return inv
}

// richInventory adds a GPU-less login node and a small second job on
// gpu-node-1, GPUs 6 and 7, to exercise the AND of selector fields.
func richInventory() Inventory {
	inv := twinInventory()
	inv.Nodes = append(inv.Nodes, Node{Name: "login-0", Labels: map[string]string{"role": "login"}})
	inv.Jobs = append(inv.Jobs, Job{Name: "eval", Ranks: []Rank{{Rank: 0, Node: "gpu-node-1", GPU: 6}, {Rank: 1, Node: "gpu-node-1", GPU: 7}}})
	return inv
}

// short renders refs compactly for comparison: node/gpu, node, job#rank@node/gpu, job.
func short(refs []Ref) string {
	out := make([]string, len(refs))
	for i, r := range refs {
		switch r.Kind {
		case catalog.ScopeGPU:
			out[i] = fmt.Sprintf("%s/%d", strings.TrimPrefix(r.Node, "gpu-node-"), r.GPU)
		case catalog.ScopeNode:
			out[i] = r.Node
		case catalog.ScopeRank:
			out[i] = fmt.Sprintf("%s#%d@%s/%d", r.Job, r.Rank, strings.TrimPrefix(r.Node, "gpu-node-"), r.GPU)
		case catalog.ScopeJob:
			out[i] = r.Job
		}
	}
	return strings.Join(out, " ")
}

func TestSelectScopes(t *testing.T) {
	t.Parallel()
	inv := richInventory()
	uuid15 := inv.Nodes[1].GPUs[5].UUID
	tests := []struct {
		name  string
		sel   v1alpha1.Selector
		scope catalog.Scope
		want  string
	}{
		{"gpus of a node", v1alpha1.Selector{Nodes: []string{"gpu-node-0"}}, catalog.ScopeGPU, "0/0 0/1 0/2 0/3 0/4 0/5 0/6 0/7"},
		{"gpu index on every node", v1alpha1.Selector{GPUs: []string{"3"}}, catalog.ScopeGPU, "0/3 1/3"},
		{"gpu index and node", v1alpha1.Selector{Nodes: []string{"gpu-node-1"}, GPUs: []string{"3", "0"}}, catalog.ScopeGPU, "1/0 1/3"},
		{"gpu uuid", v1alpha1.Selector{GPUs: []string{uuid15}}, catalog.ScopeGPU, "1/5"},
		{"node labels", v1alpha1.Selector{NodeSelector: map[string]string{"rack": "r1"}, GPUs: []string{"1", "2"}}, catalog.ScopeGPU, "1/1 1/2"},
		{"gpus of a job", v1alpha1.Selector{Jobs: []string{"eval"}}, catalog.ScopeGPU, "1/6 1/7"},
		{"gpus of ranks", v1alpha1.Selector{Jobs: []string{"llm-pretrain"}, Ranks: []int{12, 5}}, catalog.ScopeGPU, "0/5 1/4"},
		{"node of a job", v1alpha1.Selector{Jobs: []string{"eval"}}, catalog.ScopeNode, "gpu-node-1"},
		{"nodes with a gpu index", v1alpha1.Selector{GPUs: []string{"3"}}, catalog.ScopeNode, "gpu-node-0 gpu-node-1"},
		{"named node without gpus", v1alpha1.Selector{Nodes: []string{"login-0"}}, catalog.ScopeNode, "login-0"},
		{"labelled nodes", v1alpha1.Selector{NodeSelector: map[string]string{"gpu": "h200"}}, catalog.ScopeNode, "gpu-node-0 gpu-node-1"},
		{"ranks on gpus of a node", v1alpha1.Selector{Jobs: []string{"llm-pretrain"}, Nodes: []string{"gpu-node-1"}, GPUs: []string{"0", "1"}}, catalog.ScopeRank,
			"llm-pretrain#8@1/0 llm-pretrain#9@1/1"},
		{"ranks of every job on a node", v1alpha1.Selector{Nodes: []string{"gpu-node-1"}, GPUs: []string{"5", "6", "7"}}, catalog.ScopeRank,
			"llm-pretrain#13@1/5 eval#0@1/6 llm-pretrain#14@1/6 eval#1@1/7 llm-pretrain#15@1/7"},
		{"named ranks", v1alpha1.Selector{Jobs: []string{"llm-pretrain"}, Ranks: []int{15, 0}}, catalog.ScopeRank, "llm-pretrain#0@0/0 llm-pretrain#15@1/7"},
		{"jobs on a node", v1alpha1.Selector{Nodes: []string{"gpu-node-0"}}, catalog.ScopeJob, "llm-pretrain"},
		{"jobs on a gpu", v1alpha1.Selector{Nodes: []string{"gpu-node-1"}, GPUs: []string{"7"}}, catalog.ScopeJob, "eval llm-pretrain"},
		{"named job", v1alpha1.Selector{Jobs: []string{"eval"}}, catalog.ScopeJob, "eval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.sel.Mode = v1alpha1.ModeAll
			refs, err := Select(inv, tc.sel, tc.scope, 1)
			if err != nil {
				t.Fatalf("Select: %v", err)
			}
			if got := short(refs); got != tc.want {
				t.Errorf("Select\n got: %s\nwant: %s", got, tc.want)
			}
			for _, r := range refs {
				if r.Kind != tc.scope {
					t.Errorf("ref %+v has kind %s, want %s", r, r.Kind, tc.scope)
				}
			}
		})
	}
}

// TestSelectNodesOfCPURanks: on Kubernetes no rank has a GPU index (the
// API does not say which GPU a pod got), yet a node-scope fault narrowed
// by jobs or ranks must reach the nodes those ranks run on, and only them.
func TestSelectNodesOfCPURanks(t *testing.T) {
	t.Parallel()
	inv := Inventory{
		Nodes: []Node{{Name: "n1", GPUs: []GPU{{Index: 0}}}, {Name: "n2"}, {Name: "n3", GPUs: []GPU{{Index: 0}}}},
		Jobs: []Job{{Name: "llm", Ranks: []Rank{{Rank: 0, Node: "n1", GPU: NoGPU}, {Rank: 1, Node: "n1", GPU: NoGPU}, {Rank: 2, Node: "n2", GPU: NoGPU}}},
			{Name: "other", Ranks: []Rank{{Rank: 0, Node: "n3", GPU: NoGPU}}}},
	}
	tests := []struct {
		name string
		sel  v1alpha1.Selector
		want string
	}{
		{"a job's nodes", v1alpha1.Selector{Jobs: []string{"llm"}}, "n1 n2"},
		{"a rank's node", v1alpha1.Selector{Jobs: []string{"llm"}, Ranks: []int{2}}, "n2"},
		{"ranks of any job", v1alpha1.Selector{Ranks: []int{0}}, "n1 n3"},
		{"a job and a node", v1alpha1.Selector{Jobs: []string{"llm"}, Nodes: []string{"n2"}}, "n2"},
	}
	for _, tc := range tests {
		tc.sel.Mode = v1alpha1.ModeAll
		refs, err := Select(inv, tc.sel, catalog.ScopeNode, 1)
		if err != nil {
			t.Errorf("%s: Select: %v", tc.name, err)
			continue
		}
		if got := short(refs); got != tc.want {
			t.Errorf("%s: Select\n got: %s\nwant: %s", tc.name, got, tc.want)
		}
	}
	// A selector naming GPUs cannot mean a rank without one.
	if refs, err := Select(inv, v1alpha1.Selector{Mode: v1alpha1.ModeAll, Jobs: []string{"llm"}, GPUs: []string{"0"}}, catalog.ScopeNode, 1); err == nil {
		t.Errorf("jobs and GPUs over CPU ranks selected %s, want no node", short(refs))
	}
}

// TestSelectRankRefIsFilled: an injector for a rank fault needs the GPU's
// identity without another inventory lookup.
func TestSelectRankRefIsFilled(t *testing.T) {
	t.Parallel()
	inv := twinInventory()
	refs, err := Select(inv, v1alpha1.Selector{Jobs: []string{"llm-pretrain"}, Ranks: []int{11}, Mode: v1alpha1.ModeOne}, catalog.ScopeRank, 7)
	if err != nil {
		t.Fatal(err)
	}
	g := inv.Nodes[1].GPUs[3]
	want := Ref{Kind: catalog.ScopeRank, Node: "gpu-node-1", GPU: 3, UUID: g.UUID, PCI: g.PCI, Job: "llm-pretrain", Rank: 11}
	if len(refs) != 1 || refs[0] != want {
		t.Errorf("Select = %+v, want [%+v]", refs, want)
	}
}

func TestSelectErrors(t *testing.T) {
	t.Parallel()
	inv := richInventory()
	all := v1alpha1.ModeAll
	tests := []struct {
		name  string
		sel   v1alpha1.Selector
		scope catalog.Scope
		want  string
	}{
		{"unknown node", v1alpha1.Selector{Nodes: []string{"gpu-node-0", "gpu-node-9"}, Mode: all}, catalog.ScopeGPU, `spec.selector.nodes[1]: node "gpu-node-9" is not in the inventory`},
		{"unknown gpu uuid", v1alpha1.Selector{GPUs: []string{"GPU-dead"}, Mode: all}, catalog.ScopeGPU, `spec.selector.gpus[0]: GPU "GPU-dead" is not on the inventory`},
		{"gpu index beyond the node", v1alpha1.Selector{Nodes: []string{"gpu-node-0"}, GPUs: []string{"1", "8"}, Mode: all}, catalog.ScopeGPU, `spec.selector.gpus[1]: GPU "8" is not on the selected nodes`},
		{"gpu of another node", v1alpha1.Selector{Nodes: []string{"gpu-node-0"}, GPUs: []string{inv.Nodes[1].GPUs[0].UUID}, Mode: all}, catalog.ScopeGPU, "is not on the selected nodes"},
		{"unknown job", v1alpha1.Selector{Jobs: []string{"llm-finetune"}, Mode: all}, catalog.ScopeJob, `spec.selector.jobs[0]: job "llm-finetune" is not in the inventory`},
		{"unknown rank", v1alpha1.Selector{Jobs: []string{"eval"}, Ranks: []int{0, 5}, Mode: all}, catalog.ScopeRank, "spec.selector.ranks[1]: rank 5 is not a rank of job eval"},
		{"matches no gpu", v1alpha1.Selector{NodeSelector: map[string]string{"rack": "r9"}, Mode: all}, catalog.ScopeGPU, "spec.selector: matches no gpu"},
		{"gpu-less node has no gpu", v1alpha1.Selector{Nodes: []string{"login-0"}, Mode: all}, catalog.ScopeGPU, "spec.selector: matches no gpu"},
		{"job not on the gpus", v1alpha1.Selector{Jobs: []string{"eval"}, Nodes: []string{"gpu-node-0"}, Mode: all}, catalog.ScopeRank, "spec.selector: matches no rank"},
		{"fixed larger than the matches", v1alpha1.Selector{Nodes: []string{"gpu-node-0"}, Mode: v1alpha1.ModeFixed, Value: 9}, catalog.ScopeGPU,
			"spec.selector.value: mode fixed asks for 9 gpus but the selector matches 8"},
		{"fixed zero", v1alpha1.Selector{Nodes: []string{"gpu-node-0"}, Mode: v1alpha1.ModeFixed}, catalog.ScopeGPU, "spec.selector.value: mode fixed needs a value of at least 1, got 0"},
		{"percent zero", v1alpha1.Selector{Nodes: []string{"gpu-node-0"}, Mode: v1alpha1.ModePercent}, catalog.ScopeGPU, "spec.selector.value: mode percent needs a value from 1 to 100, got 0"},
		{"no mode", v1alpha1.Selector{Nodes: []string{"gpu-node-0"}}, catalog.ScopeGPU, "spec.selector.mode: required"},
		{"unknown mode", v1alpha1.Selector{Nodes: []string{"gpu-node-0"}, Mode: "most"}, catalog.ScopeGPU, `spec.selector.mode: "most" is not a selector mode`},
		{"unknown scope", v1alpha1.Selector{Nodes: []string{"gpu-node-0"}, Mode: all}, "rack", `select targets: unknown scope "rack"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			refs, err := Select(inv, tc.sel, tc.scope, 1)
			if err == nil {
				t.Fatalf("Select = %s, want error %q", short(refs), tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
}

func TestSelectModes(t *testing.T) {
	t.Parallel()
	inv := twinInventory()
	both := []string{"gpu-node-0", "gpu-node-1"}
	tests := []struct {
		name  string
		mode  v1alpha1.SelectorMode
		value int
		want  int
	}{
		{"all", v1alpha1.ModeAll, 0, 16},
		{"one", v1alpha1.ModeOne, 0, 1},
		{"fixed 3", v1alpha1.ModeFixed, 3, 3},
		{"fixed as many as match", v1alpha1.ModeFixed, 16, 16},
		{"percent 25 of 16 is 4", v1alpha1.ModePercent, 25, 4},
		{"percent 30 of 16 rounds 4.8 down to 4", v1alpha1.ModePercent, 30, 4},
		{"percent 1 of 16 is at least 1", v1alpha1.ModePercent, 1, 1},
		{"percent 99 of 16 rounds 15.84 down to 15", v1alpha1.ModePercent, 99, 15},
		{"percent 100", v1alpha1.ModePercent, 100, 16},
	}
	all, err := Select(inv, v1alpha1.Selector{Nodes: both, Mode: v1alpha1.ModeAll}, catalog.ScopeGPU, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(20) {
				refs, err := Select(inv, v1alpha1.Selector{Nodes: both, Mode: tc.mode, Value: tc.value}, catalog.ScopeGPU, seed)
				if err != nil {
					t.Fatal(err)
				}
				if len(refs) != tc.want {
					t.Fatalf("seed %d: %d refs, want %d", seed, len(refs), tc.want)
				}
				if !slices.IsSortedFunc(refs, compareRefs) {
					t.Errorf("seed %d: refs not sorted: %s", seed, short(refs))
				}
				for i, r := range refs {
					if !slices.Contains(all, r) {
						t.Errorf("seed %d: %+v is not a match", seed, r)
					}
					if i > 0 && refs[i-1] == r {
						t.Errorf("seed %d: %+v chosen twice", seed, r)
					}
				}
			}
		})
	}
}

func TestSelectDeterministic(t *testing.T) {
	t.Parallel()
	inv := twinInventory()
	sel := v1alpha1.Selector{Nodes: []string{"gpu-node-0", "gpu-node-1"}, Mode: v1alpha1.ModeFixed, Value: 3}

	// The same inputs, in any inventory order, give the same targets.
	shuffled := twinInventory()
	slices.Reverse(shuffled.Nodes)
	for i := range shuffled.Nodes {
		slices.Reverse(shuffled.Nodes[i].GPUs)
	}
	distinct := map[string]bool{}
	for seed := range uint64(50) {
		a, err := Select(inv, sel, catalog.ScopeGPU, seed)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Select(inv, sel, catalog.ScopeGPU, seed)
		c, _ := Select(shuffled, sel, catalog.ScopeGPU, seed)
		if short(a) != short(b) || short(a) != short(c) {
			t.Fatalf("seed %d: %s, %s, %s differ", seed, short(a), short(b), short(c))
		}
		distinct[short(a)] = true
	}
	// The seed matters: 50 seeds choosing 3 of 16 must not all agree.
	if len(distinct) < 10 {
		t.Errorf("50 seeds gave only %d distinct choices", len(distinct))
	}
}

// TestSelectOneIsUniform: mode one over many seeds reaches every GPU about
// equally often, so no GPU is always (or never) the victim.
func TestSelectOneIsUniform(t *testing.T) {
	t.Parallel()
	inv := twinInventory()
	counts := map[string]int{}
	const runs = 3200
	for seed := range uint64(runs) {
		refs, err := Select(inv, v1alpha1.Selector{Nodes: []string{"gpu-node-0", "gpu-node-1"}, Mode: v1alpha1.ModeOne}, catalog.ScopeGPU, seed)
		if err != nil {
			t.Fatal(err)
		}
		counts[short(refs)]++
	}
	if len(counts) != 16 {
		t.Fatalf("mode one reached %d of 16 GPUs", len(counts))
	}
	for gpu, n := range counts {
		// Expected 200 each; 120..280 is over five standard deviations.
		if n < 120 || n > 280 {
			t.Errorf("GPU %s chosen %d times of %d, want about 200", gpu, n, runs)
		}
	}
}

func TestCheckBlastRadius(t *testing.T) {
	t.Parallel()
	inv := twinInventory()
	gpus := func(node string, idx ...int) []Ref {
		var out []Ref
		for _, i := range idx {
			out = append(out, Ref{Kind: catalog.ScopeGPU, Node: node, GPU: i})
		}
		return out
	}
	sixteen := append(gpus("gpu-node-0", 0, 1, 2, 3, 4, 5, 6, 7), gpus("gpu-node-1", 0, 1, 2, 3, 4, 5, 6, 7)...)
	tests := []struct {
		name string
		refs []Ref
		br   v1alpha1.BlastRadius
		want string // "" means within the caps
	}{
		{"one gpu under the defaults", gpus("gpu-node-0", 3), v1alpha1.BlastRadius{}, ""},
		{"a full node under the defaults", gpus("gpu-node-0", 0, 1, 2, 3, 4, 5, 6, 7), v1alpha1.BlastRadius{}, ""},
		{"over maxGPUs", sixteen, v1alpha1.BlastRadius{MaxNodes: 2, MaxGPUs: 8}, "spec.blastRadius: selection touches 16 GPUs on 2 nodes, over the cap maxGPUs=8"},
		{"over both defaults", sixteen, v1alpha1.BlastRadius{}, "spec.blastRadius: selection touches 16 GPUs on 2 nodes, over the caps maxNodes=1 and maxGPUs=8"},
		{"over maxNodes only", append(gpus("gpu-node-0", 1), gpus("gpu-node-1", 1)...), v1alpha1.BlastRadius{}, "spec.blastRadius: selection touches 2 GPUs on 2 nodes, over the cap maxNodes=1"},
		{"raised caps", sixteen, v1alpha1.BlastRadius{MaxNodes: 2, MaxGPUs: 16}, ""},
		{"node refs count nodes", []Ref{{Kind: catalog.ScopeNode, Node: "gpu-node-0"}, {Kind: catalog.ScopeNode, Node: "gpu-node-1"}}, v1alpha1.BlastRadius{},
			"spec.blastRadius: selection touches 0 GPUs on 2 nodes, over the cap maxNodes=1"},
		{"ranks sharing a gpu count once", []Ref{
			{Kind: catalog.ScopeRank, Job: "a", Rank: 0, Node: "gpu-node-0", GPU: 1},
			{Kind: catalog.ScopeRank, Job: "b", Rank: 0, Node: "gpu-node-0", GPU: 1},
			{Kind: catalog.ScopeRank, Job: "b", Rank: 1, Node: "gpu-node-0", GPU: 2},
		}, v1alpha1.BlastRadius{MaxGPUs: 1}, "spec.blastRadius: selection touches 2 GPUs on 1 node, over the cap maxGPUs=1"},
		{"a job ref is counted by its footprint", Footprint(inv, []Ref{{Kind: catalog.ScopeJob, Job: "llm-pretrain"}}), v1alpha1.BlastRadius{MaxNodes: 2},
			"spec.blastRadius: selection touches 16 GPUs on 2 nodes, over the cap maxGPUs=8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckBlastRadius(tc.refs, tc.br)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckBlastRadius = %v, want nil", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("CheckBlastRadius\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
}

func TestFootprint(t *testing.T) {
	t.Parallel()
	inv := richInventory()
	refs := []Ref{
		{Kind: catalog.ScopeJob, Job: "eval"},
		{Kind: catalog.ScopeNode, Node: "login-0"},
		{Kind: catalog.ScopeJob, Job: "gone"},
	}
	got := Footprint(inv, refs)
	g6, g7 := inv.Nodes[1].GPUs[6], inv.Nodes[1].GPUs[7]
	want := []Ref{
		{Kind: catalog.ScopeRank, Job: "eval", Rank: 0, Node: "gpu-node-1", GPU: 6, UUID: g6.UUID, PCI: g6.PCI},
		{Kind: catalog.ScopeRank, Job: "eval", Rank: 1, Node: "gpu-node-1", GPU: 7, UUID: g7.UUID, PCI: g7.PCI},
		{Kind: catalog.ScopeNode, Node: "login-0"},
		{Kind: catalog.ScopeJob, Job: "gone"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Footprint\n got: %+v\nwant: %+v", got, want)
	}
}

// TestExperimentFiles runs selection and the blast-radius check on the
// shipped examples and on the over-the-cap file the CLI tests use, against
// the twin's default inventory, as the engine does before injecting.
func TestExperimentFiles(t *testing.T) {
	t.Parallel()
	examples, err := filepath.Glob("../../../examples/*.yaml")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	tests := map[string]string{"../../../api/v1alpha1/testdata/bad/blast-radius.yaml": "spec.blastRadius: selection touches 16 GPUs on 2 nodes, over the cap maxGPUs=4"}
	for _, e := range examples {
		tests[e] = ""
	}
	for path, want := range tests {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			exp, err := v1alpha1.LoadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			exp.Default()
			var checkErr error
			for _, f := range exp.Spec.Faults {
				fault, ok := catalog.Lookup(f.ID)
				if !ok {
					t.Fatalf("fault %s is not in the catalogue", f.ID)
				}
				refs, err := Select(twinInventory(), exp.Spec.Selector, fault.Scope, 42)
				if err != nil {
					t.Fatalf("Select for %s: %v", f.ID, err)
				}
				if err := CheckBlastRadius(Footprint(twinInventory(), refs), exp.Spec.BlastRadius); err != nil && checkErr == nil {
					checkErr = err
				}
			}
			got := ""
			if checkErr != nil {
				got = checkErr.Error()
			}
			if got != want {
				t.Errorf("blast radius\n got: %s\nwant: %s", got, want)
			}
		})
	}
}
