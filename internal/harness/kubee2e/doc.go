// Package kubee2e holds the end-to-end test of the Kubernetes path
// with every part a real process: kube-apiserver and etcd, two
// 'gpuchaos controller' replicas electing a leader, 'gpuchaos agent' for
// node n1, a Prometheus server scraping the agent, and 'gpuchaos run
// --target k8s'. It has no code of its own, only the test.
//
// The test needs root (the agent writes /dev/kmsg and changes a veth in a
// network namespace), the control plane of scripts/setup-kube and the
// Prometheus server of scripts/setup-prometheus; without the binaries it
// skips, or fails when GPUCHAOS_REQUIRE_KUBE is set.
package kubee2e
