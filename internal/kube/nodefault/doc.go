// Package nodefault is the one NodeFault applier: it makes one NodeFault
// true and reports it. Two callers run it: the node agent
// (internal/kube/nodeagent) for the mechanisms that act on its node, and
// the controller (internal/kube/controller) for those that act through the
// API server (cordon, drain, taint, pod deletes). Each brings its own loop
// (the agent its watch and list, the controller controller-runtime's
// queue), its injectors and its client; what a NodeFault means is written
// here once:
//
//   - the fault and mechanism are looked up in the catalogue, the target
//     is the NodeFault's (Ref), the parameters are resolved before
//     anything changes, and a refusal is reported Failed;
//   - the gpuchaos.dev/recover finalizer is added before acting, so a
//     delete waits for recovery, and removed once nothing of the fault is
//     left in effect;
//   - a NodeFault is applied once per generation: one reported Applied
//     (or, with a journal, recorded) is not injected again by a resync or
//     a restart, and one reported Failed or Recovered is finished;
//   - it is recovered on Action Recover, at ExpiresAt and on deletion;
//   - its status says the phase, when it was applied and recovered, why,
//     by which agent, and for which generation.
//
// With a journal (the agent's ledger), every injection is recorded before
// it acts and the journal says what is in effect, so recovery needs no
// API server: RecoverExpired and RecoverGone undo from the journal alone,
// and the reports the API server missed are owed and written at the next
// Reconcile. Without one (the controller), the status is the record: a
// NodeFault not reported Recovered may be in effect, and recovering it
// again is safe by the injector contract.
//
// The applier talks to the API server through API, two merge patches of
// one NodeFault, so that it links neither controller-runtime nor a
// typed clientset: the node agent stays small.
package nodefault
