package inventory

import (
	"strconv"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// Ref is one resolved target: the thing a single injection touches. Kind
// says which fields matter: a GPU has Node, GPU, UUID and PCI; a node has
// Node; a rank has Job, Rank and the Node and GPU it runs on; a job has Job.
type Ref struct {
	Kind catalog.Scope `json:"kind"`
	Node string        `json:"node,omitempty"`
	GPU  int           `json:"gpu"`
	UUID string        `json:"uuid,omitempty"`
	// PCI is the bus id as dcgm-exporter prints it, 00000000:18:00.0.
	PCI  string `json:"pci_bus_id,omitempty"`
	Job  string `json:"job,omitempty"`
	Rank int    `json:"rank"`
}

// Key names the ref in a run's keys, events and logs: node/gpuN,
// job/rankN, the job, or the node.
func (r Ref) Key() string {
	switch r.Kind {
	case catalog.ScopeGPU:
		return r.Node + "/gpu" + strconv.Itoa(r.GPU)
	case catalog.ScopeRank:
		return r.Job + "/rank" + strconv.Itoa(r.Rank)
	case catalog.ScopeJob:
		return r.Job
	}
	return r.Node
}

// Inventory is what a target (twin, node, cluster) offers to select from.
type Inventory struct {
	Nodes []Node `json:"nodes"`
	Jobs  []Job  `json:"jobs"`
}

// Node is one machine.
type Node struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	GPUs   []GPU             `json:"gpus"`
}

// GPU is one device of a node.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	PCI   string `json:"pci_bus_id"`
	Model string `json:"model"`
}

// Job is one training job and where its ranks run.
type Job struct {
	Name  string `json:"name"`
	Ranks []Rank `json:"ranks"`
}

// Rank is one process of a job, bound to one GPU.
type Rank struct {
	Rank int    `json:"rank"`
	Node string `json:"node"`
	// GPU is the rank's GPU index on its node; NoGPU for a rank on CPUs
	// (a gloo job on a node without GPUs).
	GPU int `json:"gpu"`
}

// NoGPU is the GPU of a rank that has none.
const NoGPU = -1
