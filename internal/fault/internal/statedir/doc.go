// Package statedir keeps the per-key records that let a fresh injector,
// in a fresh process, recover what a crashed one injected. Each key has
// one JSON file, named by default from a hash of the key (keys are free
// text; WithNames keeps an older naming), written atomically: a temporary
// file, synced, renamed over the old one, then the directory synced, so a
// reader sees the old record or the new one and a power cut keeps the
// rename. Dir.Inject and Recover hold the skeleton every injector shares:
// one call per key at a time, a recorded key not injected twice, a record
// removed only once its injection is undone. The record's meaning and its
// validation belong to the injector that writes it.
package statedir
