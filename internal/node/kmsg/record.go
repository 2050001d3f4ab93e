package kmsg

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Syslog levels, as the kernel's KERN_* prefixes use them.
const (
	LevelEmerg   = 0
	LevelAlert   = 1
	LevelCrit    = 2
	LevelErr     = 3
	LevelWarning = 4
	LevelNotice  = 5
	LevelInfo    = 6
	LevelDebug   = 7
)

// Syslog facilities a kernel log record can carry.
const (
	// FacilityKern marks records the kernel itself logged (printk).
	FacilityKern = 0
	// FacilityUser marks records written to /dev/kmsg from user space
	// without a facility of their own.
	FacilityUser = 1
)

// Record is one kernel log record as /dev/kmsg presents it.
type Record struct {
	// Priority is the syslog level, 0 (emerg) to 7 (debug).
	Priority int
	// Facility is the syslog facility: 0 for the kernel's own records,
	// 1 (user) for lines written to /dev/kmsg from user space.
	Facility int
	// Seq is the record's sequence number; consecutive records have
	// consecutive numbers.
	Seq uint64
	// Time is the kernel's time stamp: time since boot, in the kernel's
	// monotonic clock, with microsecond resolution.
	Time time.Duration
	// Flags is the header's flags field: "-" for a whole record, "c" or
	// "+" for pieces of a continued line.
	Flags string
	// Message is the record's text with the kernel's \xNN escapes undone.
	Message string
	// Dict holds the continuation lines' KEY=value properties, nil when
	// there are none.
	Dict map[string]string
}

// errMalformed reports a record that does not follow the /dev/kmsg format.
var errMalformed = errors.New("malformed kernel log record")

// ParseRecord reads one /dev/kmsg record: a header line and its
// continuation lines, the trailing newline optional.
func ParseRecord(b []byte) (Record, error) {
	head, rest, _ := bytes.Cut(b, []byte{'\n'})
	fields, msg, ok := bytes.Cut(head, []byte{';'})
	if !ok {
		return Record{}, fmt.Errorf("%w: no ';' after the header", errMalformed)
	}
	// Fields past the fourth are reserved for future use and skipped.
	parts := strings.SplitN(string(fields), ",", 5)
	if len(parts) < 4 {
		return Record{}, fmt.Errorf("%w: header %q has fewer than 4 fields", errMalformed, fields)
	}
	prio, err := strconv.ParseUint(parts[0], 10, 31)
	if err != nil {
		return Record{}, fmt.Errorf("%w: priority %q", errMalformed, parts[0])
	}
	seq, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return Record{}, fmt.Errorf("%w: sequence %q", errMalformed, parts[1])
	}
	usec, err := strconv.ParseUint(parts[2], 10, 63)
	if err != nil || usec > uint64(1<<63-1)/uint64(time.Microsecond) {
		return Record{}, fmt.Errorf("%w: time stamp %q", errMalformed, parts[2])
	}
	r := Record{
		Priority: int(prio & 7),
		Facility: int(prio >> 3),
		Seq:      seq,
		Time:     time.Duration(usec) * time.Microsecond,
		Flags:    parts[3],
		Message:  unescape(msg),
	}
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte{'\n'})
		if len(line) == 0 {
			continue
		}
		if line[0] != ' ' {
			return Record{}, fmt.Errorf("%w: continuation line %q does not start with a space", errMalformed, line)
		}
		k, v, ok := bytes.Cut(line[1:], []byte{'='})
		if !ok {
			return Record{}, fmt.Errorf("%w: continuation line %q has no '='", errMalformed, line)
		}
		if r.Dict == nil {
			r.Dict = map[string]string{}
		}
		r.Dict[string(k)] = unescape(v)
	}
	return r, nil
}

// unescape undoes the kernel's \xNN escapes. A backslash not followed by
// x and two hex digits is kept as written: the kernel escapes every
// backslash it prints, so that only happens in text it did not write.
func unescape(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b)
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+3 < len(b) && b[i+1] == 'x' {
			if v, err := strconv.ParseUint(string(b[i+2:i+4]), 16, 8); err == nil {
				out = append(out, byte(v))
				i += 3
				continue
			}
		}
		out = append(out, b[i])
	}
	return string(out)
}
