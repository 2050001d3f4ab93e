// Package agent holds the RBAC markers of the node agent (gpuchaos agent
// --node-name NODE), which runs on every GPU node, so each verb here is
// granted to every node: the rules stay as narrow as its job.
//
// Why each rule:
//
//   - nodefaults get/list/watch: the agent watches the NodeFaults labelled
//     with its node; update/patch: it adds and removes the recover
//     finalizer, so a NodeFault is not gone before its fault is undone.
//   - nodefaults/status get/update/patch: it reports Applied, Recovered or
//     Failed.
//   - nodes get/patch: it reports its GPUs in the gpuchaos.dev/gpus
//     annotation of its own Node. No list: it knows its node's name.
//
// It cannot create or delete anything, and reads no pods or secrets: a
// pod's processes are found through the pod uid the controller wrote into
// the NodeFault and the node's own cgroup tree.
package exporter

//go:generate go tool controller-gen rbac:roleName=gpuchaos-agent paths=. output:rbac:artifacts:config=../../helm/gpuchaos/files/rbac/agent

// +kubebuilder:rbac:groups=gpuchaos.dev,resources=nodefaults,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=gpuchaos.dev,resources=nodefaults/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;patch
