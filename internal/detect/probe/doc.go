// Package probe turns questions about a cluster ("is an alert firing for this
// GPU?", "did an XID line appear?", "is the job stepping?") into Probes the
// engine polls. Probes over the digital twin or a scraped exporter read its
// series and kernel log.
//
// The built-in detectors are the alert rules and watchers a typical GPU
// fleet runs: all but the kernel-log XID watcher are the alerting rules of
// detectors.yaml, a Prometheus rule file, and threshold probes are written
// as one-rule sets. Both are evaluated by NewAlertProbe with the real PromQL
// engine and Prometheus' alert state machine (internal/detect/promeval), so a
// detector behaves as its rule would in Prometheus. Log probes match kernel
// log lines; workload probes judge a training job on its own series,
// relative to the run.
package probe
