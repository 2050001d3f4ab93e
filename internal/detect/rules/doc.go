// Package rules reads Prometheus alerting and recording rules, tells which
// of them can ever fire on a GPU fleet, and carries the rule packs gpuchaos
// ships.
//
// Load and LoadFiles accept plain Prometheus rule files (a top-level
// `groups:` list) and PrometheusRule custom resources
// (monitoring.coreos.com/v1), several YAML documents per file as kubectl
// manifests have them, and `kind: List` wrappers; LoadFiles also takes a
// directory, for the rule files in it. Every expression is parsed
// with Prometheus' own PromQL parser and every rule is checked with
// Prometheus' rulefmt validation, but errors name the file, the group, the
// rule and its line, because that is what a person fixing a rule file needs.
//
// Analyze walks each parsed expression, finds the metrics it reads and
// decides, from a registry of exporters carried as data
// (exporters/exporters.csv, and each exporter's metrics in metrics/*.csv,
// every row with its provenance), whether the rule can ever produce a result
// on a fleet that runs the exporters it declares (AnalyzeOptions.Exporters;
// by default dcgm-exporter, kube-state-metrics, node-exporter and gpuchaos'
// own series). A rule is never_fires when every way it could produce a
// sample needs a series the declared exporters provably do not produce: one
// of an exporter the fleet does not run, an opt-in counter left off, a
// misspelt name (a typo of a registry name, or one with a unit suffix
// dropped or added), or a recording rule that itself never produces
// anything. It is unknown when it can produce a sample only through metrics
// no registry entry lists, whatever they look like, or when it asks through
// absent() whether such a metric is missing: gpuchaos cannot tell, and
// evaluates it as reading nothing.
//
// Pack and Packs give the bundled packs: the seed's rule, a pack typical of
// what GPU teams deploy, and the recommended pack (packs/README.md documents
// every rule).
package rules
