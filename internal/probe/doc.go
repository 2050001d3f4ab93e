// Package probe turns questions about a cluster ("is an alert firing for this
// GPU?", "did an XID line appear?", "is the job stepping?") into Probes the
// engine polls. Probes over the digital twin read its scraped series and
// kernel log: threshold checks with Prometheus `for:` semantics, absent
// series, relative drops against a baseline, counter increases and log
// matches. The built-in detectors are the alert rules and watchers a typical
// GPU fleet runs, expressed with these.
package probe
