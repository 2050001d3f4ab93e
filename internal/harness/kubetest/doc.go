// Package kubetest starts a real Kubernetes control plane for tests:
// kube-apiserver and etcd through controller-runtime's envtest, and
// kube-controller-manager beside them for the tests whose behaviour needs
// a controller (garbage collection, node lifecycle, disruption budgets).
// What a test claims about the API is then checked against the API
// server itself, not a fake client.
//
// The binaries come from scripts/setup-kube, which builds them from the Go
// module proxy at the versions named here and caches them outside the
// repository. [Start] looks for them in KUBEBUILDER_ASSETS and then in the
// folder the script builds into. Without them a test is skipped with a
// message naming the script, or fails when GPUCHAOS_REQUIRE_KUBE is set,
// as scripts/test sets it: CI never skips these tests.
//
// Every server listens on loopback only, on ports chosen free at start,
// so tests in several packages may run their own control planes at once.
package kubetest
