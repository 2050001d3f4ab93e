// Package promapi asks a real Prometheus server, through its HTTP API, the
// questions an experiment's expectations pose: is this alert firing, does
// this query return something, is its value beyond a threshold or near an
// expected one. Each question is a probe.Probe the engine polls; the labels
// of the result say which GPU, node or job an observation is about, so the
// engine can tell an alert about the faulted GPU from one about another.
//
// Only the standard library is used: the instant-query endpoint
// (/api/v1/query) and its JSON envelope are small and stable.
package promapi
