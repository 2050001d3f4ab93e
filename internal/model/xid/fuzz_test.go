package xid

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func FuzzParseLine(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.log")
	for _, p := range paths {
		file, err := os.Open(p)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			f.Add(sc.Text())
		}
		file.Close()
	}
	f.Fuzz(func(t *testing.T, line string) {
		ev, ok := ParseLine(line)
		if !ok {
			return
		}
		if ev.Code <= 0 {
			t.Errorf("ParseLine(%q): code %d", line, ev.Code)
		}
		// An empty PCI is a redacted address (PCI:0000:xx:00).
		if p, ok := NormalizePCI(ev.PCI); ev.PCI != "" && (!ok || p != ev.PCI) {
			t.Errorf("ParseLine(%q): PCI %q not in domain:bus:device form", line, ev.PCI)
		}
		if _, err := json.Marshal(ev); err != nil {
			t.Errorf("ParseLine(%q): JSON: %v", line, err)
		}
		if ev.Kind != KindXID && ev.Kind != KindSXID {
			t.Errorf("ParseLine(%q): kind %q", line, ev.Kind)
		}
		if ev.Action == "" || ev.Action == ActionSeeText {
			t.Errorf("ParseLine(%q): action %q", line, ev.Action)
		}
		if ev.PID != nil && *ev.PID < 0 {
			t.Errorf("ParseLine(%q): negative pid", line)
		}
	})
}

// FuzzRoundTrip checks ParseLine(FormatLine(...)) over the inputs a driver
// can produce: process names are kernel comm strings (no newline, and no
// ", " which ends the name in the driver's own format), messages are one
// line.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint16(0), uint8(0x3b), uint8(0), 79, 1234, "python3", "GPU has fallen off the bus.")
	f.Add(uint16(4), uint8(1), uint8(0x1f), 154, -1, "", "")
	f.Add(uint16(0x18), uint8(1), uint8(0), 145, 0, "ray::WorkerDict", "RLW_RXPIPE Nonfatal XC0 i0 Link 13")
	f.Fuzz(func(t *testing.T, dom uint16, bus, dev uint8, code, pid int, process, text string) {
		// 154 takes its action from the text, which here is arbitrary;
		// TestRoundTrip and TestParseLine cover it.
		if code <= 0 || code > 999999999 || code == 154 {
			return
		}
		if strings.ContainsAny(process+text, "\r\n") || strings.Contains(process, ",") ||
			process != strings.TrimSpace(process) || strings.HasPrefix(process, "'") || process == unknown {
			return
		}
		pci := strings.ToUpper(strings.Repeat("0", 4) + hex4(dom) + ":" + hex2(bus) + ":" + hex2(dev) + ".0")
		line := FormatLine(pci, code, pid, process, text)
		ev, ok := ParseLine(line)
		if !ok {
			t.Fatalf("ParseLine(%q) not ok", line)
		}
		wantPCI := hex4(dom) + ":" + hex2(bus) + ":" + hex2(dev)
		if ev.Code != code || ev.PCI != wantPCI {
			t.Fatalf("ParseLine(%q) = code %d pci %q", line, ev.Code, ev.PCI)
		}
		if pid < 0 || process == "" {
			if ev.Process != nil {
				t.Fatalf("ParseLine(%q): process %q, want none", line, *ev.Process)
			}
		} else if ev.Process == nil || *ev.Process != process {
			t.Fatalf("ParseLine(%q): process %v, want %q", line, ev.Process, process)
		}
		if pid < 0 && ev.PID != nil || pid >= 0 && (ev.PID == nil || *ev.PID != pid) {
			t.Fatalf("ParseLine(%q): pid %v, want %d", line, ev.PID, pid)
		}
		want := ActionUnknown
		if in, ok := Lookup(code); ok {
			want = in.Action
		}
		if ev.Action != want {
			t.Fatalf("ParseLine(%q): action %q, want %q", line, ev.Action, want)
		}
	})
}

func hex2(v uint8) string  { return hexN(uint64(v), 2) }
func hex4(v uint16) string { return hexN(uint64(v), 4) }

func hexN(v uint64, n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := n - 1; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return string(b)
}

// FuzzParse checks the line reader against the obvious reading of its
// input: split at newlines, cut each line to the bound, read each in turn
// with one lineState (ParseLine, plus the SXid detail lines whose SXid
// line is missing). The
// bound is small (1-256 bytes) so that fuzzed inputs cross it, and the input
// arrives in pieces of a fuzzed size so that lines straddle reads.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.log")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(80), uint8(7))
	}
	f.Add([]byte("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, x\n\x00\x00\x00\nSXid (PCI:0000:05:00.0): 12028, Non-fatal"), uint8(20), uint8(0))
	f.Add([]byte(strings.Repeat("y", 300)+"\n"), uint8(255), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, bound, piece uint8) {
		maxLine := int(bound) + 1
		var want []Event
		var wantSt Stats
		lines := bytes.Split(in, []byte("\n"))
		if len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1] // no unfinished last line
		}
		var ls lineState
		for _, l := range lines {
			wantSt.Lines++
			if len(l) > maxLine {
				wantSt.Cut++
				l = l[:maxLine]
			}
			if !bytes.Contains(l, []byte("Xid")) {
				continue
			}
			if ev, ok := ls.parse(string(l)); ok {
				want = append(want, ev)
			}
		}
		var got []Event
		st, err := parse(&pieceReader{b: in, n: int(piece) + 1}, maxLine, func(ev Event) error {
			got = append(got, ev)
			return nil
		})
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		if st != wantSt {
			t.Errorf("stats = %+v, want %+v", st, wantSt)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("events differ from lineState.parse over each cut line:\n got %+v\nwant %+v", got, want)
		}
	})
}

// pieceReader returns b at most n bytes per Read.
type pieceReader struct {
	b []byte
	n int
}

func (r *pieceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[n:]
	return n, nil
}
