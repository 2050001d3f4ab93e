// Package live runs the digital twin in real time, so that a real
// Prometheus can scrape it and a real alerting pipeline can be tested
// against faults the engine injects.
//
// A Runner owns a twin behind a mutex. Start advances the twin's virtual
// clock with the wall clock (times a speed factor) on an aligned ticker,
// trims samples older than the retention so memory stays bounded, and
// returns when its context ends. ServeHTTP serves /metrics through the
// exposition package's handler, in the Prometheus text format (version
// 0.0.4) unless the scraper asks for protobuf: the newest value of
// every series that is not stale, so a GPU that falls off the bus simply
// disappears from the page, as it does from dcgm-exporter's. Apply and
// Revert take the lock, so the Runner is the fault.TwinPlayer of a live
// engine target; WithTwin gives locked access to everything else.
package live
