package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
)

// input is what a parse command (xid parse, topo parse) reads: a file, a
// FIFO, the kernel log, or standard input.
//
// A goroutine of its own opens and reads the source and hands the bytes over
// through an io.Pipe, and when the command's context ends, Read returns at
// once with the context's cause, whatever the goroutine is blocked in. A read
// deadline (os.File.SetReadDeadline) would need no goroutine, but it works
// only on descriptors in the runtime's poller, and standard input is usually
// not one: a terminal, or a pipe a parent handed over (os/exec makes it
// blocking), is a blocking descriptor, on which SetReadDeadline fails with
// os.ErrNoDeadline and nothing but data, the writer closing or the process
// exiting ends a read(2) in progress. Nor is every input an *os.File (tests
// pass an io.Reader). Opening is in the goroutine too, because open(2) of a
// FIFO waits for a writer.
//
// A goroutine left blocked that way is harmless: it reads into its own
// buffer (io.Copy's), it writes only into the pipe, whose writes fail once
// the command has stopped, and the process exits when the command returns.
// Files the poller holds (FIFOs, /dev/kmsg) are closed too when the context
// ends, which ends their goroutine at once.
type input struct {
	name string
	pr   *io.PipeReader
	// klog is the kernel log reader when the input is /dev/kmsg; its
	// overruns are worth a line on stderr.
	klog *kmsg.Reader
	stop context.CancelFunc
}

// Read reads the input; once the command's context ends it returns the
// context's cause.
func (in *input) Read(p []byte) (int, error) { return in.pr.Read(p) }

// Close stops reading. A goroutine blocked in a read of standard input
// stays until that read returns (see input).
func (in *input) Close() { in.stop() }

// stdinName is the input's name when it is standard input.
const stdinName = "standard input"

// openInput opens the FILE argument of a parse command, or standard input
// for "-" or no argument. /dev/kmsg, by any name, is read from its oldest
// record to its newest and ends there, unless follow (xid parse --follow),
// which keeps reading new records; follow names no other input. It returns
// ctx's cause when ctx ends while a FIFO waits for a writer.
func openInput(ctx context.Context, cmd *cobra.Command, args []string, follow bool) (*input, error) {
	name := stdinName
	if len(args) > 0 && args[0] != "-" {
		name = args[0]
	}
	var (
		open  func() (io.Reader, io.Closer, error)
		klog  *kmsg.Reader
		isLog = name != stdinName && kmsg.IsKernelLog(name)
	)
	switch {
	case follow && !isLog:
		return nil, fmt.Errorf("--follow: %s is not the kernel log: only /dev/kmsg can be followed (for a log file, tail -F FILE | gpuchaos xid parse)", name)
	case name == stdinName:
		// Not closed: it is the caller's.
		stdin := cmd.InOrStdin()
		open = func() (io.Reader, io.Closer, error) { return stdin, nil, nil }
	case isLog:
		// A non-blocking open that returns at once: no need to wait for it
		// in the goroutine.
		var err error
		if klog, err = kmsg.OpenReader(name, follow); err != nil {
			return nil, err
		}
		open = func() (io.Reader, io.Closer, error) { return klog, klog, nil }
	default:
		open = func() (io.Reader, io.Closer, error) {
			f, err := os.Open(name)
			if err != nil {
				// *PathError already reads "open FILE: reason".
				return nil, nil, err
			}
			return f, f, nil
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	var (
		mu     sync.Mutex
		closer io.Closer
		closed bool
	)
	closeSource := func() {
		mu.Lock()
		c := closer
		closer, closed = nil, true
		mu.Unlock()
		if c != nil {
			c.Close()
		}
	}
	// Runs in a goroutine of its own when ctx ends or the command closes
	// the input, so that a Close that waits for a read to finish (a
	// regular file's) holds up nothing.
	context.AfterFunc(ctx, func() {
		// The first error set on the pipe's write end wins: reads return
		// the cause, not a late error of the source.
		pw.CloseWithError(context.Cause(ctx))
		closeSource()
	})
	opened := make(chan error, 1)
	go func() {
		src, c, err := open()
		opened <- err
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		mu.Lock()
		if closed && c != nil {
			mu.Unlock()
			c.Close()
			return
		}
		closer = c
		mu.Unlock()
		_, err = io.Copy(pw, src)
		pw.CloseWithError(err) // nil: the reader sees io.EOF
		closeSource()
	}()
	select {
	case err := <-opened:
		if err != nil {
			cancel()
			return nil, err
		}
	case <-ctx.Done():
		err := context.Cause(ctx)
		cancel()
		return nil, err
	}
	return &input{name: name, pr: pr, klog: klog, stop: cancel}, nil
}
