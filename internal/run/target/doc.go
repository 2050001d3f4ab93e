// Package target is the target layer: what a run acts on (the twin, the
// twin in real time, this node, a Kubernetes cluster), behind one
// interface that the engine consumes. Each kind lives in a package of its
// own with an Open function (the twin's and this node's under
// internal/run/target, the cluster's in internal/kube/kubetarget); a
// Registry maps kinds to openers, and the command line's one list of them
// (internal/cli/targets.go) is where a new kind adds its line.
package target
