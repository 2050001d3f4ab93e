// Package schedule is the controller of v1alpha1.Schedule: it starts an
// Experiment from spec.experiment at each time the cron expression names,
// as a CronJob starts Jobs, and keeps the Schedule's history and status.
//
// A due time is acted on once: it starts a run, named
// <schedule>-<unix minutes> and labelled gpuchaos.dev/schedule, or it is
// skipped (Forbid while a run is active, or found later than the starting
// deadline), recorded in status.lastScheduleTime or status.lastSkippedTime.
// The newest of those two and the Schedule's creation is where the next
// due time is looked for, so a controller restart neither repeats nor
// invents runs. Only the newest due time is considered: a controller that
// was down for several does not start a burst of experiments.
//
// All time comes from an injected Clock, so tests move time instead of
// waiting for it; the reconciler asks to be requeued at the next due time.
package schedule
