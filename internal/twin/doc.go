// Package twin is gpuchaos' digital twin: an embedded, deterministic
// discrete-event simulation of a GPU cluster on a virtual clock that exports
// what a real fleet exports — dcgm-exporter series with their exact names,
// labels and units, kernel log lines in NVIDIA's NVRM format,
// kube-state-metrics' node, pod and DaemonSet series, a compact
// node-exporter per node, `up` for every scrape target, and the training
// job's own metrics. The
// other GPU exporters a spec declares (ExporterSpec.Exporters:
// dcgm-exporter-1.x, nvidia_gpu_exporter, nvidia_gpu_prometheus_exporter,
// gpu-operator) are dialects: their series are read off the same GPUs at
// the same scrape, in each exporter's own names, labels and units.
//
// Kubernetes and hosts (cluster_series.go, host_series.go): each job runs
// one worker pod per node whose container exits with every crash of the
// job and crash-loops while a GPU it holds is gone; pod-kill and drain
// replace the pod (Pending while its node is cordoned or offers no GPUs),
// device-plugin-kill replaces the device plugin's pod, which stays down
// while the fault holds. node-exporter models one CPU per socket, so the
// shares and per-CPU load the standard rules read are those of the node;
// a NUMA hog moves the memory and CPU of its socket, a filled checkpoint
// volume reads full on the job's nodes. Nothing else moves: network faults
// on the GPU rails bypass the kernel's interface counters.
//
// A ClusterSpec describes the hardware (GPU model presets, nodes, NUMA,
// racks, NVLink domains, network rails, checkpoint storage), per-GPU
// performance variability, background failure rates and data-parallel
// training jobs. New builds a Twin from it; Sleep advances the virtual clock
// and processes every event that falls due (physics steps, training steps,
// checkpoints, restarts, watchdogs, scrapes). Apply plays catalogue effects
// on a target and Revert undoes them, both idempotent.
//
// # The model
//
// GPUs: temperature follows a first-order curve towards ambient + power ×
// thermal resistance (time constant 90 s by default), integrated exactly per
// physics step (1 s). Above the model's slowdown temperature the SW thermal
// controller cuts the SM clock to the power that holds the GPU there, and
// the HW thermal slowdown engages: it at least halves the clock (nvml.h:
// "reducing the core clocks by a factor of 2 or more") until the GPU has
// cooled 3 °C below the slowdown temperature. A power cap cuts the clock
// until the draw fits; a power brake is a HW slowdown and halves it too.
// Power follows activity and clock (idle + (TDP − idle) × activity ×
// clock³), so it falls with every clock cut. An uncorrectable ECC error
// raises the uncorrectable remapped-rows count and leaves a remap pending
// until the next reset, as on every GPU with row remapping (Ampere on).
//
// Telemetry noise: every scrape draws seeded noise (its own PCG stream,
// so it never shifts the variability or failures a seed draws) that moves
// what the exporter reports, never the model's state: power by 0.21 % of
// the draw, a SW-limited SM clock by 18.4 MHz in 15 MHz steps,
// temperatures by 0.25 °C before rounding to whole degrees, a busy GPU's
// utilisation by one point. The figures are the standard deviations of a
// real busy H200's one-second readings (../shared/data/h200-telemetry/
// burn-bf16.json: 1.44 W at 690.9 W, 18.4 MHz, 0.20 °C); utilisation is
// not in those readings and its jitter is a modelling choice (noise.go). A rank's compute time is
// its median time × the GPU's variability factor (lognormal, or sampled from
// the PAL per-GPU slowdowns in data/) × any silent slowdown ÷ the clock
// ratio.
//
// Jobs: synchronous data parallel. A step takes the slowest rank's compute
// plus a ring all-reduce of the gradient, 2(n−1)/n × bytes over the
// bottleneck bus bandwidth: NVLink inside a node, the per-GPU share of the
// node's network across nodes, times the collective efficiency (0.67, the
// ratio of measured bus bandwidth to link rate in DESIGN.md §5) and any
// fault factor. Checkpoints every interval, sync (the job stalls for size ÷
// storage bandwidth) or async (a short stall); a crash costs the restart
// time and every step since the newest valid checkpoint; a hang lasts until
// the NCCL watchdog (10 minutes) kills the job. Goodput is kept steps × the
// healthy step time ÷ wall time, so rolled-back work and slow steps both
// count against it.
//
// Faults: the catalogue's effects (internal/model/catalog/effect.go) change the
// model's inputs — a thermal resistance, a power cap, a link's state, a
// rank's slowdown, a collective's bandwidth factor — and the consequences
// follow from the model: a cooling fault throttles only after the curve
// crosses the slowdown temperature, XID 79 removes the GPU from every
// series and crashes the job, NUMA misplacement moves no GPU metric but
// slows every step.
//
// History: Sleep keeps the samples and kernel log lines of the last
// retention (65 minutes by default, the longest lookback of any probe or
// rule pack) and, once a fault has been applied, everything from that long
// before it; so memory follows the evaluation window, not the warm-up. The
// limits on specs and warm-ups (MaxGPUs, MaxWarmup, …) are in limits.go.
//
// Everything is single-threaded and driven by the caller: the twin starts no
// goroutine, and the same spec and seed give the same series and logs byte
// for byte. A Twin is not safe for concurrent use.
package twin
