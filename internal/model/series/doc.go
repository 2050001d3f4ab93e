// Package series holds the data types every reader of metrics shares: a
// labelled time series, its samples, Prometheus' staleness marker and a
// kernel log line. The twin produces them, a scrape of a real exporter
// produces them, and the probes and the PromQL evaluator read them; keeping
// them here means nothing that reads a real node links the simulator.
package series
