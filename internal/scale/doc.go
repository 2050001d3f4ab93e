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
//
// Results on the 2-core development VM (Oxide Virtual Turin-like, load
// average 16-23 from other builds at the time), 2026-12-02, Direct
// driver, kwok v0.8.0, kube-apiserver v1.37.2; -benchtime 2x for 500 and
// 1000 (mean of 2 runs), 1x for 2000 and 5000:
//
//	nodes  faults  applied-s  recovered-s  nodes-create-s  nodes-ready-s  harness-peak-MiB
//	  500      50      1.02        1.37            3.2            5.9            52.7
//	 1000     100      1.17        1.70            7.1           16.2            64.7
//	 2000     200      2.03        4.83           10.4           17.8            85.1
//	 5000     500      5.53        5.32           23.6           49.2           139.0
//
// applied-s counts from the first NodeFault create (32 in flight) to the
// last Applied status seen by the harness's informer, so it includes the
// creates. harness-peak-MiB is VmHWM, the process's peak since it started:
// with several sizes in one go test the larger ones include the smaller
// ones' peak (the rows above ran as 500+1000, 2000 and 5000 separately).
// Figures on a loaded two-core machine vary by tens of per cent between
// runs (500 nodes: 0.62 s and 1.42 s applied in two runs); compare
// drivers on the same machine in the same sitting.
package scale
