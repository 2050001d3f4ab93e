package kubetarget

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// ResourceGPU is the extended resource NVIDIA's device plugin advertises.
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

// Pod labels the training operators set, by which a pod is found to be a
// rank of a job.
const (
	// Kubeflow training-operator's PyTorchJob pods
	// (https://kubeflow.org/docs/components/pytorch: kubectl get pods -l
	// training.kubeflow.org/job-name=...,training.kubeflow.org/replica-type=master,training.kubeflow.org/replica-index=0).
	// RANK is 0 for the master and replica-index+1 for a worker when the
	// job has a master, replica-index otherwise.
	labelKubeflowJob   = "training.kubeflow.org/job-name"
	labelKubeflowType  = "training.kubeflow.org/replica-type"
	labelKubeflowIndex = "training.kubeflow.org/replica-index"
	// JobSet's pods (kubernetes-sigs/jobset, api/jobset/v1alpha2
	// jobset_types.go: JobSetNameKey, JobIndexKey, JobGlobalIndexKey).
	// The global index is unique across the JobSet's replicated jobs;
	// older JobSets lack it and carry only job-index.
	labelJobSetName        = "jobset.sigs.k8s.io/jobset-name"
	labelJobSetIndex       = "jobset.sigs.k8s.io/job-index"
	labelJobSetGlobalIndex = "jobset.sigs.k8s.io/job-global-index"
	// Indexed Jobs' pods
	// (https://kubernetes.io/docs/reference/labels-annotations-taints/:
	// batch.kubernetes.io/job-name, batch.kubernetes.io/job-completion-index;
	// job-name is the older spelling still set).
	labelJobName         = "batch.kubernetes.io/job-name"
	labelJobNameLegacy   = "job-name"
	labelCompletionIndex = "batch.kubernetes.io/job-completion-index"
)

// PodRef is the pod that runs one rank, and the node it runs on.
type PodRef struct {
	Namespace, Name, UID, Node string
}

// readInventory lists the cluster's nodes and the ranks of the training
// jobs running on them. Jobs in namespace ns are named as they are; jobs
// elsewhere as namespace/name, so a selector cannot reach another
// namespace's job by a bare name.
//
// A pod's GPUs are not in the API (the device plugin picks them), so a
// rank's GPU is inventory.NoGPU: rank and job faults reach the rank's node
// and pod, and a GPU-scoped observation is matched to a job only through
// its node.
func readInventory(ctx context.Context, r client.Reader, ns string) (inventory.Inventory, map[string]PodRef, error) {
	var inv inventory.Inventory
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		return inv, nil, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Items {
		node, err := nodeOf(&n)
		if err != nil {
			return inv, nil, err
		}
		inv.Nodes = append(inv.Nodes, node)
	}
	slices.SortFunc(inv.Nodes, func(a, b inventory.Node) int { return cmp.Compare(a.Name, b.Name) })

	var pods corev1.PodList
	if err := r.List(ctx, &pods); err != nil {
		return inv, nil, fmt.Errorf("list pods: %w", err)
	}
	jobs := map[string]*inventory.Job{}
	refs := map[string]PodRef{}
	for _, p := range ranksOf(pods.Items) {
		name := p.job
		if p.pod.Namespace != ns {
			name = p.pod.Namespace + "/" + p.job
		}
		j := jobs[name]
		if j == nil {
			j = &inventory.Job{Name: name}
			jobs[name] = j
		}
		j.Ranks = append(j.Ranks, inventory.Rank{Rank: p.rank, Node: p.pod.Spec.NodeName, GPU: inventory.NoGPU})
		refs[rankKey(name, p.rank)] = PodRef{Namespace: p.pod.Namespace, Name: p.pod.Name, UID: string(p.pod.UID), Node: p.pod.Spec.NodeName}
	}
	for _, j := range jobs {
		slices.SortFunc(j.Ranks, func(a, b inventory.Rank) int { return cmp.Compare(a.Rank, b.Rank) })
		inv.Jobs = append(inv.Jobs, *j)
	}
	slices.SortFunc(inv.Jobs, func(a, b inventory.Job) int { return cmp.Compare(a.Name, b.Name) })
	return inv, refs, nil
}

func rankKey(job string, rank int) string { return job + "/" + strconv.Itoa(rank) }

// nodeOf reads a node's GPUs from its agent's report, or, without one,
// numbers the device plugin's capacity 0..n-1 (no UUIDs: selectors by
// UUID need the agent).
func nodeOf(n *corev1.Node) (inventory.Node, error) {
	node := inventory.Node{Name: n.Name, Labels: n.Labels}
	if raw, ok := n.Annotations[v1alpha1.AnnotationGPUs]; ok {
		var gpus []v1alpha1.GPUReport
		if err := json.Unmarshal([]byte(raw), &gpus); err != nil {
			return node, fmt.Errorf("node %s: annotation %s: %w", n.Name, v1alpha1.AnnotationGPUs, err)
		}
		for _, g := range gpus {
			node.GPUs = append(node.GPUs, inventory.GPU{Index: g.Index, UUID: g.UUID, PCI: g.BusID, Model: g.Model})
		}
		slices.SortFunc(node.GPUs, func(a, b inventory.GPU) int { return cmp.Compare(a.Index, b.Index) })
		return node, nil
	}
	q, ok := n.Status.Capacity[ResourceGPU]
	if !ok {
		return node, nil
	}
	for i := range q.Value() {
		node.GPUs = append(node.GPUs, inventory.GPU{Index: int(i)})
	}
	return node, nil
}

type rankPod struct {
	pod  *corev1.Pod
	job  string
	rank int
}

// ranksOf finds the pods that are ranks of training jobs, scheduled and
// not finished, with their job and rank.
func ranksOf(pods []corev1.Pod) []rankPod {
	var out []rankPod
	// A PyTorchJob with a master numbers its workers from 1.
	hasMaster := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		if p.Labels[labelKubeflowJob] != "" && p.Labels[labelKubeflowType] == "master" {
			hasMaster[p.Namespace+"/"+p.Labels[labelKubeflowJob]] = true
		}
	}
	// A JobSet without global indexes numbers its ranks job by job: the
	// largest completion index gives the pods per job.
	perJob := map[string]int{}
	for i := range pods {
		p := &pods[i]
		if js := p.Labels[labelJobSetName]; js != "" {
			if ci, err := strconv.Atoi(p.Labels[labelCompletionIndex]); err == nil {
				perJob[p.Namespace+"/"+js] = max(perJob[p.Namespace+"/"+js], ci+1)
			}
		}
	}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
			continue
		}
		l := p.Labels
		switch {
		case l[labelKubeflowJob] != "":
			idx, err := strconv.Atoi(l[labelKubeflowIndex])
			if err != nil {
				continue
			}
			rank := idx
			if l[labelKubeflowType] == "worker" && hasMaster[p.Namespace+"/"+l[labelKubeflowJob]] {
				rank = idx + 1
			}
			out = append(out, rankPod{p, l[labelKubeflowJob], rank})
		case l[labelJobSetName] != "":
			ci, err := strconv.Atoi(l[labelCompletionIndex])
			if err != nil {
				continue
			}
			job, err := strconv.Atoi(l[labelJobSetGlobalIndex])
			if err != nil {
				if job, err = strconv.Atoi(l[labelJobSetIndex]); err != nil {
					continue
				}
			}
			out = append(out, rankPod{p, l[labelJobSetName], job*perJob[p.Namespace+"/"+l[labelJobSetName]] + ci})
		case l[labelCompletionIndex] != "":
			name := cmp.Or(l[labelJobName], l[labelJobNameLegacy])
			ci, err := strconv.Atoi(l[labelCompletionIndex])
			if name == "" || err != nil {
				continue
			}
			out = append(out, rankPod{p, name, ci})
		}
	}
	return out
}
