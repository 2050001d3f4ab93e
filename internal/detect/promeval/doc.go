// Package promeval evaluates Prometheus alerting and recording rules with
// the real PromQL engine (github.com/prometheus/prometheus/promql) over the
// digital twin's series, on the twin's virtual clock.
//
// Storage adapts a Source (the twin) to storage.Queryable: series get
// their metric name as __name__, staleness markers pass through, and each
// query reads the sample slices as they are when it selects them. Evaluate
// runs a rule set over a time span and reports every alert with when it
// went pending and when it fired, and the series the recording rules
// wrote. A Watch evaluates one alerting rule incrementally, for a probe
// the engine polls (internal/detect/probe's alert probes, which the built-in
// detectors are).
//
// # Semantics
//
// The rules manager's behaviour (Prometheus' rules/alerting.go and
// rules/group.go) is reproduced, not imported: package rules pulls in the
// notifier and about 80 more modules, and we need neither its goroutines
// nor its wall clock.
//
//   - A group is evaluated at multiples of its interval since the Unix
//     epoch (the group's interval, or Options.Interval, by default 15s).
//     Prometheus adds a phase per group, a hash of its name within the
//     interval; we leave it out, which moves detection times by less than
//     one interval and makes them reproducible.
//   - An alert's label set goes pending at the first evaluation that
//     returns it (ActiveAt) and fires at the first evaluation with
//     ts − ActiveAt ≥ for. A pending alert that is not returned is
//     dropped; it starts over when it comes back. A firing one that is
//     not returned resolves, unless keep_firing_for is set: it then keeps
//     firing while ts − (first evaluation without it) < keep_firing_for,
//     and that clock resets whenever the expression returns it again.
//   - Alert labels are the result's labels without __name__, then the
//     rule's labels, then alertname. Label and annotation templates are not
//     expanded.
//   - An evaluation that fails (a query error, two results with the same
//     alert or recorded labels) changes nothing, as in Prometheus; the rule
//     is listed in Result.Errors with the first error and a count.
//   - Recording rules write their results at the evaluation timestamp with
//     __name__ set to the record and the rule's labels applied, and a
//     staleness marker when a series the previous evaluation returned is
//     gone, so readers see it vanish at once.
//   - Visibility of recorded series: a rule sees what earlier rules of its
//     own group recorded at the same timestamp (a group runs its rules in
//     order). Everything else (another group, a later rule of its group,
//     itself) it sees as of the previous evaluation. Prometheus runs groups
//     independently at their own phases, so whether another group's
//     result of this round is already written depends on phases we do not
//     model; assuming it is not never overstates detection speed and makes
//     results independent of the order of groups. Technically, those
//     samples are served 1 ms later than written.
//   - ALERTS and ALERTS_FOR_STATE series are not written, and `for` state
//     is not restored across runs: every evaluation starts clean.
//
// # Speed
//
// Evaluate runs each rule as one range query over the whole span with the
// group's interval as step: each step of a range query equals the instant
// query at that time, and the engine shares the work between steps. The
// `for` and keep_firing_for state machine then runs over the per-step
// results, and recorded results become series before the rules that read
// them run (rules are ordered by what they read). Rules using @ start() or
// @ end(), whose meaning differs between range and instant queries, run
// as one instant query per step; rule sets whose records depend on each
// other in a cycle are evaluated timestamp by timestamp, group by group,
// as Prometheus does. A test proves the range path equal to the
// timestamp-by-timestamp one on twin scenarios.
package promeval
