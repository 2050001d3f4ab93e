// Package engine runs an experiment: resolve and cap the targets, check the
// steady state, record and inject every fault, poll the probes until each
// expectation is met or its window closes, recover (always: on success,
// error, abort and interrupt), and write a verdict per expectation with its
// time to detect. The same engine drives the twin (virtual clock), the live
// twin, the local node and a Kubernetes cluster (in the controller, one run
// per Experiment): everything target-specific sits behind Target.
package engine
