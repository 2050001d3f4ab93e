package kmsg

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/model/xid"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseRecord(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want Record
		err  bool
	}{
		{
			name: "driver XID with device properties",
			in:   "3,1201,6085126134786,-;NVRM: Xid (PCI:0000:3b:00): 119, pid=1582259, name=nvc:[driver], Timeout\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n",
			want: Record{Priority: 3, Facility: 0, Seq: 1201, Time: 6085126134786 * time.Microsecond, Flags: "-",
				Message: "NVRM: Xid (PCI:0000:3b:00): 119, pid=1582259, name=nvc:[driver], Timeout",
				Dict:    map[string]string{"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:3b:00.0"}},
		},
		{
			name: "written from user space at err",
			in:   "11,341,4837468930,-;NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics\n",
			want: Record{Priority: 3, Facility: 1, Seq: 341, Time: 4837468930 * time.Microsecond, Flags: "-",
				Message: "NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics"},
		},
		{
			name: "continuation flag and no trailing newline",
			in:   "4,368,1521473,c;NVRM: gpuClearFbhubPoisonIntr",
			want: Record{Priority: 4, Seq: 368, Time: 1521473 * time.Microsecond, Flags: "c", Message: "NVRM: gpuClearFbhubPoisonIntr"},
		},
		{
			name: "reserved header fields are skipped",
			in:   "6,7,8,-,caller=T1,more;hello\n",
			want: Record{Priority: 6, Seq: 7, Time: 8 * time.Microsecond, Flags: "-", Message: "hello"},
		},
		{
			name: "escapes undone",
			in:   `6,9,10,-;a\x0ab\x5cc\x09d` + "\n",
			want: Record{Priority: 6, Seq: 9, Time: 10 * time.Microsecond, Flags: "-", Message: "a\nb\\c\td"},
		},
		{
			name: "a backslash that is not an escape stays",
			in:   `6,9,10,-;50\% \xZZ \x4` + "\n",
			want: Record{Priority: 6, Seq: 9, Time: 10 * time.Microsecond, Flags: "-", Message: `50\% \xZZ \x4`},
		},
		{name: "no semicolon", in: "6,1,2,-hello\n", err: true},
		{name: "three header fields", in: "6,1,2;hello\n", err: true},
		{name: "priority not a number", in: "x,1,2,-;hello\n", err: true},
		{name: "negative sequence", in: "6,-1,2,-;hello\n", err: true},
		{name: "time stamp overflows a duration", in: "6,1,99999999999999999999,-;hello\n", err: true},
		{name: "continuation without a space", in: "6,1,2,-;hello\nSUBSYSTEM=pci\n", err: true},
		{name: "continuation without =", in: "6,1,2,-;hello\n SUBSYSTEM\n", err: true},
		{name: "empty", in: "", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseRecord([]byte(tt.in))
			if tt.err {
				if err == nil {
					t.Fatalf("ParseRecord(%q) = %+v, want an error", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRecord(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseRecord(%q)\n got %+v\nwant %+v", tt.in, got, tt.want)
			}
		})
	}
}

// TestParseXIDTestdata reads the raw /dev/kmsg records kept for the XID
// parser, one record per header line with its continuation lines, and
// checks that each record's message still parses as the same XID the
// golden file lists.
func TestParseXIDTestdata(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("..", "..", "model", "xid", "testdata", "kmsg.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, " ") && len(recs) > 0 {
			recs[len(recs)-1] += line + "\n"
			continue
		}
		recs = append(recs, line+"\n")
	}
	var codes []int
	for _, raw := range recs {
		r, err := ParseRecord([]byte(raw))
		if err != nil {
			t.Errorf("ParseRecord(%q): %v", raw, err)
			continue
		}
		if ev, ok := xid.ParseLine(r.Message); ok {
			codes = append(codes, ev.Code)
		}
	}
	// The codes kmsg.golden.jsonl lists, in order.
	want := []int{119, 109, 62}
	if !reflect.DeepEqual(codes, want) {
		t.Errorf("XID codes from the records = %v, want %v", codes, want)
	}
}

// fakeDev reads like /dev/kmsg: each Read returns the next queued record
// or error, and blocks when none is queued until Close.
type fakeDev struct {
	items  chan any // []byte or error
	closed chan struct{}
	once   sync.Once
}

func newFakeDev(items ...any) *fakeDev {
	d := &fakeDev{items: make(chan any, len(items)+16), closed: make(chan struct{})}
	for _, it := range items {
		d.items <- it
	}
	return d
}

func (d *fakeDev) Read(p []byte) (int, error) {
	select {
	case <-d.closed:
		return 0, os.ErrClosed
	case it := <-d.items:
		if err, ok := it.(error); ok {
			return 0, err
		}
		return copy(p, it.([]byte)), nil
	}
}

func (d *fakeDev) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}

func rec(seq int, msg string) []byte {
	return []byte("6," + strconv.Itoa(seq) + ",1000,-;" + msg + "\n")
}

func TestFollowerCountsLoss(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		items     []any
		wantSeqs  []uint64
		lost      uint64
		overruns  uint64
		malformed uint64
	}{
		{
			name:     "consecutive records lose nothing",
			items:    []any{rec(10, "a"), rec(11, "b"), rec(12, "c")},
			wantSeqs: []uint64{10, 11, 12},
		},
		{
			name:     "EPIPE then the oldest record left",
			items:    []any{rec(10, "a"), syscall.EPIPE, rec(15, "f"), rec(16, "g")},
			wantSeqs: []uint64{10, 15, 16}, lost: 4, overruns: 1,
		},
		{
			name:     "a gap without EPIPE counts too",
			items:    []any{rec(1, "a"), rec(3, "c")},
			wantSeqs: []uint64{1, 3}, lost: 1,
		},
		{
			name:     "the first record sets the baseline",
			items:    []any{rec(500, "a"), rec(501, "b")},
			wantSeqs: []uint64{500, 501},
		},
		{
			name:     "a malformed read is skipped",
			items:    []any{rec(1, "a"), []byte("garbage"), rec(2, "b")},
			wantSeqs: []uint64{1, 2}, malformed: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dev := newFakeDev(tt.items...)
			f := newFollower("fake", dev)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			got := make(chan uint64, len(tt.items))
			done := make(chan error, 1)
			go func() { done <- f.Run(ctx, func(r Record) { got <- r.Seq }) }()
			var seqs []uint64
			for range tt.wantSeqs {
				select {
				case s := <-got:
					seqs = append(seqs, s)
				case <-time.After(5 * time.Second):
					t.Fatalf("records so far %v, want %v", seqs, tt.wantSeqs)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run after cancel: %v", err)
			}
			if !reflect.DeepEqual(seqs, tt.wantSeqs) {
				t.Errorf("sequence numbers %v, want %v", seqs, tt.wantSeqs)
			}
			if f.Lost() != tt.lost || f.Overruns() != tt.overruns || f.Malformed() != tt.malformed {
				t.Errorf("lost %d overruns %d malformed %d, want %d %d %d",
					f.Lost(), f.Overruns(), f.Malformed(), tt.lost, tt.overruns, tt.malformed)
			}
			if f.Records() != uint64(len(tt.wantSeqs)) {
				t.Errorf("Records() = %d, want %d", f.Records(), len(tt.wantSeqs))
			}
		})
	}
}

func TestFollowerReadError(t *testing.T) {
	t.Parallel()
	f := newFollower("fake", newFakeDev(rec(1, "a"), syscall.EIO))
	err := f.Run(context.Background(), func(Record) {})
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("Run = %v, want EIO", err)
	}
}

func TestOpenMissing(t *testing.T) {
	t.Parallel()
	if _, err := Open(Options{Path: filepath.Join(t.TempDir(), "nope")}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open of a missing device = %v, want not-exist", err)
	}
}

func TestWriterValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		level int
		msg   string
		want  string // file content, "" for an error
	}{
		{name: "err level", level: LevelErr, msg: "NVRM: Xid (PCI:0000:18:00): 13, x", want: "<3>NVRM: Xid (PCI:0000:18:00): 13, x\n"},
		{name: "debug level", level: LevelDebug, msg: "hi", want: "<7>hi\n"},
		{name: "level too high", level: 8, msg: "hi"},
		{name: "negative level", level: -1, msg: "hi"},
		{name: "empty", level: 3, msg: ""},
		{name: "newline forges a second line", level: 3, msg: "a\nNVRM: Xid"},
		{name: "NUL", level: 3, msg: "a\x00b"},
		{name: "too long", level: 3, msg: strings.Repeat("x", MaxMessage+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "kmsg")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			err := Writer{Path: path}.Write(tt.level, tt.msg)
			b, rerr := os.ReadFile(path)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tt.want == "" {
				if err == nil || len(b) != 0 {
					t.Fatalf("Write(%d, %q) = %v and wrote %q, want an error and nothing written", tt.level, tt.msg, err, b)
				}
				return
			}
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if string(b) != tt.want {
				t.Errorf("wrote %q, want %q", b, tt.want)
			}
		})
	}
}

// requireRealKmsg skips unless the test can write and read the real kernel
// log: CI runs as root, where this test must run.
func requireRealKmsg(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: writing /dev/kmsg needs root; run as root to test the real kernel log")
	}
	if _, err := os.Stat(DefaultPath); err != nil {
		t.Skipf("no kernel log device: %v", err)
	}
}

func TestRealRoundTrip(t *testing.T) {
	requireRealKmsg(t)
	tag := make([]byte, 8)
	if _, err := rand.Read(tag); err != nil {
		t.Fatal(err)
	}
	msg := "gpuchaos kmsg round trip " + hex.EncodeToString(tag)

	f, err := Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Record, 1)
	done := make(chan error, 1)
	go func() {
		done <- f.Run(ctx, func(r Record) {
			if r.Message == msg {
				got <- r
			}
		})
	}()
	if err := Write(LevelInfo, msg); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.Facility != FacilityUser || r.Priority != LevelInfo {
			t.Errorf("record facility %d level %d, want %d %d", r.Facility, r.Priority, FacilityUser, LevelInfo)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the written line did not come back through /dev/kmsg within 5 s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if f.Lost() != 0 {
		t.Errorf("lost %d records in a quiet round trip", f.Lost())
	}
}
