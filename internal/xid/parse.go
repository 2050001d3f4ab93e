package xid

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Event kinds.
const (
	// KindXID is a GPU XID from the NVIDIA kernel driver (NVRM).
	KindXID = "xid"
	// KindSXID is an NVSwitch SXid from the nvidia-nvswitch driver.
	KindSXID = "sxid"
)

// Event is one XID or SXid read from a kernel log. Its JSON form is the
// output of 'gpuchaos xid parse' (DESIGN.md §4) and must stay stable.
type Event struct {
	// Kind is KindXID or KindSXID.
	Kind string `json:"kind"`
	// Code is the XID or SXid number, always above zero.
	Code int `json:"code"`
	// PCI is the device's domain:bus:device in lower case (0000:3b:00),
	// without the function the switch driver prints.
	PCI string `json:"pci"`
	// PID is the process the driver attributed the error to; nil when the
	// line has none or says '<unknown>'.
	PID *int `json:"pid"`
	// Process is that process's name; nil when absent or <unknown>.
	Process *string `json:"process"`
	// Message is the text after "code, " and after the pid and name when
	// present. For an SXid it starts with the severity ("Fatal, …").
	Message string `json:"message"`
	// Action is the recommended action: from the table, from the text
	// for XID 154, from the severity for an SXid (Fatal: reset-gpu, which
	// for a switch means resetting it with its GPUs; Non-fatal: none),
	// and investigate for a code the table does not know.
	Action Action `json:"action"`
	// Time is the line's stamp as written, when it has one: the
	// microseconds field of a /dev/kmsg record, the seconds of a dmesg
	// stamp, the text of a dmesg -T or syslog/journalctl stamp.
	Time string `json:"time,omitempty"`
}

// MaxLine is the longest line Parse reads whole: 64 KiB. A /dev/kmsg
// record holds at most about 1 KiB of text (8 KiB once escaped), a dmesg,
// journalctl or syslog line a few KiB; anything longer is binary or broken
// input (a log file with a run of NUL bytes after a crash, /dev/zero).
// Parse looks for an XID only in the first MaxLine bytes of such a line and
// skips the rest without keeping it, so its memory stays within one line
// however long the line runs.
const MaxLine = 64 << 10

// Stats counts what Parse read.
type Stats struct {
	// Lines is how many lines Parse read, an unfinished last one included.
	Lines int64
	// Cut is how many of those lines were longer than MaxLine and were
	// parsed from their first MaxLine bytes only. A line still running
	// when Parse returns (an endless one, cut off by a read error) counts.
	Cut int64
}

// Parse reads kernel log text from r and calls emit for each XID or SXid
// line in it, in order. Lines that are not XIDs are skipped; lines longer
// than MaxLine are cut (see Stats.Cut). It stops at the first error from r
// or from emit and returns it wrapped with the line number, with the counts
// so far: a reader that returns an error when its caller gives up (a
// context ended) thus stops Parse at once.
func Parse(r io.Reader, emit func(Event) error) (Stats, error) {
	return parse(r, MaxLine, emit)
}

// parse is Parse with the line bound as a parameter, for the fuzz target to
// reach it with small inputs.
func parse(r io.Reader, maxLine int, emit func(Event) error) (Stats, error) {
	// With room for one byte more than the longest whole line, a full
	// buffer without a newline can only be a line to cut, and a whole line
	// is parsed in place from bufio's buffer, never copied.
	br := bufio.NewReaderSize(r, maxLine+1)
	var st Stats
	for {
		frag, err := br.ReadSlice('\n')
		if len(frag) == 0 {
			if errors.Is(err, io.EOF) {
				return st, nil
			}
			if err != nil {
				return st, fmt.Errorf("xid: read line %d: %w", st.Lines+1, err)
			}
		}
		st.Lines++
		line := frag
		if err == nil {
			line = line[:len(line)-1]
		}
		long := errors.Is(err, bufio.ErrBufferFull) || len(line) > maxLine
		if long {
			st.Cut++
			line = line[:min(len(line), maxLine)]
		}
		// Most kernel lines are not XIDs: look before converting.
		if bytes.Contains(line, []byte("Xid")) {
			if ev, ok := ParseLine(string(line)); ok {
				if eerr := emit(ev); eerr != nil {
					return st, fmt.Errorf("xid: line %d: %w", st.Lines, eerr)
				}
			}
		}
		// The rest of a cut line goes through bufio's buffer and is
		// dropped; an endless one keeps Parse here until r fails.
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = br.ReadSlice('\n')
		}
		if errors.Is(err, io.EOF) {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("xid: read line %d: %w", st.Lines, err)
		}
	}
}

const (
	xidMarker  = "NVRM: Xid "
	sxidMarker = "SXid ("
)

// ParseLine reads one kernel log line and reports false when it holds no
// XID or SXid. It accepts the NVRM text alone or behind any prefix: a
// /dev/kmsg record header (prio,seq,usec,flags;), a syslog priority (<3>),
// a dmesg stamp ([ 1234.567890], optionally followed by a caller tag such
// as [ T1946]), a dmesg -T stamp, or a syslog/journalctl "Nov 30 02:27:31
// host kernel:" prefix. Continuation lines of a /dev/kmsg record
// (" KEY=value") and the detail lines NVSwitch prints after an SXid
// ("Severity …", "Data {…}") are not events.
func ParseLine(line string) (Event, bool) {
	line = strings.TrimRight(line, "\r\n")
	if isKmsgContinuation(line) {
		return Event{}, false
	}
	if i := strings.Index(line, xidMarker); i >= 0 {
		ev, ok := parseXID(line[i+len(xidMarker):])
		if ok {
			ev.Time = stamp(line[:i])
		}
		return ev, ok
	}
	if i := strings.Index(line, sxidMarker); i >= 0 {
		ev, ok := parseSXID(line[i+len(sxidMarker)-1:])
		if ok {
			ev.Time = stamp(line[:i])
		}
		return ev, ok
	}
	return Event{}, false
}

// parseXID reads "(PCI:0000:3b:00): 79, pid=…, name=…, message".
func parseXID(s string) (Event, bool) {
	pci, code, body, ok := parseHead(s)
	if !ok {
		return Event{}, false
	}
	ev := Event{Kind: KindXID, Code: code, PCI: pci}
	if v, rest, ok := field(body, "pid=", ","); ok {
		body = rest
		if p, err := strconv.Atoi(v); err == nil && p >= 0 {
			ev.PID = &p
		}
	}
	// The driver ends the name with ", " (name=%s, %s); a name may hold
	// spaces but not that pair.
	if v, rest, ok := field(body, "name=", ", "); ok {
		body = rest
		if v != "" && v != unknown {
			ev.Process = &v
		}
	}
	ev.Message = strings.TrimSpace(body)
	ev.Action = actionFor(code, ev.Message)
	return ev, true
}

// parseSXID reads "(PCI:0000:05:00.0): 12028, Non-fatal, Link 32 …".
func parseSXID(s string) (Event, bool) {
	pci, code, body, ok := parseHead(s)
	if !ok {
		return Event{}, false
	}
	body = strings.TrimSpace(body)
	// The switch driver follows each SXid with detail lines under the
	// same code; they describe the event above, they are not new ones.
	if strings.HasPrefix(body, "Severity ") || strings.HasPrefix(body, "Data {") {
		return Event{}, false
	}
	act := ActionInvestigate
	switch {
	case strings.HasPrefix(body, "Fatal"):
		act = ActionResetGPU
	case strings.HasPrefix(body, "Non-fatal"):
		act = ActionNone
	}
	return Event{Kind: KindSXID, Code: code, PCI: pci, Message: body, Action: act}, true
}

// parseHead reads "(ADDR[ extra]): CODE," and returns the normalised
// address, the code and what follows the comma.
func parseHead(s string) (pci string, code int, body string, ok bool) {
	if !strings.HasPrefix(s, "(") {
		return "", 0, "", false
	}
	end := strings.IndexByte(s, ')')
	if end < 0 {
		return "", 0, "", false
	}
	// MIG lines carry " GPU-I:05 GPU-CI:01" after the address.
	addr, _, _ := strings.Cut(s[1:end], " ")
	pci, ok = NormalizePCI(addr)
	if !ok {
		return "", 0, "", false
	}
	rest, ok := strings.CutPrefix(s[end+1:], ":")
	if !ok {
		return "", 0, "", false
	}
	rest = strings.TrimLeft(rest, " ")
	digits := 0
	for digits < len(rest) && rest[digits] >= '0' && rest[digits] <= '9' {
		digits++
	}
	// Nine digits keep Atoi far from overflow; real codes have five at most.
	if digits == 0 || digits > 9 {
		return "", 0, "", false
	}
	code, _ = strconv.Atoi(rest[:digits])
	if code <= 0 {
		return "", 0, "", false
	}
	rest = rest[digits:]
	switch {
	case rest == "":
	case rest[0] == ',':
		rest = rest[1:]
	default:
		return "", 0, "", false
	}
	return pci, code, strings.TrimLeft(rest, " "), true
}

// field reads key=value at the start of s, where value ends at sep (or at
// the end of s), and strips the quotes the driver puts around '<unknown>'.
func field(s, key, sep string) (value, rest string, ok bool) {
	s, ok = strings.CutPrefix(s, key)
	if !ok {
		return "", "", false
	}
	value, rest, found := strings.Cut(s, sep)
	if !found && sep != "," {
		// A line cut short after the name ("name=python3,").
		value, rest, _ = strings.Cut(s, ",")
	}
	value = strings.TrimSpace(value)
	if len(value) >= 2 && value[0] == '\'' && value[len(value)-1] == '\'' {
		value = value[1 : len(value)-1]
	}
	return value, strings.TrimLeft(rest, " "), true
}

// actionFor returns the action an event with this code and message calls
// for.
func actionFor(code int, msg string) Action {
	if code == 154 {
		return recoveryAction(msg)
	}
	if in, ok := Lookup(code); ok {
		return in.Action
	}
	return ActionInvestigate
}

// recoveryRE finds the new action in an XID 154 message, "… changed from
// 0x0 (None) to 0x1 (GPU Reset Required)".
var recoveryRE = regexp.MustCompile(`to 0x([0-9a-fA-F]+)(?: \(([^)]*)\))?`)

// recoveryAction reads the action an XID 154 line announces. The names are
// those of NVML's nvmlGpuRecoveryAction_t as the driver prints them (0 None,
// 1 GPU Reset Required, 2 Node Reboot Required, 3 Drain P2P, 4 Drain and
// Reset); some drivers print other words ("PF FLR", "OS Reboot"), so the
// words are read first and the number is the fallback.
func recoveryAction(msg string) Action {
	m := recoveryRE.FindAllStringSubmatch(msg, -1)
	if m == nil {
		return ActionInvestigate
	}
	last := m[len(m)-1]
	words := strings.ToLower(last[2])
	switch {
	case strings.Contains(words, "reboot"):
		return ActionReboot
	case strings.Contains(words, "drain and reset"), strings.Contains(words, "reset"), strings.Contains(words, "flr"):
		return ActionResetGPU
	case strings.Contains(words, "drain"):
		// Drain P2P asks to stop peer-to-peer traffic; there is no action
		// of that name in the table, so a person should look.
		return ActionInvestigate
	case words == "none":
		return ActionNone
	}
	switch n, _ := strconv.ParseUint(last[1], 16, 32); n {
	case 0:
		return ActionNone
	case 1, 4:
		return ActionResetGPU
	case 2:
		return ActionReboot
	}
	return ActionInvestigate
}

var (
	// kmsgRE matches a /dev/kmsg record header: prio,seq,usec,flags[,…];
	kmsgRE = regexp.MustCompile(`^\d+,\d+,(\d+),[^;]*;`)
	// isoRE matches journalctl -o short-iso and RFC 5424 syslog stamps.
	isoRE = regexp.MustCompile(`^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S*`)
	// bsdRE matches journalctl -o short(-precise) and RFC 3164 syslog stamps.
	bsdRE = regexp.MustCompile(`^[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?`)
	// kmsgContRE matches a /dev/kmsg continuation line (" SUBSYSTEM=pci").
	kmsgContRE = regexp.MustCompile(`^ +[A-Z][A-Z0-9_]*=`)
)

func isKmsgContinuation(line string) bool {
	return strings.HasPrefix(line, " ") && kmsgContRE.MatchString(line)
}

// stamp returns the time stamp at the start of a line's prefix as written,
// or "" when there is none.
func stamp(prefix string) string {
	p := strings.TrimLeft(prefix, " \t")
	// A syslog priority, "<3>", may stand before any of the shapes below.
	if strings.HasPrefix(p, "<") {
		if end := strings.IndexByte(p, '>'); end > 1 && isDigits(p[1:end]) {
			p = p[end+1:]
			// RFC 5424 puts its version, "1 ", between priority and stamp.
			p = strings.TrimPrefix(p, "1 ")
		}
	}
	if m := kmsgRE.FindStringSubmatch(p); m != nil {
		return m[1]
	}
	if strings.HasPrefix(p, "[") {
		if end := strings.IndexByte(p, ']'); end > 0 {
			return strings.TrimSpace(p[1:end])
		}
		return ""
	}
	if m := isoRE.FindString(p); m != "" {
		return m
	}
	return bsdRE.FindString(p)
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
