// Package loadlimit holds the bounds of the loads gpuchaos puts on GPUs:
// how long a burn or an exhaustion may run, how much free memory a hold
// may take, how fast a storm may copy. They live apart from the loads
// (internal/gputools/burn and exhaust, which link CUDA) so that the
// injectors that start those loads as child processes check a fault's
// arguments against the same bounds without linking CUDA themselves: the
// node agent's binary runs the loads through the gpuchaos binary and
// stays small.
package loadlimit

import "time"

// Bounds of the loads; burn and exhaust export each under its own name.
const (
	// BurnDuration caps a burn: it must always end on its own.
	BurnDuration = 24 * time.Hour
	// ExhaustDuration caps a storm and, in the CLI, a hold: chaos must
	// end on its own.
	ExhaustDuration = 24 * time.Hour
	// ExhaustFraction is the largest share of free memory a hold may
	// take; the rest leaves the driver room for its own bookkeeping.
	ExhaustFraction = 0.99
	// ExhaustRate bounds a storm's rate, in bytes per second: ten times
	// what a PCIe Gen6 x16 link moves, so any real link fits.
	ExhaustRate = 1 << 40
)
