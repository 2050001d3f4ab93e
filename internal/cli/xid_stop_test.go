package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/cli/command"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
)

// started is a command running in the background under a context the test
// cancels, with its output readable while it runs.
type started struct {
	stdout, stderr testutil.LockedBuffer
	cancel         context.CancelFunc
	done           chan int // the exit code, as Main would return it
}

// startCLI runs args as Main does, under a context the test cancels as a
// SIGINT would, in place of Main's signal context: a real signal would
// reach every Main running in parallel in this process
// (TestParseStopsOnSignal sends real ones to a child).
func startCLI(t *testing.T, stdin io.Reader, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &started{cancel: func() { cancel(&command.SignalError{Signal: syscall.SIGINT}) }, done: make(chan int, 1)}
	t.Cleanup(s.cancel)
	go func() { s.done <- execute(ctx, args, stdin, &s.stdout, &s.stderr) }()
	return s
}

// waitOutput polls out until it holds want; within is generous, for a
// loaded machine.
func waitOutput(t *testing.T, out *testutil.LockedBuffer, want string, within time.Duration) {
	t.Helper()
	has := func() bool { return strings.Contains(out.String(), want) }
	defer func() {
		if !has() {
			t.Logf("the output so far:\n%s", out.String())
		}
	}()
	testutil.Eventually(t, within, strconv.Quote(want)+" in the output", has)
}

// stopWithin cancels the command and returns its exit code. The command
// returns on ctx.Done without waiting for its read, so it takes
// microseconds; the 5 s bound only fails a command that waits for its
// input, without failing a loaded machine.
func (s *started) stopWithin(t *testing.T) int {
	t.Helper()
	s.cancel()
	select {
	case code := <-s.done:
		return code
	case <-time.After(5 * time.Second):
		t.Fatalf("the command did not return within 5 s of its context ending; stderr:\n%s", s.stderr.String())
		return 0
	}
}

// heldPipe is a stdin whose writer the test never closes while the command
// runs, as a terminal or a silent producer behaves.
func heldPipe(t *testing.T, data string) io.Reader {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() }) // lets the command's reading goroutine end
	go pw.Write([]byte(data))
	return pr
}

// fakeXID is a driver line for a bus id no test machine has, with a marker
// so that a test finds its own line among others in the kernel log. Code 13
// is an application error, which implies no reset to anything else on the
// machine that acts on XIDs (as 'xid bench' chooses).
func fakeXID(t *testing.T) (line, marker string) {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	marker = "gpuchaos-test-" + hex.EncodeToString(b)
	return xid.FormatLine("0000:fe:1f", 13, os.Getpid(), "gpuchaos.test", marker), marker
}

// requireKernelLog skips unless the test can write and read /dev/kmsg: CI
// runs as root, where these tests must run.
func requireKernelLog(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: writing /dev/kmsg needs root; run as root to test the real kernel log")
	}
	if !kmsg.IsKernelLog(kmsg.DefaultPath) {
		t.Skip("no kernel log device at " + kmsg.DefaultPath)
	}
}

// TestXIDParseKernelLog writes an XID line to the real kernel log; 'xid
// parse /dev/kmsg' prints it and ends, where it used to wait for ever.
func TestXIDParseKernelLog(t *testing.T) {
	t.Parallel()
	requireKernelLog(t)
	line, marker := fakeXID(t)
	if err := kmsg.Write(kmsg.LevelErr, line); err != nil {
		t.Fatal(err)
	}
	s := startCLI(t, strings.NewReader(""), "xid", "parse", kmsg.DefaultPath)
	select {
	case code := <-s.done:
		if code != 0 || s.stderr.String() != "" {
			t.Fatalf("exit %d, stderr %q", code, s.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("xid parse /dev/kmsg did not end within 30 s")
	}
	want := `"code":13,"pci":"0000:fe:1f","pid":` + strconv.Itoa(os.Getpid()) + `,"process":"gpuchaos.test","message":"` + marker + `"`
	if !strings.Contains(s.stdout.String(), want) {
		t.Errorf("output lacks %s", want)
	}
}

// TestXIDParseFollow follows the real kernel log: it prints what is there,
// then a line logged after it started, and ends with exit 0 when stopped.
func TestXIDParseFollow(t *testing.T) {
	t.Parallel()
	requireKernelLog(t)
	before, m1 := fakeXID(t)
	after, m2 := fakeXID(t)
	if err := kmsg.Write(kmsg.LevelErr, before); err != nil {
		t.Fatal(err)
	}
	s := startCLI(t, strings.NewReader(""), "xid", "parse", "--follow", kmsg.DefaultPath)
	waitOutput(t, &s.stdout, m1, 30*time.Second)
	if err := kmsg.Write(kmsg.LevelErr, after); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, &s.stdout, m2, 30*time.Second)
	if code := s.stopWithin(t); code != 0 || s.stderr.String() != "" {
		t.Errorf("exit %d, stderr %q; want 0 and nothing: following ends this way", code, s.stderr.String())
	}
}

// TestParseStopsOnCancel runs the parse commands on inputs that never end
// and stops them: each returns at once with exit 1 and a line naming the
// input, having printed what it parsed.
func TestParseStopsOnCancel(t *testing.T) {
	t.Parallel()
	xidLine, _ := fakeXID(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A writer that comes and goes ends the command's open(2), left
		// waiting for one, and so its goroutine.
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	tests := []struct {
		name    string
		stdin   func(t *testing.T) io.Reader
		args    []string
		ready   string // on stdout before the stop
		wantErr []string
	}{
		{
			name:    "xid parse of a pipe held open",
			stdin:   func(t *testing.T) io.Reader { return heldPipe(t, xidLine+"\n") },
			args:    []string{"xid", "parse", "-"},
			ready:   `"code":13`,
			wantErr: []string{"gpuchaos: parse standard input: stopped after 1 line: stopped by SIGINT\n"},
		},
		{
			name:    "xid parse of one endless line",
			args:    []string{"xid", "parse", "/dev/zero"},
			wantErr: []string{"xid parse: 1 line over 65536 bytes was cut\n", "gpuchaos: parse /dev/zero: stopped after 1 line: stopped by SIGINT\n"},
		},
		{
			name:    "xid parse of a FIFO nobody writes",
			args:    []string{"xid", "parse", fifo},
			wantErr: []string{"gpuchaos: xid parse: stopped while opening the input: stopped by SIGINT\n"},
		},
		{
			name:    "topo parse of a pipe held open",
			stdin:   func(t *testing.T) io.Reader { return heldPipe(t, topoH200[:40]) },
			args:    []string{"topo", "parse", "-"},
			wantErr: []string{"gpuchaos: parse standard input: stopped before the input ended: stopped by SIGINT\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdin io.Reader = strings.NewReader("")
			if tt.stdin != nil {
				stdin = tt.stdin(t)
			}
			s := startCLI(t, stdin, tt.args...)
			if tt.ready != "" {
				waitOutput(t, &s.stdout, tt.ready, 30*time.Second)
			} else {
				// Nothing to see: give the command time to block, so the
				// stop finds it reading (or opening), not starting.
				time.Sleep(100 * time.Millisecond)
			}
			code := s.stopWithin(t)
			if code != 130 || s.stderr.String() != strings.Join(tt.wantErr, "") {
				t.Errorf("exit %d, stderr %q; want 130 and %q", code, s.stderr.String(), strings.Join(tt.wantErr, ""))
			}
		})
	}
}

// TestXIDParseFlagsAndBounds covers what xid parse and topo parse refuse or
// report about their input.
func TestXIDParseFlagsAndBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "kern.log")
	long := strings.Repeat("x", xid.MaxLine+1) + "\n"
	xidLine, _ := fakeXID(t)
	if err := os.WriteFile(log, []byte(long+xidLine+"\n"+long+long), 0o644); err != nil {
		t.Fatal(err)
	}
	bigTopo := filepath.Join(dir, "topo.txt")
	if err := os.WriteFile(bigTopo, []byte(topoH200+strings.Repeat(" ", 1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		stdin    string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"cut lines counted", "", []string{"xid", "parse", log}, 0, `"code":13`, "xid parse: 3 lines over 65536 bytes were cut\n"},
		{"one cut line", long, []string{"xid", "parse"}, 0, "", "xid parse: 1 line over 65536 bytes was cut\n"},
		{"follow of standard input", "", []string{"xid", "parse", "--follow"}, 2, "",
			"gpuchaos: --follow: standard input is not the kernel log: only /dev/kmsg can be followed (for a log file, tail -F FILE | gpuchaos xid parse)\n"},
		{"follow of a file", "", []string{"xid", "parse", "--follow", log}, 2, "",
			"gpuchaos: --follow: " + log + " is not the kernel log: only /dev/kmsg can be followed (for a log file, tail -F FILE | gpuchaos xid parse)\n"},
		{"topo over 1 MiB", "", []string{"topo", "parse", bigTopo}, 2, "",
			"gpuchaos: parse " + bigTopo + ": topo: input over the limit of 1048576 bytes (1 MiB); nvidia-smi topo -m prints a few KiB\n"},
		{"topo of /dev/zero", "", []string{"topo", "parse", "/dev/zero"}, 2, "",
			"gpuchaos: parse /dev/zero: topo: input over the limit of 1048576 bytes (1 MiB); nvidia-smi topo -m prints a few KiB\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCLI(t, tt.stdin, tt.args...)
			if code != tt.wantCode || !strings.Contains(out, tt.wantOut) || errs != tt.wantErr {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q in stdout, stderr %q", code, out, errs, tt.wantCode, tt.wantOut, tt.wantErr)
			}
		})
	}
}

// TestInputEnds checks openInput on its own: when the context ends, Read
// returns the cause at once, even from a FIFO whose writer stays, and the
// reading goroutine ends with it wherever the source can be woken (files
// in the poller are closed under it). Not parallel, so that goleak sees
// only this test's goroutines.
func TestInputEnds(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "kern.log")
	if err := os.WriteFile(file, []byte("one\ntwo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		path   string
		writer bool // a writer holds the FIFO open and writes "one\n"
	}{
		{"a regular file", file, false},
		{"a FIFO whose writer stays", fifo, true},
		{"an endless device", "/dev/zero", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			if tt.writer {
				// O_RDWR opens without waiting for a reader and keeps the
				// FIFO's writer side open.
				w, err := os.OpenFile(fifo, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if _, err := w.WriteString("one\n"); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			in, err := openInput(ctx, newRoot(strings.NewReader(""), io.Discard, io.Discard), []string{tt.path}, false)
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			buf := make([]byte, 3)
			if _, err := io.ReadFull(in, buf); err != nil {
				t.Fatalf("first read: %v", err)
			}
			stopped := errors.New("stopped by the test")
			cancel(stopped)
			// A regular file's bytes may already sit in the pipe; the cause
			// comes next.
			var rerr error
			for rerr == nil {
				_, rerr = in.Read(buf)
			}
			// A regular file may have been read to its end before the
			// cancel: then EOF is as right as the cause.
			if !errors.Is(rerr, stopped) && !(tt.path == file && errors.Is(rerr, io.EOF)) {
				t.Errorf("Read after cancel = %v, want the cause", rerr)
			}
			// Before the writer goes: its leaving would end the read too.
			goleak.VerifyNone(t, before)
		})
	}
}
