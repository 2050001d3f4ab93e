// Package rules reads Prometheus alerting and recording rules, tells which
// of them can ever fire on a GPU fleet, and carries the rule packs gpuchaos
// ships.
//
// Load and LoadFiles accept plain Prometheus rule files (a top-level
// `groups:` list) and PrometheusRule custom resources
// (monitoring.coreos.com/v1), several YAML documents per file as kubectl
// manifests have them, and `kind: List` wrappers. Every expression is parsed
// with Prometheus' own PromQL parser and every rule is checked with
// Prometheus' rulefmt validation, but errors name the file, the group, the
// rule and its line, because that is what a person fixing a rule file needs.
//
// Analyze walks each parsed expression, finds the metrics it reads and
// decides, from the exporter metrics this package carries as data
// (metrics/*.csv, each row with its provenance), whether the rule can ever
// produce a result: a rule that reads a metric no exporter produces, an
// opt-in dcgm-exporter counter that is switched off, or a recording rule that
// itself never produces anything, can never fire. The analysis is
// conservative: it says never_fires only when every way the expression could
// produce a sample needs a metric that is absent.
//
// Pack and Packs give the bundled packs: the seed's rule, a pack typical of
// what GPU teams deploy, and the recommended pack (packs/README.md documents
// every rule).
package rules
