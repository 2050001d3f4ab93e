// Package nodeagent applies the NodeFaults of one node: it watches the
// NodeFaults labelled with its node, applies each through the node's own
// injectors (internal/fault/nodeall) with a ledger record written first, and
// reports through the status subresource. It recovers a fault when its
// Action becomes Recover, when it is deleted (a finalizer holds the
// object until then), and at its ExpiresAt on a local timer that needs no
// API server. On start it recovers from its ledger whatever a killed agent
// left that is no longer wanted. It also reports the node's GPUs on its
// Node as the gpuchaos.dev/gpus annotation.
//
// NodeFaults of API mechanisms (APIMechanisms) are the controller's and
// are skipped.
package nodeagent
