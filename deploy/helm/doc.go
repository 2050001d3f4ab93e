// Package helm holds no code: its tests render the gpuchaos chart
// (deploy/helm/gpuchaos) with the real helm command (scripts/setup-helm),
// lint it, hold its RBAC rules equal to the ones controller-gen generated
// from the markers in deploy/rbac, and apply every rendered object, CRDs
// included, to a real kube-apiserver (internal/harness/kubetest).
package helm
