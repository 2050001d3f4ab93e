// Package exporter is gpuchaos's node exporter: it samples the node's GPUs
// through a gpu.Source on a fixed interval and serves the newest reading at
// /metrics through the exposition package's handler, in the Prometheus
// text format (version 0.0.4; protobuf when a scraper asks), under
// dcgm-exporter's metric names, labels (gpu, UUID, pci_bus_id, device,
// modelName, Hostname) and units, so alert rules written for dcgm-exporter
// read it unchanged. Beside them it serves gpuchaos's own series: the
// agent's identity, active faults, injections, XID events by code and burn
// results, which the XID watcher, the injectors and burn feed through
// RecordXID, SetFault, RecordInjection and RecordBurn. With
// Options.NUMAInterval it also judges the NUMA alignment of every compute
// process NVML lists on a GPU (internal/node/numa): gpuchaos_numa_misaligned,
// gpuchaos_numa_remote_memory_ratio and gpuchaos_numa_remote_cpu_ratio.
//
// Only the DCGM fields NVML itself can give are exported.
// DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL and the profiling fields
// (DCGM_FI_PROF_*) are computed by DCGM's host engine from counters NVML
// does not expose in the same form; they need DCGM and are left out here.
//
// Why sample every second when dcgm-exporter collects every 30 s: an
// injected fault must show on the page within a probe's deadline, a burn's
// temperature ceiling must be watched at 1 Hz, and a Prometheus scraping
// at 15 s should never read a value older than one interval. The cost is
// measured by scripts/agent-cost on a running agent and, per second of
// sampling and scraping, by BenchmarkSecondNVML over go-nvml's mock.
//
// A GPU that stops answering (NVML's GPU_IS_LOST, a twin GPU off the bus)
// disappears from the DCGM series at the next sample, as on dcgm-exporter,
// so absent() and staleness-based alerts fire; its gpuchaos_xid_events_total
// series stay, since the XID that announced the loss must stay countable.
package exporter
