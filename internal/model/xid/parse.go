package xid

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
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
	// without the function the switch driver prints; empty when the line's
	// address was redacted (PCI:0000:xx:00, PCI:****), as in pastes from
	// public bug reports. Its JSON form is then null.
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
	// and ActionUnknown for an XID code the table does not know.
	Action Action `json:"action"`
	// Time is the line's stamp as written, when it has one: the
	// microseconds field of a /dev/kmsg record, the seconds of a dmesg
	// stamp, the text of a dmesg -T or syslog/journalctl stamp.
	Time string `json:"time,omitempty"`
}

// MarshalJSON writes the event with the fields in declaration order and
// "pci": null for a redacted address, so a consumer can tell "unknown"
// from an address.
func (e Event) MarshalJSON() ([]byte, error) {
	var pci *string
	if e.PCI != "" {
		pci = &e.PCI
	}
	return json.Marshal(struct {
		Kind    string  `json:"kind"`
		Code    int     `json:"code"`
		PCI     *string `json:"pci"`
		PID     *int    `json:"pid"`
		Process *string `json:"process"`
		Message string  `json:"message"`
		Action  Action  `json:"action"`
		Time    string  `json:"time,omitempty"`
	}{e.Kind, e.Code, pci, e.PID, e.Process, e.Message, e.Action, e.Time})
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
	var ls lineState
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
			if ev, ok := ls.parse(string(line)); ok {
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
// as [ T1946]), a dmesg -T stamp, a syslog/journalctl "Nov 30 02:27:31
// host kernel:" prefix, or a dmesg -x "kern  :err   : " facility and
// level. Continuation lines of a /dev/kmsg record (" KEY=value") and the
// detail lines NVSwitch prints after an SXid ("Severity …", "Data {…}")
// are not events.
func ParseLine(line string) (Event, bool) {
	line = strings.TrimRight(line, "\r\n")
	if isKmsgContinuation(line) {
		return Event{}, false
	}
	if i := strings.Index(line, xidMarker); i >= 0 {
		ev, ok := parseXID(line[i+len(xidMarker):])
		if ok {
			ev.Time = stamp(line[:i])
			ev.Message = unquote(line[:i], ev.Message)
		}
		return ev, ok
	}
	if i := strings.Index(line, sxidMarker); i >= 0 {
		ev, ok := parseSXID(line[i+len(sxidMarker)-1:])
		if ok {
			ev.Time = stamp(line[:i])
			ev.Message = unquote(line[:i], ev.Message)
		}
		return ev, ok
	}
	return Event{}, false
}

// unquote drops the closing quote from msg when the NVRM or SXid text was
// quoted in the line ("NVRM: Xid …", 'NVRM: Xid …' as pasted in a message
// or a JSON log field), with the comma, semicolon, brace or bracket a list
// or a JSON object puts after it. The opening quote must stand right before
// "NVRM:" or open the line (after any "> " of a quoted reply), or the
// prefix must leave a JSON string open ({"line":"kern  :err   : … ", as a
// log shipper or gpud writes a kernel line); a message that
// merely ends in a quote keeps it.
func unquote(prefix, msg string) string {
	closing, ok := "", false
	if q, _ := utf8.DecodeLastRuneInString(prefix); q != utf8.RuneError {
		closing, ok = quotePairs[q]
	}
	if !ok {
		// Or the quote opens the line, before the stamp: "> "[Fri …] NVRM: …"".
		q, _ := utf8.DecodeRuneInString(strings.TrimLeft(prefix, " \t>"))
		closing, ok = quotePairs[q]
	}
	if !ok && (strings.Count(prefix, `"`)-strings.Count(prefix, `\"`))%2 == 1 {
		// Or the line is a JSON string opened in the prefix.
		closing, ok = `"`, true
	}
	if !ok {
		return msg
	}
	m := strings.TrimRight(msg, " \t,;}]")
	if cut, found := strings.CutSuffix(m, closing); found {
		return strings.TrimRight(cut, " ")
	}
	return msg
}

// quotePairs maps an opening quote to its closing one.
var quotePairs = map[rune]string{'"': `"`, '\'': "'", '`': "`", '“': "”", '‘': "’"}

// lineState is what Parse remembers between lines: the last SXid it
// emitted, so that the detail lines the switch driver prints after an SXid
// ("Severity …", "Data {…}") are folded into it, and a run of detail lines
// whose SXid line was lost (cut from a paste, dropped by a ring buffer
// overrun) still yields one event.
type lineState struct {
	lastPCI  string
	lastCode int
}

// parse is ParseLine with the SXid detail lines handled as described on
// lineState.
func (ls *lineState) parse(line string) (Event, bool) {
	if ev, ok := ParseLine(line); ok {
		if ev.Kind == KindSXID {
			ls.lastPCI, ls.lastCode = ev.PCI, ev.Code
		} else {
			ls.lastPCI, ls.lastCode = "", 0
		}
		return ev, true
	}
	ev, ok := parseSXIDDetail(line)
	if !ok || ev.PCI == ls.lastPCI && ev.Code == ls.lastCode {
		return Event{}, false
	}
	ls.lastPCI, ls.lastCode = ev.PCI, ev.Code
	return ev, true
}

// parseSXIDDetail reads an SXid detail line ("Severity …", "Data {…}")
// into an event for an SXid whose own line is missing: the detail text is
// its message, and with no severity read its action is investigate.
func parseSXIDDetail(line string) (Event, bool) {
	line = strings.TrimRight(line, "\r\n")
	if isKmsgContinuation(line) {
		return Event{}, false
	}
	i := strings.Index(line, sxidMarker)
	if i < 0 {
		return Event{}, false
	}
	pci, code, body, ok := parseHead(line[i+len(sxidMarker)-1:])
	if !ok || !isSXIDDetail(body) {
		return Event{}, false
	}
	body = unquote(line[:i], strings.TrimSpace(body))
	return Event{Kind: KindSXID, Code: code, PCI: pci, Message: body,
		Action: ActionInvestigate, Time: stamp(line[:i])}, true
}

func isSXIDDetail(body string) bool {
	body = strings.TrimSpace(body)
	return strings.HasPrefix(body, "Severity ") || strings.HasPrefix(body, "Data {")
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
	// same code; they describe the event above, they are not new ones
	// (Parse reads them when that event's line is missing).
	if isSXIDDetail(body) {
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
	if !ok && !isRedactedPCI(addr) {
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

// isRedactedPCI reports whether addr is a PCI address with digits blanked
// out by whoever pasted it: PCI:0000:xx:00, PCI:0000:XX:00.0, PCI:****. It
// must be made of hex digits, ':' and '.', and the marks x, X, * or #, with
// at least one mark; anything else (PCI:zz00:3b:00) is a broken line, not
// a redacted one.
func isRedactedPCI(addr string) bool {
	addr = trimPCI(addr)
	marks := 0
	for i := 0; i < len(addr); i++ {
		switch c := addr[i]; {
		case c == 'x' || c == 'X' || c == '*' || c == '#':
			marks++
		case c == ':' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F':
		default:
			return false
		}
	}
	return marks > 0
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
	return ActionUnknown
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
	// bsdRE matches journalctl -o short(-precise) and RFC 3164 syslog
	// stamps. journalctl writes the month in the reader's locale: "Nov",
	// "kwi" (pl_PL), "oct." (fr_FR), "11月" (zh_CN, ja_JP).
	bsdRE = regexp.MustCompile(`^(?:\p{L}{2,10}\.?|\d{1,2}\p{L}) +\d{1,2},? \d\d:\d\d:\d\d(?:\.\d+)?`)
	// decodeRE matches the facility and level util-linux dmesg writes with
	// -x (--decode), "kern  :err   : ", before its stamp: an ISO one with
	// --time-format iso ("2025-01-25T10:34:54,859532+00:00"), or "[ 1.2]".
	decodeRE = regexp.MustCompile(`^[a-z]+ *:[a-z]+ *: +`)
	// talosRE matches a talosctl dmesg prefix,
	// "node: kern: warning: [2025-09-13T20:46:45.810476849Z]: ", with or
	// without the node name talosctl puts in front for -n.
	talosRE = regexp.MustCompile(`^(?:\S+: +)?[a-z]+: +[a-z]+: +\[(\d{4}-\d\d-\d\dT[^\]]+)\]:`)
	// dmesgRE matches the inside of a dmesg stamp, "[ 1234.567890]".
	dmesgRE = regexp.MustCompile(`^ *\d+\.\d+$`)
	// ctimeRE matches the inside of a dmesg -T stamp, "[Mon Nov 30 02:27:31 2026]".
	ctimeRE = regexp.MustCompile(`^\p{L}+\.? +\p{L}+\.? +\d{1,2} \d\d:\d\d:\d\d \d{4}$`)
	// kmsgContRE matches a /dev/kmsg continuation line (" SUBSYSTEM=pci").
	kmsgContRE = regexp.MustCompile(`^ +[A-Z][A-Z0-9_]*=`)
)

func isKmsgContinuation(line string) bool {
	return strings.HasPrefix(line, " ") && kmsgContRE.MatchString(line)
}

// maxTags is how many leading bracketed tags stamp skips: a wrapping tool
// (kubectl logs --prefix, pdsh, a CI runner) adds one or two.
const maxTags = 3

// stamp returns the time stamp at the start of a line's prefix as written,
// or "" when there is none. A bracketed tag that is not a stamp
// ("[pod/node-agent-x/agent]", added by a tool that wrapped the log) is
// skipped, not taken for one.
func stamp(prefix string) string {
	p := strings.TrimLeft(prefix, " \t")
	for range maxTags + 1 {
		s, rest, tag := stampAt(p)
		if !tag {
			return s
		}
		p = strings.TrimLeft(rest, " \t")
	}
	return ""
}

// stampAt reads the stamp at the start of p. When p starts with a
// bracketed tag that is not a stamp it reports tag and what follows it.
func stampAt(p string) (s, rest string, tag bool) {
	// A quoted reply ("> ") and a quote opening a quoted line stand
	// before the stamp.
	p = strings.TrimLeft(p, "> \t\"'`\u201c\u2018")
	// A syslog priority, "<3>", may stand before any of the shapes below.
	if strings.HasPrefix(p, "<") {
		if end := strings.IndexByte(p, '>'); end > 1 && isDigits(p[1:end]) {
			p = p[end+1:]
			// RFC 5424 puts its version, "1 ", between priority and stamp.
			p = strings.TrimPrefix(p, "1 ")
		}
	}
	if m := decodeRE.FindString(p); m != "" {
		p = p[len(m):]
	}
	if m := kmsgRE.FindStringSubmatch(p); m != nil {
		return m[1], "", false
	}
	if strings.HasPrefix(p, "[") {
		end := strings.IndexByte(p, ']')
		if end < 0 {
			return "", "", false
		}
		in := p[1:end]
		if dmesgRE.MatchString(in) || ctimeRE.MatchString(in) || isoRE.MatchString(in) {
			return strings.TrimSpace(in), "", false
		}
		return "", p[end+1:], true
	}
	if m := talosRE.FindStringSubmatch(p); m != nil {
		return m[1], "", false
	}
	if m := isoRE.FindString(p); m != "" {
		return m, "", false
	}
	return bsdRE.FindString(p), "", false
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
