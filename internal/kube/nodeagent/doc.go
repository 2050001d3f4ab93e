// Package nodeagent applies the NodeFaults of one node: it watches the
// NodeFaults labelled with its node and hands each to the NodeFault
// applier (internal/kube/nodefault) with the node's own injectors
// (internal/fault/nodeall) and its ledger as the applier's journal, so
// that every injection is recorded before it acts. The applier reports
// through the status subresource and recovers a fault when its Action
// becomes Recover or when it is deleted (a finalizer holds the object
// until then); the agent's own timer recovers it at its ExpiresAt from
// the ledger alone, with no API server. On start it recovers from its
// ledger whatever a killed agent left that is no longer wanted. It also
// reports the node's GPUs on its Node as the gpuchaos.dev/gpus
// annotation.
//
// NodeFaults of API mechanisms (APIMechanisms: those the catalogue builds
// for k8s that the node's registry does not run) are the controller's and
// are skipped.
//
// The agent runs on every GPU node, so it stays small: it talks to the
// API server through client-go's REST client with a scheme of gpuchaos's
// kinds only (NewClient), and links no controller-runtime, typed
// clientset, engine, twin or API-server injector (a test holds it to
// that).
package nodeagent
