package kubetarget

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// Aim is where one NodeFault of an injection acts: its node and, for a
// fault aimed at a pod, the pod (namespace/name), its uid, and the job and
// rank the pod runs.
type Aim struct {
	Node   string `json:"node"`
	Job    string `json:"job,omitempty"`
	Rank   *int   `json:"rank,omitempty"`
	Pod    string `json:"pod,omitempty"`
	PodUID string `json:"podUID,omitempty"`
}

// podRule says which pods of a job a job-scope mechanism acts from.
type podRule int

const (
	lowestRank podRule = iota + 1
	everyPod
)

// jobPods is the rule of each job-scope mechanism built for pods, by
// fault/mechanism; one missing here is refused on k8s rather than guessed.
var jobPods = map[string]podRule{
	// Shared files: a job's checkpoint directory is one volume its ranks
	// share (a PVC, NFS, a bucket mount). Acting from every pod would flip
	// the same bytes back (a second XOR undoes the first) or fill the
	// volume once per pod; the lowest rank's pod sees the files, and in
	// the usual layout it is the one that writes them.
	"checkpoint.corrupt-newest/byte-flip": lowestRank,
	"checkpoint.fill-volume/fallocate":    lowestRank,
	// Processes, cgroups and network namespaces: each pod has its own, so
	// the fault is made in each.
	"checkpoint.kill-writer/signal":        everyPod,
	"checkpoint.slow-storage/cgroup-io":    everyPod,
	"checkpoint.storage-partition/cls-bpf": everyPod,
}

// aims resolves one injection of mechanism m of f on ref into where its
// NodeFaults act, given the experiment's selector. fanned says the aims
// are pods the target chose (one NodeFault each, named after its pod),
// rather than the one place the ref itself names.
func (t *Target) aims(sel v1alpha1.Selector, f *catalog.Fault, m *catalog.Mechanism, ref inventory.Ref) (aims []Aim, fanned bool, err error) {
	t.mu.Lock()
	pods, jobs := t.pods, t.jobs
	t.mu.Unlock()
	if ref.Kind != catalog.ScopeJob && ref.Node == "" {
		return nil, false, fmt.Errorf("%s names no node: the k8s target injects on nodes", ref.Key())
	}
	switch ref.Kind {
	case catalog.ScopeRank:
		p, ok := pods[rankKey(ref.Job, ref.Rank)]
		if !ok {
			return nil, false, fmt.Errorf("%s: no pod runs this rank", ref.Key())
		}
		r := ref.Rank
		return []Aim{{Node: ref.Node, Job: ref.Job, Rank: &r, Pod: p.Namespace + "/" + p.Name, PodUID: p.UID}}, false, nil
	case catalog.ScopeNode:
		// A network fault on a selector that narrows to jobs or ranks is
		// about those ranks' traffic: it goes into their pods' network
		// namespaces, not the node's, where it would hit every pod and
		// the node itself. One pod per node is the common PyTorchJob
		// layout, but a node can run several ranks in pods of their own
		// (small GPUs, CPU ranks), so each pod gets its NodeFault. A
		// selector of nodes or GPUs alone means the node's own network.
		if !f.ActsInNetNS() || len(sel.Jobs) == 0 && len(sel.Ranks) == 0 {
			return []Aim{{Node: ref.Node}}, false, nil
		}
		for _, j := range jobs {
			if len(sel.Jobs) > 0 && !slices.Contains(sel.Jobs, j.Name) {
				continue
			}
			for _, r := range j.Ranks {
				if r.Node != ref.Node || len(sel.Ranks) > 0 && !slices.Contains(sel.Ranks, r.Rank) {
					continue
				}
				aims = addPodAim(aims, pods, j.Name, r.Rank)
			}
		}
		if len(aims) == 0 {
			return nil, false, fmt.Errorf("%s: no pod of the selected jobs and ranks runs on this node", ref.Key())
		}
		return aims, true, nil
	case catalog.ScopeJob:
		rule, ok := jobPods[f.ID+"/"+m.Name]
		if !ok {
			return nil, false, fmt.Errorf("job %s: the k8s target does not know which pods %s via %s acts from", ref.Job, f.ID, m.Name)
		}
		i := slices.IndexFunc(jobs, func(j inventory.Job) bool { return j.Name == ref.Job })
		if i >= 0 {
			// Ranks are sorted: the first is the lowest.
			for _, r := range jobs[i].Ranks {
				aims = addPodAim(aims, pods, ref.Job, r.Rank)
			}
		}
		if len(aims) == 0 {
			return nil, false, fmt.Errorf("job %s: no pod runs it", ref.Job)
		}
		if rule == lowestRank {
			aims = aims[:1]
		}
		return aims, true, nil
	}
	return []Aim{{Node: ref.Node}}, false, nil
}

// addPodAim appends the pod that runs rank of job, unless it has no node
// yet or is there already (a pod may run several ranks).
func addPodAim(aims []Aim, pods map[string]PodRef, job string, rank int) []Aim {
	p, ok := pods[rankKey(job, rank)]
	if !ok || p.Node == "" || slices.ContainsFunc(aims, func(x Aim) bool { return x.PodUID == p.UID }) {
		return aims
	}
	return append(aims, Aim{Node: p.Node, Job: job, Rank: &rank, Pod: p.Namespace + "/" + p.Name, PodUID: p.UID})
}

// Aims lists where the injection of mechanism mech of fault on ref would
// act in the cluster read by the last Inventory, under selector sel: the
// pods, for a fault aimed at pods. A dry run prints them.
func (t *Target) Aims(sel v1alpha1.Selector, fault, mech string, ref inventory.Ref) ([]Aim, error) {
	f, ok := catalog.Lookup(fault)
	if !ok {
		return nil, fmt.Errorf("fault %q is not in the catalogue", fault)
	}
	m := f.Mechanism(mech)
	if m == nil {
		return nil, fmt.Errorf("fault %s has no mechanism %q", fault, mech)
	}
	aims, _, err := t.aims(sel, f, m, ref)
	slices.SortStableFunc(aims, func(a, b Aim) int { return cmp.Compare(a.Node, b.Node) })
	return aims, err
}
