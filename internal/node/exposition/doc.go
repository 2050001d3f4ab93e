// Package exposition serves a Prometheus /metrics page built from a
// snapshot, through client_golang's promhttp and expfmt: the one handler
// of the agent and the live twin.
//
// A scrape calls Options.Gather, which fills a Builder from the caller's
// newest state (under the caller's lock) and returns its families;
// promhttp then negotiates the format with the scraper (the text format,
// version 0.0.4, unless it asks for protobuf), compresses when asked and
// encodes with expfmt. The page is built straight as client_model's
// MetricFamily rather than through a prometheus.Registry of collectors:
// a registry would turn every sample into a const metric, sort label
// pairs by name and families by name and hash every series for its
// consistency check on each scrape, while the callers already hold a
// snapshot whose series are unique by construction. Building it directly
// costs less and keeps dcgm-exporter's label order (gpu, UUID,
// pci_bus_id, device, modelName, Hostname) and the callers' family order.
//
// A family with no samples is left out of the page, so a series whose
// source is gone (a GPU off the bus) drops, and its family with it when it
// was the last. OpenMetrics is not offered: its encoder appends _total to
// every counter, which would rename dcgm-exporter's counters
// (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) under alert rules written for
// them.
package exposition
