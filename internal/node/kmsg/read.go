package kmsg

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Reader reads the kernel log as text: every record still in the ring
// buffer, oldest first, then (when following) each new one, each as
// /dev/kmsg formats it — header, message and continuation lines, one
// newline-ended line apiece. Without Follow it ends with io.EOF once it has
// caught up with the newest record, which /dev/kmsg signals by failing a
// non-blocking read with EAGAIN; a blocking read would wait there for the
// next record instead, forever on a quiet node.
//
// Read and Close may be called from different goroutines; Close makes a
// following Read that waits for a record return.
type Reader struct {
	path   string
	f      *os.File
	rc     syscall.RawConn
	follow bool
	buf    []byte // one record, as read
	rest   []byte // the part of buf Read has not returned yet

	closed   atomic.Bool
	overruns atomic.Uint64
}

// OpenReader opens the kernel log at path (DefaultPath when empty) for
// reading from its oldest record; with follow, Read waits for new records
// at the end instead of returning io.EOF.
func OpenReader(path string, follow bool) (*Reader, error) {
	if path == "" {
		path = DefaultPath
	}
	// O_NONBLOCK lets read(2) say EAGAIN at the end, and puts the
	// descriptor in the runtime's poller, so a following reader waits
	// there and Close wakes it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open kernel log: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open kernel log %s: %w", path, err)
	}
	return &Reader{path: path, f: f, rc: rc, follow: follow, buf: make([]byte, readBuf)}, nil
}

// Read copies the next bytes of the log into p. A record longer than p is
// returned over several calls.
func (r *Reader) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		n, err := r.readRecord()
		if err != nil {
			return 0, err
		}
		r.rest = r.buf[:n]
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// readRecord reads one record into r.buf. /dev/kmsg returns a whole record
// per read(2), so r.buf must hold the longest (readBuf).
func (r *Reader) readRecord() (int, error) {
	for {
		var n int
		var rerr error
		err := r.rc.Read(func(fd uintptr) bool {
			for {
				n, rerr = syscall.Read(int(fd), r.buf)
				if rerr != syscall.EINTR {
					break
				}
			}
			// false waits in the poller for the fd to be readable and
			// calls again: that is following.
			return !(r.follow && rerr == syscall.EAGAIN)
		})
		switch {
		case err != nil && r.closed.Load():
			// RawConn says "use of closed file" without os.ErrClosed,
			// which os.File.Read would have given.
			return 0, fmt.Errorf("read kernel log %s: %w", r.path, os.ErrClosed)
		case err != nil:
			return 0, fmt.Errorf("read kernel log %s: %w", r.path, err)
		case rerr == nil && n > 0:
			return n, nil
		case rerr == nil, rerr == syscall.EAGAIN:
			return 0, io.EOF
		case rerr == syscall.EPIPE:
			// The ring buffer overwrote records before we read them; the
			// next read returns the oldest one left.
			r.overruns.Add(1)
		default:
			return 0, fmt.Errorf("read kernel log %s: %w", r.path, rerr)
		}
	}
}

// Overruns returns how many times the kernel overwrote records before this
// reader reached them; each time, one or more records were lost.
func (r *Reader) Overruns() uint64 { return r.overruns.Load() }

// Close closes the log. It is safe to call more than once and while a Read
// waits, which then returns an error.
func (r *Reader) Close() error {
	r.closed.Store(true)
	if err := r.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("close kernel log %s: %w", r.path, err)
	}
	return nil
}

// IsKernelLog reports whether path names the kernel log device, character
// device 1:11, by whatever name: a container may bind-mount it elsewhere,
// and a symbolic link may point at it.
func IsKernelLog(path string) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(st.Rdev) == 1 && unix.Minor(st.Rdev) == 11
}
