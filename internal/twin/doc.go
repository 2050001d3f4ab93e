// Package twin is gpuchaos' digital twin: an embedded, deterministic
// discrete-event simulation of a GPU cluster on a virtual clock that exports
// what a real fleet exports — dcgm-exporter series with their exact names,
// labels and units, kernel log lines in NVIDIA's NVRM format,
// kube-state-metrics node series and the training job's own metrics.
//
// A ClusterSpec describes the hardware (GPU model presets, nodes, NUMA,
// racks, NVLink domains, network rails, checkpoint storage), per-GPU
// performance variability, background failure rates and data-parallel
// training jobs. New builds a Twin from it; Sleep advances the virtual clock
// and processes every event that falls due (physics steps, training steps,
// checkpoints, restarts, watchdogs, scrapes). Apply plays catalogue effects
// on a target and Revert undoes them, both idempotent.
//
// Everything is single-threaded and driven by the caller: the twin starts no
// goroutine, and the same spec and seed give the same series and logs byte
// for byte. A Twin is not safe for concurrent use.
package twin
