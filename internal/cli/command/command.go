// Package command is what the command lines of both binaries share, so
// that gpuchaos and gpuchaos-agent behave alike: a root command run to
// an exit code (signals, one-line errors), and the one logger built from
// --log-level and --log-format.
package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// Main runs root with args and returns the process exit code: 0 on
// success, 1 on a failed run, 2 on bad input. Errors print as one line
// on root's stderr, after root's name.
//
// SIGINT and SIGTERM cancel the command's context: every command stops
// on it (recovering what it injected) and one that then fails exits
// 128+signal (130, 143), as a shell reports a process the signal killed,
// so a script can tell an interrupted run from a failed one. A command
// that ends cleanly on the signal (a server, --follow) exits 0.
func Main(root *cobra.Command, args []string) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			cancel(&SignalError{Signal: s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return Execute(ctx, root, args)
}

// Execute runs root with args under ctx and returns the exit code by
// Main's rule; a ctx whose cause is a *SignalError stands for a signal.
func Execute(ctx context.Context, root *cobra.Command, args []string) int {
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	stderr := root.ErrOrStderr()
	var se *SignalError
	if errors.As(context.Cause(ctx), &se) && (errors.Is(err, context.Canceled) || errors.As(err, new(*SignalError))) {
		msg := strings.ReplaceAll(oneLine(err.Error()), context.Canceled.Error(), se.Error())
		if !strings.Contains(msg, se.Error()) {
			msg += " (" + se.Error() + ")"
		}
		fmt.Fprintf(stderr, "%s: %s\n", root.Name(), msg)
		return 128 + int(se.Signal)
	}
	fmt.Fprintf(stderr, "%s: %s\n", root.Name(), oneLine(err.Error()))
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 2
}

// SignalError is the cause of a context cancelled by a signal.
type SignalError struct{ Signal syscall.Signal }

func (e *SignalError) Error() string { return "stopped by " + unix.SignalName(e.Signal) }

// exitError carries an exit code other than 2 (bad input, the default).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Exit makes err end the process with code instead of 2 (bad input);
// a nil err stays nil.
func Exit(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// Failed marks an error as a failed run (exit 1) rather than bad input.
func Failed(err error) error { return Exit(1, err) }

func oneLine(s string) string {
	out := []rune{}
	for _, r := range s {
		if r == '\n' || r == '\r' {
			r = ' '
		}
		out = append(out, r)
	}
	return string(out)
}
