package exhaust

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
)

// HoldInfo describes a hold once its memory is allocated and touched.
type HoldInfo struct {
	// GPU and PCIBusID name the GPU.
	GPU      int    `json:"gpu"`
	PCIBusID string `json:"pci_bus_id"`
	// Fraction is the share of free memory asked for.
	Fraction float64 `json:"fraction"`
	// TotalBytes is the device's memory; FreeBefore and FreeAfter are
	// cuMemGetInfo's free bytes before allocating and once held.
	TotalBytes uint64 `json:"total_bytes"`
	FreeBefore uint64 `json:"free_before_bytes"`
	FreeAfter  uint64 `json:"free_after_bytes"`
	// HeldBytes is what the hold allocated, in Chunks allocations.
	HeldBytes uint64 `json:"held_bytes"`
	Chunks    int    `json:"chunks"`
}

// Hold is device memory taken by HoldVRAM. It is freed by Release or when
// the context given to HoldVRAM ends, whichever comes first.
type Hold struct {
	info    HoldInfo
	stop    chan struct{}
	once    sync.Once
	done    chan struct{}
	freeErr error
}

// Info returns what the hold took.
func (h *Hold) Info() HoldInfo { return h.info }

// Done is closed once the memory has been given back.
func (h *Hold) Done() <-chan struct{} { return h.done }

// Release frees the memory and waits until it is given back. It may be
// called any number of times, also after the context ended; every call
// returns the error, if any, of freeing.
func (h *Hold) Release() error {
	h.once.Do(func() { close(h.stop) })
	<-h.done
	return h.freeErr
}

// chunkSizes splits n bytes into ChunkBytes pieces and a remainder.
func chunkSizes(n uint64) []uint64 {
	out := make([]uint64, 0, n/ChunkBytes+1)
	for n > 0 {
		c := min(n, uint64(ChunkBytes))
		out = append(out, c)
		n -= c
	}
	return out
}

// holdBytes is the allocation for a fraction of free memory, rounded down
// to 2 MiB, the driver's allocation granularity for large blocks.
func holdBytes(free uint64, fraction float64) uint64 {
	const gran = 2 << 20
	return uint64(float64(free)*fraction) / gran * gran
}

// HoldVRAM allocates fraction of the GPU's free device memory (as
// cuMemGetInfo reports it) in chunks of at most ChunkBytes, writes every
// byte so the pages are really backed, and holds it until Release or until
// ctx ends. It returns once the memory is held. If an allocation fails,
// what was taken is freed and the error names how far it got.
func HoldVRAM(ctx context.Context, gpu int, fraction float64) (*Hold, error) {
	if err := checkFraction(fraction); err != nil {
		return nil, fmt.Errorf("hold vram: %w", err)
	}
	if gpu < 0 {
		return nil, fmt.Errorf("hold vram: gpu %d: must not be negative", gpu)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("hold vram: %w", err)
	}
	dev, pci, err := device(gpu)
	if err != nil {
		return nil, fmt.Errorf("hold vram: %w", err)
	}
	h := &Hold{stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan error, 1)
	go h.run(ctx, dev, HoldInfo{GPU: gpu, PCIBusID: pci, Fraction: fraction}, ready)
	if err := <-ready; err != nil {
		<-h.done
		return nil, fmt.Errorf("hold vram on gpu %d (%s): %w", gpu, pci, err)
	}
	return h, nil
}

// run owns the context and the memory for the hold's whole life, on one
// locked OS thread; it reports on ready once held (or failed) and closes
// done once everything is freed.
func (h *Hold) run(ctx context.Context, dev cuda.Device, info HoldInfo, ready chan<- error) {
	defer close(h.done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := dev.RetainPrimaryContext()
	if err != nil {
		ready <- err
		return
	}
	var ptrs []cuda.DevicePtr
	release := func() error {
		var errs []error
		for _, p := range ptrs {
			if err := c.Free(p); err != nil {
				errs = append(errs, err)
			}
		}
		if err := c.Release(); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	fail := func(err error) {
		ready <- errors.Join(err, release())
	}
	info.FreeBefore, info.TotalBytes, err = c.MemInfo()
	if err != nil {
		fail(fmt.Errorf("read free memory: %w", err))
		return
	}
	want := holdBytes(info.FreeBefore, info.Fraction)
	for i, n := range chunkSizes(want) {
		p, err := c.Alloc(n)
		if err != nil {
			fail(fmt.Errorf("chunk %d after %d of %d bytes: %w", i, info.HeldBytes, want, err))
			return
		}
		ptrs = append(ptrs, p)
		// Writing the chunk makes the driver back every page now, so the
		// memory is gone for other processes, not merely reserved.
		if err := c.Memset(p, 0xA5, n); err != nil {
			fail(fmt.Errorf("touch chunk %d: %w", i, err))
			return
		}
		info.HeldBytes += n
		info.Chunks++
		if ctx.Err() != nil {
			fail(ctx.Err())
			return
		}
	}
	if info.FreeAfter, _, err = c.MemInfo(); err != nil {
		fail(fmt.Errorf("read free memory once held: %w", err))
		return
	}
	h.info = info
	ready <- nil
	select {
	case <-ctx.Done():
	case <-h.stop:
	}
	h.freeErr = release()
}
