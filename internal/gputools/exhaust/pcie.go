package exhaust

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
	"github.com/gpuchaos/gpuchaos/internal/node/tick"
)

// copiesPerRound is how many copies each direction issues between two
// timing events: enough to keep the copy engine busy between the host's
// checks of the clock, few enough that a stop is prompt (256 MiB at
// ~55 GB/s is ~5 ms a copy).
const copiesPerRound = 8

// Rate is what one direction of a storm moved.
type Rate struct {
	// Copies and Bytes count the completed copies.
	Copies int    `json:"copies"`
	Bytes  uint64 `json:"bytes"`
	// GPUSeconds is the copy time measured with CUDA events.
	GPUSeconds float64 `json:"gpu_seconds"`
	// GBps is Bytes / GPUSeconds in 10⁹ bytes per second.
	GBps float64 `json:"gb_per_s"`
}

// StormResult is what a storm measured. A direction not run is nil.
type StormResult struct {
	GPU       int       `json:"gpu"`
	PCIBusID  string    `json:"pci_bus_id"`
	Direction Direction `json:"direction"`
	CopyBytes uint64    `json:"copy_bytes"`
	// RateLimit is Options.Rate, bytes per second both directions
	// together (0: none).
	RateLimit      uint64  `json:"rate_limit_bytes_per_s"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// AverageGBps is every byte queued, both directions, over the
	// elapsed wall time, in 10⁹ bytes per second: what the link carried
	// on average, which a rate keeps below the link's speed. Each
	// direction's GBps is its speed while copying.
	AverageGBps float64 `json:"average_gb_per_s"`
	H2D         *Rate   `json:"h2d,omitempty"`
	D2H         *Rate   `json:"d2h,omitempty"`
}

// lane is one direction's buffers, stream and timing events.
type lane struct {
	h2d        bool
	host       cuda.HostBuffer
	dev        cuda.DevicePtr
	stream     cuda.Stream
	start, end cuda.Event
	rate       Rate
}

// PCIeStorm copies between pinned host memory (cuMemHostAlloc) and device
// memory for the duration, in the chosen direction (both directions at
// once on two streams for Both), and returns the bandwidth each direction
// reached. With Options.Rate it paces the copies to that many bytes per
// second, both directions together; Options.Started says when the link is
// first taken. It stops early, with what it measured so far, when ctx
// ends; the error then wraps ctx's.
func PCIeStorm(ctx context.Context, opts Options) (StormResult, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return StormResult{}, fmt.Errorf("pcie storm options: %w", err)
	}
	dev, pci, err := device(o.GPU)
	if err != nil {
		return StormResult{}, fmt.Errorf("pcie storm: %w", err)
	}
	res := StormResult{GPU: o.GPU, PCIBusID: pci, Direction: o.Direction, CopyBytes: o.Bytes, RateLimit: o.Rate}
	// The work runs on a goroutine of its own so that locking the OS
	// thread never leaks into the caller's goroutine.
	errc := make(chan error, 1)
	go func() { errc <- storm(ctx, dev, o, &res) }()
	if err := <-errc; err != nil {
		return res, fmt.Errorf("pcie storm on gpu %d (%s): %w", o.GPU, pci, err)
	}
	return res, nil
}

func storm(ctx context.Context, dev cuda.Device, o Options, res *StormResult) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := dev.RetainPrimaryContext()
	if err != nil {
		return err
	}
	var cleanup []func() error
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanup[i]())
		}
		err = errors.Join(err, c.Release())
	}()
	var lanes []*lane
	for _, toDev := range []bool{true, false} {
		if (toDev && !o.Direction.h2d()) || (!toDev && !o.Direction.d2h()) {
			continue
		}
		l := &lane{h2d: toDev}
		if l.host, err = c.HostAlloc(o.Bytes); err != nil {
			return err
		}
		host := l.host
		cleanup = append(cleanup, func() error { return c.FreeHost(host) })
		if l.dev, err = c.Alloc(o.Bytes); err != nil {
			return err
		}
		d := l.dev
		cleanup = append(cleanup, func() error { return c.Free(d) })
		if l.stream, err = c.NewStream(); err != nil {
			return err
		}
		s := l.stream
		cleanup = append(cleanup, s.Destroy)
		for _, e := range []*cuda.Event{&l.start, &l.end} {
			if *e, err = c.NewEvent(); err != nil {
				return err
			}
			ev := *e
			cleanup = append(cleanup, ev.Destroy)
		}
		// Pinned pages are only guaranteed resident once written; a fill
		// also keeps the copies from moving freshly zeroed pages.
		clear(l.host.Bytes())
		lanes = append(lanes, l)
	}
	// A paced storm issues one copy per lane a round, so the schedule
	// decides every copy; an unpaced one keeps each copy engine fed with
	// several between two looks at the clock.
	perRound := copiesPerRound
	if o.Rate > 0 {
		perRound = 1
	}
	t0 := time.Now()
	deadline := t0.Add(o.Duration)
	var issued uint64 // bytes queued so far, both lanes together
	started := false
	round := uint64(perRound) * o.Bytes * uint64(len(lanes))
	for ctx.Err() == nil {
		// The round's own bytes count: by the time it is queued, no more
		// than the rate allows has been queued, so the average over the
		// run stays at or under the rate, never a copy above it.
		at := issueAt(t0, issued+round, o.Rate)
		if now := time.Now(); now.After(at) {
			at = now
		}
		if !at.Before(deadline) || !sleepUntil(ctx, at) {
			break
		}
		for _, l := range lanes {
			if err := l.issue(c, o.Bytes, perRound); err != nil {
				return err
			}
			issued += uint64(perRound) * o.Bytes
		}
		if !started && o.Started != nil {
			o.Started()
		}
		started = true
		for _, l := range lanes {
			if err := l.finish(o.Bytes, perRound); err != nil {
				return err
			}
		}
	}
	res.ElapsedSeconds = time.Since(t0).Seconds()
	if res.ElapsedSeconds > 0 {
		res.AverageGBps = float64(issued) / res.ElapsedSeconds / 1e9
	}
	for _, l := range lanes {
		r := l.rate
		if r.GPUSeconds > 0 {
			r.GBps = float64(r.Bytes) / r.GPUSeconds / 1e9
		}
		if l.h2d {
			res.H2D = &r
		} else {
			res.D2H = &r
		}
	}
	return ctx.Err()
}

// issueAt is the earliest time at which a storm that began at t0 may have
// queued issued bytes in all without moving over rate bytes per second on
// average since t0; rate 0 means at once. Computing the time from the total, rather
// than sleeping a fixed time after each copy, keeps the long-run rate
// exact whatever the copies and the host's wake-ups cost.
func issueAt(t0 time.Time, issued, rate uint64) time.Time {
	if rate == 0 {
		return t0
	}
	// Whole seconds, then the rest in nanoseconds rounded up, in 128-bit
	// integer arithmetic: rounding down, or a float's error, would let a
	// copy go a little early and the rate creep over the cap.
	whole, rest := issued/rate, issued%rate
	hi, lo := bits.Mul64(rest, uint64(time.Second))
	ns, rem := bits.Div64(hi, lo, rate) // hi < rate because rest < rate
	if rem > 0 {
		ns++
	}
	return t0.Add(time.Duration(whole)*time.Second + time.Duration(ns))
}

// sleepUntil waits until t and reports true, or reports false as soon as
// ctx ends.
func sleepUntil(ctx context.Context, t time.Time) bool { return tick.Sleep(ctx, time.Until(t)) == nil }

// issue queues k copies between the lane's two events.
func (l *lane) issue(c *cuda.Context, n uint64, k int) error {
	if err := l.start.Record(l.stream); err != nil {
		return err
	}
	for range k {
		var err error
		if l.h2d {
			err = c.CopyToDeviceAsync(l.dev, l.host, n, l.stream)
		} else {
			err = c.CopyFromDeviceAsync(l.host, l.dev, n, l.stream)
		}
		if err != nil {
			return err
		}
	}
	return l.end.Record(l.stream)
}

// finish waits for the lane's k copies and adds them to the lane's rate.
func (l *lane) finish(n uint64, k int) error {
	if err := l.end.Synchronize(); err != nil {
		return err
	}
	ms, err := cuda.ElapsedMillis(l.start, l.end)
	if err != nil {
		return err
	}
	l.rate.Copies += k
	l.rate.Bytes += uint64(k) * n
	l.rate.GPUSeconds += float64(ms) / 1e3
	return nil
}
