package kmsg

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// MaxMessage is the longest message Write accepts. The kernel refuses a
// write longer than its record limit (1024 bytes in current kernels,
// PRINTKRB_RECORD_MAX) with EINVAL; the "<N>" prefix counts towards it.
const MaxMessage = 1000

// Writer logs records to a kernel log device. The zero value writes to
// /dev/kmsg. It is safe for concurrent use.
type Writer struct {
	// Path is the device to write; empty means DefaultPath. Tests may name
	// a regular file, which receives the same bytes.
	Path string
}

// Write logs msg as one kernel log record at level (LevelEmerg …
// LevelDebug). The kernel stores it with facility user, not kern: user
// space cannot claim facility 0. Writing needs CAP_SYSLOG or root, and
// msg must be one printable line.
//
// Each call opens the device afresh. The kernel rate-limits writes per
// open file (kernel.printk_devkmsg=ratelimit, the default: 10 records per
// 5 s) and drops the excess while reporting success, so a long-lived
// descriptor would lose lines without an error.
func (w Writer) Write(level int, msg string) error {
	if level < LevelEmerg || level > LevelDebug {
		return fmt.Errorf("write kernel log: level %d is not a syslog level (0-7)", level)
	}
	if msg == "" {
		return fmt.Errorf("write kernel log: empty message")
	}
	if len(msg) > MaxMessage {
		return fmt.Errorf("write kernel log: message of %d bytes is longer than %d", len(msg), MaxMessage)
	}
	if i := strings.IndexFunc(msg, func(r rune) bool { return r < ' ' || r == 0x7f }); i >= 0 {
		// A newline would split the record in readers that print it, and
		// a forged second line is exactly what must not happen.
		return fmt.Errorf("write kernel log: control character %q at byte %d", msg[i], i)
	}
	path := w.Path
	if path == "" {
		path = DefaultPath
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("write kernel log: %w", err)
	}
	// One write(2) is one record: the prefix, text and newline go
	// together. The newline matters: without it the kernel keeps the
	// record open for a continuation and readers of /dev/kmsg do not see
	// it until some other record is logged.
	_, werr := f.Write([]byte("<" + strconv.Itoa(level) + ">" + msg + "\n"))
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write kernel log %s: %w", path, werr)
	}
	if cerr != nil {
		return fmt.Errorf("write kernel log %s: close: %w", path, cerr)
	}
	return nil
}

// Write logs msg to /dev/kmsg at level; see Writer.Write.
func Write(level int, msg string) error { return Writer{}.Write(level, msg) }
