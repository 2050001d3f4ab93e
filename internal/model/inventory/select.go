package inventory

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// Select resolves a selector against the inventory into targets of the
// given scope:
//
//   - gpu: every selected GPU;
//   - node: every selected node (a node with a selected GPU, or a named or
//     label-matched node when the selector does not narrow to GPUs);
//   - rank: the ranks of the selected jobs that run on selected GPUs, with
//     Node, GPU, UUID and PCI filled from the inventory;
//   - job: the selected jobs with at least one selected rank.
//
// Selector fields combine with AND; an empty list matches everything at its
// level. Every name the selector lists must exist in the inventory.
//
// Modes one, fixed and percent choose among the matches with a PCG
// generator seeded from seed, after sorting the matches, so the same
// inventory (in any order), selector and seed always give the same targets.
// Percent takes floor(value% of the matches), at least one: rounding down
// never touches more than was asked for. Fixed asking for more targets than
// match is an error rather than a silent clamp, because the run would not
// be the experiment the file describes.
//
// The result is sorted by node name, GPU index, job and rank. Errors name
// the selector field at fault (spec.selector.nodes[1]: node "gpu-node-9" is
// not in the inventory).
func Select(inv Inventory, sel v1alpha1.Selector, scope catalog.Scope, seed uint64) ([]Ref, error) {
	if err := checkNamed(inv, sel); err != nil {
		return nil, err
	}
	m := newMatcher(inv, sel)
	var refs []Ref
	switch scope {
	case catalog.ScopeGPU:
		refs = m.gpus()
	case catalog.ScopeNode:
		refs = m.nodes()
	case catalog.ScopeRank:
		refs = m.ranks()
	case catalog.ScopeJob:
		refs = m.jobs()
	default:
		return nil, fmt.Errorf("select targets: unknown scope %q", scope)
	}
	if len(refs) == 0 {
		return nil, &v1alpha1.FieldError{Path: "spec.selector", Msg: "matches no " + string(scope)}
	}
	slices.SortFunc(refs, compareRefs)
	n, err := count(sel, len(refs), scope)
	if err != nil {
		return nil, err
	}
	if n == len(refs) {
		return refs, nil
	}
	// A partial Fisher-Yates shuffle takes n distinct refs; sorting them
	// afterwards keeps the output order independent of the draw.
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range n {
		j := i + rng.IntN(len(refs)-i)
		refs[i], refs[j] = refs[j], refs[i]
	}
	refs = refs[:n]
	slices.SortFunc(refs, compareRefs)
	return refs, nil
}

// count is how many of the matches the selector's mode takes.
func count(sel v1alpha1.Selector, matches int, scope catalog.Scope) (int, error) {
	switch sel.Mode {
	case v1alpha1.ModeAll:
		return matches, nil
	case v1alpha1.ModeOne:
		return 1, nil
	case v1alpha1.ModeFixed:
		if sel.Value < 1 {
			return 0, &v1alpha1.FieldError{Path: "spec.selector.value", Msg: fmt.Sprintf("mode fixed needs a value of at least 1, got %d", sel.Value)}
		}
		if sel.Value > matches {
			return 0, &v1alpha1.FieldError{Path: "spec.selector.value", Msg: fmt.Sprintf("mode fixed asks for %d %ss but the selector matches %d", sel.Value, scope, matches)}
		}
		return sel.Value, nil
	case v1alpha1.ModePercent:
		if sel.Value < 1 || sel.Value > 100 {
			return 0, &v1alpha1.FieldError{Path: "spec.selector.value", Msg: fmt.Sprintf("mode percent needs a value from 1 to 100, got %d", sel.Value)}
		}
		return max(1, matches*sel.Value/100), nil
	case "":
		return 0, &v1alpha1.FieldError{Path: "spec.selector.mode", Msg: "required"}
	}
	return 0, &v1alpha1.FieldError{Path: "spec.selector.mode", Msg: fmt.Sprintf("%q is not a selector mode", sel.Mode)}
}

// CheckBlastRadius fails when the refs touch more distinct nodes or GPUs
// than the caps allow; zero caps take the defaults of v1alpha1. A GPU or
// rank ref touches its node and GPU, a node ref its node. A job ref names
// no node of its own: pass Footprint(inv, refs) to count the GPUs a
// job-scope fault reaches. The error reads "spec.blastRadius: selection
// touches 16 GPUs on 2 nodes, over the cap maxGPUs=8".
func CheckBlastRadius(refs []Ref, br v1alpha1.BlastRadius) error {
	br = br.WithDefaults()
	nodes := map[string]bool{}
	type gpuKey struct {
		node string
		gpu  int
	}
	gpus := map[gpuKey]bool{}
	for _, r := range refs {
		if r.Node != "" {
			nodes[r.Node] = true
		}
		if r.Kind == catalog.ScopeGPU || (r.Kind == catalog.ScopeRank && r.Node != "") {
			gpus[gpuKey{r.Node, r.GPU}] = true
		}
	}
	var over []string
	if len(nodes) > br.MaxNodes {
		over = append(over, "maxNodes="+strconv.Itoa(br.MaxNodes))
	}
	if len(gpus) > br.MaxGPUs {
		over = append(over, "maxGPUs="+strconv.Itoa(br.MaxGPUs))
	}
	if len(over) == 0 {
		return nil
	}
	caps := "the cap " + over[0]
	if len(over) == 2 {
		caps = "the caps " + over[0] + " and " + over[1]
	}
	return &v1alpha1.FieldError{Path: "spec.blastRadius", Msg: fmt.Sprintf("selection touches %s on %s, over %s",
		plural(len(gpus), "GPU"), plural(len(nodes), "node"), caps)}
}

// Footprint returns what the refs reach, for blast-radius checks and dry
// runs: a job ref becomes one rank ref per rank of the job (with its node
// and GPU); other refs are returned as they are. Jobs missing from the
// inventory reach nothing that can be counted and are kept as they are.
func Footprint(inv Inventory, refs []Ref) []Ref {
	m := newMatcher(inv, v1alpha1.Selector{})
	var out []Ref
	for _, r := range refs {
		if r.Kind != catalog.ScopeJob {
			out = append(out, r)
			continue
		}
		j := slices.IndexFunc(inv.Jobs, func(j Job) bool { return j.Name == r.Job })
		if j < 0 {
			out = append(out, r)
			continue
		}
		for _, rk := range inv.Jobs[j].Ranks {
			out = append(out, m.rankRef(r.Job, rk))
		}
	}
	return out
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// checkNamed makes sure every node, GPU, job and rank the selector names
// exists, so a typo is an error rather than an empty or smaller selection.
func checkNamed(inv Inventory, sel v1alpha1.Selector) error {
	nodeSet := map[string]*Node{}
	for i := range inv.Nodes {
		nodeSet[inv.Nodes[i].Name] = &inv.Nodes[i]
	}
	for i, n := range sel.Nodes {
		if nodeSet[n] == nil {
			return &v1alpha1.FieldError{Path: fmt.Sprintf("spec.selector.nodes[%d]", i), Msg: fmt.Sprintf("node %q is not in the inventory", n)}
		}
	}
	for i, g := range sel.GPUs {
		found := false
		for _, n := range inv.Nodes {
			if len(sel.Nodes) > 0 && !slices.Contains(sel.Nodes, n.Name) {
				continue
			}
			found = found || slices.ContainsFunc(n.GPUs, func(x GPU) bool { return gpuMatches(x, g) })
		}
		if !found {
			where := "the inventory"
			if len(sel.Nodes) > 0 {
				where = "the selected nodes"
			}
			return &v1alpha1.FieldError{Path: fmt.Sprintf("spec.selector.gpus[%d]", i), Msg: fmt.Sprintf("GPU %q is not on %s", g, where)}
		}
	}
	for i, name := range sel.Jobs {
		if !slices.ContainsFunc(inv.Jobs, func(j Job) bool { return j.Name == name }) {
			return &v1alpha1.FieldError{Path: fmt.Sprintf("spec.selector.jobs[%d]", i), Msg: fmt.Sprintf("job %q is not in the inventory", name)}
		}
	}
	for i, r := range sel.Ranks {
		found := false
		for _, j := range inv.Jobs {
			if len(sel.Jobs) > 0 && !slices.Contains(sel.Jobs, j.Name) {
				continue
			}
			found = found || slices.ContainsFunc(j.Ranks, func(x Rank) bool { return x.Rank == r })
		}
		if !found {
			of := "any job"
			if len(sel.Jobs) > 0 {
				of = "job " + strings.Join(sel.Jobs, ", ")
			}
			return &v1alpha1.FieldError{Path: fmt.Sprintf("spec.selector.ranks[%d]", i), Msg: fmt.Sprintf("rank %d is not a rank of %s", r, of)}
		}
	}
	return nil
}

// gpuMatches reports whether a selector entry (an index or a UUID) names g.
func gpuMatches(g GPU, entry string) bool {
	if strings.HasPrefix(entry, "GPU-") {
		return g.UUID == entry
	}
	i, err := strconv.Atoi(entry)
	return err == nil && i == g.Index
}

// matcher answers "is this selected?" for nodes, GPUs and ranks.
type matcher struct {
	inv Inventory
	sel v1alpha1.Selector
	// byNode finds a node by name, for rank placement.
	byNode map[string]*Node
}

func newMatcher(inv Inventory, sel v1alpha1.Selector) *matcher {
	m := &matcher{inv: inv, sel: sel, byNode: map[string]*Node{}}
	for i := range inv.Nodes {
		m.byNode[inv.Nodes[i].Name] = &inv.Nodes[i]
	}
	return m
}

// jobsNarrow reports whether the selector restricts by workload, in which
// case only GPUs and nodes that run a selected rank are selected.
func (m *matcher) jobsNarrow() bool { return len(m.sel.Jobs) > 0 || len(m.sel.Ranks) > 0 }

func (m *matcher) nodeOK(n *Node) bool {
	if len(m.sel.Nodes) > 0 && !slices.Contains(m.sel.Nodes, n.Name) {
		return false
	}
	for k, v := range m.sel.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (m *matcher) gpuOK(n *Node, g GPU) bool {
	if !m.nodeOK(n) {
		return false
	}
	if len(m.sel.GPUs) > 0 && !slices.ContainsFunc(m.sel.GPUs, func(e string) bool { return gpuMatches(g, e) }) {
		return false
	}
	return !m.jobsNarrow() || m.runsSelectedRank(n.Name, g.Index)
}

func (m *matcher) jobOK(name string) bool {
	return len(m.sel.Jobs) == 0 || slices.Contains(m.sel.Jobs, name)
}

func (m *matcher) rankOK(job string, r Rank) bool {
	if !m.jobOK(job) || (len(m.sel.Ranks) > 0 && !slices.Contains(m.sel.Ranks, r.Rank)) {
		return false
	}
	n := m.byNode[r.Node]
	if n == nil || !m.nodeOK(n) {
		return false
	}
	if r.GPU == NoGPU {
		// A CPU rank: a selector that names GPUs cannot mean it.
		return len(m.sel.GPUs) == 0
	}
	i := slices.IndexFunc(n.GPUs, func(g GPU) bool { return g.Index == r.GPU })
	if i < 0 {
		return false
	}
	return len(m.sel.GPUs) == 0 || slices.ContainsFunc(m.sel.GPUs, func(e string) bool { return gpuMatches(n.GPUs[i], e) })
}

func (m *matcher) runsSelectedRank(node string, gpu int) bool {
	for _, j := range m.inv.Jobs {
		for _, r := range j.Ranks {
			if r.Node == node && r.GPU == gpu && m.rankOK(j.Name, r) {
				return true
			}
		}
	}
	return false
}

// runsSelectedCPURank reports whether a selected rank without a GPU of
// its own runs on node. On Kubernetes every rank is such a rank (the API
// does not say which GPU the device plugin gave a pod), so without this a
// node-scope fault narrowed by jobs or ranks would match no node there.
func (m *matcher) runsSelectedCPURank(node string) bool {
	if !m.jobsNarrow() {
		return false
	}
	for _, j := range m.inv.Jobs {
		for _, r := range j.Ranks {
			if r.Node == node && r.GPU == NoGPU && m.rankOK(j.Name, r) {
				return true
			}
		}
	}
	return false
}

func (m *matcher) gpus() []Ref {
	var refs []Ref
	for i := range m.inv.Nodes {
		n := &m.inv.Nodes[i]
		for _, g := range n.GPUs {
			if m.gpuOK(n, g) {
				refs = append(refs, Ref{Kind: catalog.ScopeGPU, Node: n.Name, GPU: g.Index, UUID: g.UUID, PCI: g.PCI})
			}
		}
	}
	return refs
}

func (m *matcher) nodes() []Ref {
	narrow := len(m.sel.GPUs) > 0 || m.jobsNarrow()
	var refs []Ref
	for i := range m.inv.Nodes {
		n := &m.inv.Nodes[i]
		if !m.nodeOK(n) {
			continue
		}
		if narrow && !slices.ContainsFunc(n.GPUs, func(g GPU) bool { return m.gpuOK(n, g) }) && !m.runsSelectedCPURank(n.Name) {
			continue
		}
		refs = append(refs, Ref{Kind: catalog.ScopeNode, Node: n.Name})
	}
	return refs
}

func (m *matcher) ranks() []Ref {
	var refs []Ref
	for _, j := range m.inv.Jobs {
		for _, r := range j.Ranks {
			if m.rankOK(j.Name, r) {
				refs = append(refs, m.rankRef(j.Name, r))
			}
		}
	}
	return refs
}

// rankRef builds a rank ref with its GPU's identity from the inventory.
func (m *matcher) rankRef(job string, r Rank) Ref {
	ref := Ref{Kind: catalog.ScopeRank, Job: job, Rank: r.Rank, Node: r.Node, GPU: r.GPU}
	if n := m.byNode[r.Node]; n != nil {
		if i := slices.IndexFunc(n.GPUs, func(g GPU) bool { return g.Index == r.GPU }); i >= 0 {
			ref.UUID, ref.PCI = n.GPUs[i].UUID, n.GPUs[i].PCI
		}
	}
	return ref
}

func (m *matcher) jobs() []Ref {
	seen := map[string]bool{}
	for _, j := range m.inv.Jobs {
		if slices.ContainsFunc(j.Ranks, func(r Rank) bool { return m.rankOK(j.Name, r) }) {
			seen[j.Name] = true
		}
	}
	var refs []Ref
	for _, name := range slices.Sorted(maps.Keys(seen)) {
		refs = append(refs, Ref{Kind: catalog.ScopeJob, Job: name})
	}
	return refs
}

// compareRefs orders refs by node name, GPU index, job and rank.
func compareRefs(a, b Ref) int {
	return cmp.Or(
		cmp.Compare(a.Node, b.Node),
		cmp.Compare(a.GPU, b.GPU),
		cmp.Compare(a.Job, b.Job),
		cmp.Compare(a.Rank, b.Rank),
		cmp.Compare(a.Kind, b.Kind),
	)
}
