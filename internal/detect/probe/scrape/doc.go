// Package scrape keeps a short history of an exporter's /metrics page, as a
// Prometheus server would, so that threshold probes and the built-in
// detectors run where there is no Prometheus: on one node, against the
// gpuchaos agent (or dcgm-exporter) beside it. A series missing from a page
// it was on gets Prometheus' staleness marker, so detectors that watch for
// a GPU's series vanishing work the same way as on the twin.
package scrape
