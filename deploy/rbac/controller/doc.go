// Package controller holds the RBAC markers of the gpuchaos controller
// (gpuchaos controller), the cluster-wide half of the operator.
//
// Why each rule:
//
//   - experiments, nodefaults, schedules (+status, +finalizers): the
//     resources it reconciles; it creates NodeFaults and Experiments (a
//     Schedule's runs) and deletes them (history, Replace), and holds the
//     recover finalizer until every fault is undone.
//   - nodes get/list/watch/patch: the inventory reads labels, GPU capacity
//     and the agents' GPU annotation; node-cordon and node-taint patch
//     spec.unschedulable, spec.taints and the cordoned-by annotation.
//     Never create, update or delete: patches touch only the fields named.
//   - pods get/list/watch/delete: training-job ranks are found by pod labels;
//     pod-delete and daemonset-pod-delete delete one pod.
//   - pods/eviction create: cordon-drain evicts through the Eviction API so
//     PodDisruptionBudgets hold.
//   - poddisruptionbudgets list/watch: a drain says which budget refused it.
//   - events create/patch: the Experiment's timeline as Kubernetes events
//     (both the core and events.k8s.io groups, as controller-runtime's
//     recorders use either); list/watch: the events probe reads them.
//   - namespaces get/list/watch: the gpuchaos.dev/chaos=enabled opt-in.
//
// The leader-election Lease is in package leaderelection, granted only in
// the release's namespace.
package controller

//go:generate go tool controller-gen rbac:roleName=gpuchaos-controller paths=. output:rbac:artifacts:config=../../helm/gpuchaos/files/rbac/controller

// +kubebuilder:rbac:groups=gpuchaos.dev,resources=experiments;nodefaults;schedules,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=gpuchaos.dev,resources=experiments/status;nodefaults/status;schedules/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=gpuchaos.dev,resources=experiments/finalizers;nodefaults/finalizers;schedules/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list;watch
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
