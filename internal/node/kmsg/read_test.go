package kmsg

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readAllWithin reads r to its end in a goroutine and fails the test when
// that takes longer than d: a reader that waits instead of ending must
// fail, not hang the suite.
func readAllWithin(t *testing.T, r io.Reader, d time.Duration) ([]byte, error) {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(r)
		done <- result{b, err}
	}()
	select {
	case res := <-done:
		return res.b, res.err
	case <-time.After(d):
		t.Fatalf("reading did not end within %v", d)
		return nil, nil
	}
}

// fifo makes a named pipe and opens its write end after r has opened the
// read end, as a stand-in for /dev/kmsg that any user can drive: a
// non-blocking read of an empty FIFO with a writer fails with EAGAIN too.
func fifo(t *testing.T, follow bool) (*Reader, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kmsg")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(path, follow)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return r, w
}

func TestReaderEndsAtTheNewestRecord(t *testing.T) {
	t.Parallel()
	r, w := fifo(t, false)
	const recs = "6,1,2,-;first\n SUBSYSTEM=pci\n6,2,3,-;second\n"
	if _, err := w.WriteString(recs); err != nil {
		t.Fatal(err)
	}
	// The writer stays open: only EAGAIN can end this read.
	got, err := readAllWithin(t, r, 10*time.Second)
	if err != nil || string(got) != recs {
		t.Fatalf("read %q, %v; want %q and the end", got, err, recs)
	}
}

func TestReaderFollows(t *testing.T) {
	t.Parallel()
	r, w := fifo(t, true)
	lines := make(chan string)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 4) // shorter than a record: returned in pieces
		var line strings.Builder
		for {
			n, err := r.Read(buf)
			if err != nil {
				done <- err
				return
			}
			for _, c := range buf[:n] {
				line.WriteByte(c)
				if c == '\n' {
					lines <- line.String()
					line.Reset()
				}
			}
		}
	}()
	for _, rec := range []string{"6,1,2,-;first\n", "6,2,3,-;second record\n"} {
		if _, err := w.WriteString(rec); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-lines:
			if got != rec {
				t.Errorf("read %q, want %q", got, rec)
			}
		case err := <-done:
			t.Fatalf("Read ended with %v while following", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("record %q not read within 10 s", rec)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("Read after Close = %v, want os.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a waiting Read within 10 s")
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestIsKernelLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "kmsg")
	if err := os.WriteFile(file, []byte("6,1,2,-;x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(DefaultPath, link); err != nil {
		t.Fatal(err)
	}
	_, err := os.Stat(DefaultPath)
	real := err == nil
	tests := []struct {
		name string
		path string
		want bool
	}{
		{"the device", DefaultPath, real},
		{"a link to it", link, real},
		{"another character device", "/dev/null", false},
		{"a regular file named kmsg", file, false},
		{"missing", filepath.Join(dir, "nope"), false},
	}
	for _, tt := range tests {
		if got := IsKernelLog(tt.path); got != tt.want {
			t.Errorf("%s: IsKernelLog(%s) = %v, want %v", tt.name, tt.path, got, tt.want)
		}
	}
}

// TestRealReaderEnds writes a line to the real kernel log and reads the
// log back from its start: the line is there and the read ends, as
// 'xid parse /dev/kmsg' must.
func TestRealReaderEnds(t *testing.T) {
	requireRealKmsg(t)
	tag := make([]byte, 8)
	if _, err := rand.Read(tag); err != nil {
		t.Fatal(err)
	}
	msg := "gpuchaos kmsg reader " + hex.EncodeToString(tag)
	if err := Write(LevelInfo, msg); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader("", false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := readAllWithin(t, r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), ";"+msg+"\n") {
		t.Errorf("the line written (%q) is not in the %d bytes read", msg, len(got))
	}
}
