package exhaust

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/gputools/loadlimit"
)

// Limits and defaults of the exhaustion options.
const (
	// MaxDuration caps a storm and, in the CLI, a hold: chaos must end on
	// its own.
	MaxDuration = loadlimit.ExhaustDuration
	// MaxFraction is the largest share of free memory a hold may take;
	// the rest leaves the driver room for its own bookkeeping.
	MaxFraction = loadlimit.ExhaustFraction
	// ChunkBytes is the size of one allocation of a hold. Many moderate
	// allocations fit into a fragmented heap where one huge one would not.
	ChunkBytes = 1 << 30
	// DefaultStormBytes is the size of one copy of a storm: large enough
	// that launch overhead is negligible, small enough to pin easily.
	DefaultStormBytes = 256 << 20
	// MinStormBytes and MaxStormBytes bound Options.Bytes.
	MinStormBytes = 1 << 20
	MaxStormBytes = 16 << 30
	// MaxRate bounds Options.Rate, in bytes per second: ten times what
	// a PCIe Gen6 x16 link moves, so any real link fits.
	MaxRate = loadlimit.ExhaustRate
	// pacedCopyShare is the share of a second of Options.Rate one copy
	// of a paced storm holds by default: a copy moves at the link's
	// speed, so the smaller it is, the closer any short window keeps to
	// the rate.
	pacedCopyShare = 100
)

// Direction is which way a storm copies.
type Direction string

// Directions of a storm. Both runs the two directions at once on two
// streams, as a PCIe link is full duplex.
const (
	HostToDevice Direction = "h2d"
	DeviceToHost Direction = "d2h"
	Both         Direction = "both"
)

// ParseDirection reads a direction name, case-insensitively.
func ParseDirection(s string) (Direction, error) {
	switch d := Direction(strings.ToLower(strings.TrimSpace(s))); d {
	case HostToDevice, DeviceToHost, Both:
		return d, nil
	}
	return "", fmt.Errorf("direction %q: use h2d, d2h or both", s)
}

func (d Direction) h2d() bool { return d == HostToDevice || d == Both }
func (d Direction) d2h() bool { return d == DeviceToHost || d == Both }

// checkFraction rejects a share of free memory outside (0, MaxFraction].
func checkFraction(f float64) error {
	if !(f > 0 && f <= MaxFraction) { // written so that NaN fails too
		return fmt.Errorf("fraction %g: must be above 0 and at most %g", f, MaxFraction)
	}
	return nil
}

// Options configure PCIeStorm.
type Options struct {
	// GPU is the GPU's index in PCI bus order.
	GPU int
	// Bytes is the size of one copy (default DefaultStormBytes).
	Bytes uint64
	// Duration is how long the storm runs; required, at most MaxDuration.
	Duration time.Duration
	// Direction is which way to copy (default Both).
	Direction Direction
	// Rate caps the bytes the storm moves per second, both directions
	// together; 0 means as fast as the link allows. Copies are issued on
	// a schedule (the next may start once the bytes issued so far fit
	// the rate since the start), so the cap holds on average over any
	// window of a few copies, while each copy still runs at link speed.
	// With a rate, Bytes defaults to a hundredth of a second's worth,
	// between MinStormBytes and DefaultStormBytes.
	Rate uint64
	// Started, when set, is called once, from the storm's goroutine, when
	// the buffers are allocated and the first copies are queued: from
	// then on the link is really being taken. It must not block.
	Started func()
}

// withDefaults fills the defaults in and checks the result.
func (o Options) withDefaults() (Options, error) {
	if o.GPU < 0 {
		return o, fmt.Errorf("gpu %d: must not be negative", o.GPU)
	}
	if o.Rate > MaxRate {
		return o, fmt.Errorf("rate %d bytes/s: must be at most %d", o.Rate, uint64(MaxRate))
	}
	if o.Bytes == 0 {
		o.Bytes = DefaultStormBytes
		if o.Rate > 0 {
			o.Bytes = min(max(o.Rate/pacedCopyShare/MinStormBytes*MinStormBytes, MinStormBytes), DefaultStormBytes)
		}
	}
	if o.Bytes < MinStormBytes || o.Bytes > MaxStormBytes {
		return o, fmt.Errorf("copy size %d bytes: must be between %d and %d", o.Bytes, MinStormBytes, MaxStormBytes)
	}
	if o.Duration <= 0 || o.Duration > MaxDuration {
		return o, fmt.Errorf("duration %s: must be above 0 and at most %s", o.Duration, MaxDuration)
	}
	if o.Direction == "" {
		o.Direction = Both
	}
	if _, err := ParseDirection(string(o.Direction)); err != nil {
		return o, err
	}
	return o, nil
}
