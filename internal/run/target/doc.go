// Package target is the target layer: what a run acts on (the twin, the
// twin in real time, this node, and next a Kubernetes cluster), behind one
// interface that the engine consumes. Each kind lives in a package of its
// own under internal/run/target and registers its opener here; internal/run/target/all
// links them, so adding a target is one folder and one line there.
package target
