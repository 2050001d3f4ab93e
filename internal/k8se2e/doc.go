// Package k8se2e holds the end-to-end test of the Kubernetes path (issue
// 15) with every part a real process: kube-apiserver and etcd, two
// 'gpuchaos controller' replicas electing a leader, 'gpuchaos agent' for
// node n1, a Prometheus server scraping the agent, and 'gpuchaos run
// --target k8s'. It has no code of its own, only the test.
package k8se2e
