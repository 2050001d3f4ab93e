// Package e2e holds end-to-end tests that run gpuchaos against real
// third-party servers rather than fakes: a live twin serving /metrics, the
// Prometheus server from Debian's packages scraping it and evaluating alert
// rules, and the engine injecting a fault and judging, through Prometheus'
// HTTP API, whether the real alert fired and how fast; and the same
// Prometheus timing real rules on live twins against what coverage predicts
// on the virtual clock.
//
// The tests need /usr/bin/prometheus; scripts/setup-prometheus installs it
// and scripts/test runs that first, so CI always has it. The package has no
// code of its own.
package e2e
