package kmsg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// DefaultPath is the kernel log device.
const DefaultPath = "/dev/kmsg"

// readBuf is the read buffer size. A read shorter than the record fails
// with EINVAL; the kernel formats a record into at most 8 KiB
// (CONSOLE_EXT_LOG_MAX), so twice that is safe.
const readBuf = 16 << 10

// Options configure a Follower. The zero value follows /dev/kmsg from its
// end.
type Options struct {
	// Path is the device to read; empty means DefaultPath. It must read
	// like /dev/kmsg: one whole record per read.
	Path string
	// FromStart reads every record still in the ring buffer before the
	// new ones, instead of starting at the end.
	FromStart bool
}

// Follower reads kernel log records as they are logged.
type Follower struct {
	path string
	r    io.ReadCloser

	closeOnce sync.Once
	closeErr  error

	// next is the sequence number the next record should carry; valid
	// once seen is true. Only the Run goroutine touches them.
	next uint64
	seen bool

	lost      atomic.Uint64
	overruns  atomic.Uint64
	records   atomic.Uint64
	malformed atomic.Uint64
}

// Open opens the kernel log and, unless opts.FromStart, positions the
// follower at its end: every record logged after Open returns is read by
// Run, and none before it.
func Open(opts Options) (*Follower, error) {
	path := opts.Path
	if path == "" {
		path = DefaultPath
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open kernel log: %w", err)
	}
	if !opts.FromStart {
		// On /dev/kmsg, SEEK_END moves past the newest record (SEEK_DATA
		// would move to the first record after the last "dmesg -C").
		if _, err := f.Seek(0, io.SeekEnd); err != nil {
			f.Close()
			return nil, fmt.Errorf("seek to the end of kernel log %s: %w", path, err)
		}
	}
	return &Follower{path: path, r: f}, nil
}

// newFollower follows any reader with /dev/kmsg's read semantics.
func newFollower(path string, r io.ReadCloser) *Follower {
	return &Follower{path: path, r: r}
}

// Run reads records and calls fn for each, in order, from the calling
// goroutine, until ctx is done or the log cannot be read. fn must return
// promptly: the kernel keeps records only while its ring buffer has room,
// and a slow reader loses the oldest (see Lost). Run closes the log when
// it returns and returns nil when ctx ended it. Run must be called once.
func (f *Follower) Run(ctx context.Context, fn func(Record)) error {
	// Closing the file is what unblocks a read in progress: /dev/kmsg is
	// pollable, so the read waits in the runtime's poller and Close wakes
	// it with os.ErrClosed.
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	defer f.Close()
	buf := make([]byte, readBuf)
	for {
		n, err := f.r.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, syscall.EPIPE) {
				// The ring buffer overwrote records before we read them;
				// the next read returns the oldest left, and the gap in
				// sequence numbers counts what was lost.
				f.overruns.Add(1)
				continue
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read kernel log %s: %w", f.path, err)
		}
		rec, err := ParseRecord(buf[:n])
		if err != nil {
			f.malformed.Add(1)
			continue
		}
		if f.seen && rec.Seq > f.next {
			f.lost.Add(rec.Seq - f.next)
		}
		f.seen, f.next = true, rec.Seq+1
		f.records.Add(1)
		fn(rec)
	}
}

// Close closes the log; a Run in progress returns. It is safe to call more
// than once and concurrently with Run.
func (f *Follower) Close() error {
	f.closeOnce.Do(func() { f.closeErr = f.r.Close() })
	return f.closeErr
}

// Lost returns how many records the kernel dropped before this follower
// read them, counted from gaps in sequence numbers.
func (f *Follower) Lost() uint64 { return f.lost.Load() }

// Overruns returns how many times a read failed with EPIPE because the
// ring buffer had overwritten the follower's position.
func (f *Follower) Overruns() uint64 { return f.overruns.Load() }

// Records returns how many records were read and passed to fn.
func (f *Follower) Records() uint64 { return f.records.Load() }

// Malformed returns how many reads held no parsable record; they are
// skipped.
func (f *Follower) Malformed() uint64 { return f.malformed.Load() }

// Follow opens the kernel log as Open does and runs fn on each record as
// Run does, until ctx is done.
func Follow(ctx context.Context, opts Options, fn func(Record)) error {
	f, err := Open(opts)
	if err != nil {
		return err
	}
	return f.Run(ctx, fn)
}
