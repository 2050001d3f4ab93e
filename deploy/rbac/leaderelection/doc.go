// Package leaderelection holds the RBAC markers of the controller's leader
// election: the chart grants these rules in a Role of the release's
// namespace, not cluster-wide, since the Lease lives there.
//
// Leases are created by the first replica and renewed (update) by the
// leader; get/list/watch let the others see who holds it. Events
// create/patch record leadership changes on the Lease.
package leaderelection

//go:generate go tool controller-gen rbac:roleName=gpuchaos-leader-election paths=. output:rbac:artifacts:config=../../helm/gpuchaos/files/rbac/leaderelection

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
