package exhaust

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/cuda"
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
	GPU            int       `json:"gpu"`
	PCIBusID       string    `json:"pci_bus_id"`
	Direction      Direction `json:"direction"`
	CopyBytes      uint64    `json:"copy_bytes"`
	ElapsedSeconds float64   `json:"elapsed_seconds"`
	H2D            *Rate     `json:"h2d,omitempty"`
	D2H            *Rate     `json:"d2h,omitempty"`
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
// reached. It stops early, with what it measured so far, when ctx ends;
// the error then wraps ctx's.
func PCIeStorm(ctx context.Context, opts Options) (StormResult, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return StormResult{}, fmt.Errorf("pcie storm options: %w", err)
	}
	dev, pci, err := device(o.GPU)
	if err != nil {
		return StormResult{}, fmt.Errorf("pcie storm: %w", err)
	}
	res := StormResult{GPU: o.GPU, PCIBusID: pci, Direction: o.Direction, CopyBytes: o.Bytes}
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
	t0 := time.Now()
	deadline := t0.Add(o.Duration)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, l := range lanes {
			if err := l.issue(c, o.Bytes); err != nil {
				return err
			}
		}
		for _, l := range lanes {
			if err := l.finish(o.Bytes); err != nil {
				return err
			}
		}
	}
	res.ElapsedSeconds = time.Since(t0).Seconds()
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

// issue queues one round of copies between the lane's two events.
func (l *lane) issue(c *cuda.Context, n uint64) error {
	if err := l.start.Record(l.stream); err != nil {
		return err
	}
	for range copiesPerRound {
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

// finish waits for the lane's round and adds it to the lane's rate.
func (l *lane) finish(n uint64) error {
	if err := l.end.Synchronize(); err != nil {
		return err
	}
	ms, err := cuda.ElapsedMillis(l.start, l.end)
	if err != nil {
		return err
	}
	l.rate.Copies += copiesPerRound
	l.rate.Bytes += copiesPerRound * n
	l.rate.GPUSeconds += float64(ms) / 1e3
	return nil
}
