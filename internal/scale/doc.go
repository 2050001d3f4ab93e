// Package scale is the scale benchmark of the Kubernetes controller: a
// real API server and etcd (internal/kubetest), N fake GPU nodes kept
// Ready by kwok, the simulated agents of all of them
// (internal/kubetest/simagent), and one fault run touching every tenth
// node. BenchmarkScale times the run from its start until every NodeFault
// is Applied, and from asking for recovery until every one is Recovered.
//
// The run is made by a [Driver]. [Direct] writes the NodeFaults itself,
// as the controller will; the operator's benchmark swaps in a Driver that
// creates an Experiment and lets an operator in the same process make
// them, and reads the controller's memory where today's harness-peak-MiB
// is only the harness's (its informers and the simulated agents).
//
//	export KUBEBUILDER_ASSETS=$(scripts/setup-kube)   # also builds kwok
//	go test ./internal/scale -run '^$' -bench 'Scale/(500|1000)$' -benchtime 3x
//	go test ./internal/scale -run '^$' -bench 'Scale/5000$' -benchtime 1x -timeout 60m
//
// 5,000 nodes run only when named (-bench Scale/5000, or
// GPUCHAOS_SCALE_NODES=5000); 500, 1000 and 2000 run with any -bench that
// matches.
package scale
