package colltrace

import (
	"encoding/binary"
	"strings"
	"testing"
)

func TestDecodeRecord(t *testing.T) {
	t.Parallel()
	want := Record{Time: 123456789012, TID: 4243, PID: 4242, Symbol: 3, Count: 1 << 40}
	good := appendRecord(nil, want)
	padded := appendRecord(nil, want)
	padded[20] = 1
	tests := []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"record", good, ""},
		{"short", good[:RecordSize-1], "31 bytes, want 32"},
		{"long", append(good, 0), "33 bytes, want 32"},
		{"empty", nil, "0 bytes"},
		{"non-zero padding", padded, "padding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := DecodeRecord(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != want {
				t.Errorf("got %+v, %v; want %+v", got, err, want)
			}
		})
	}
}

func TestDefaultSymbolsAreCollectives(t *testing.T) {
	t.Parallel()
	got := DefaultSymbols()
	if len(got) == 0 {
		t.Fatal("no default symbols")
	}
	for _, n := range got {
		s, ok := lookupSymbol(n)
		if !ok || !s.Collective || s.CountArg == 0 {
			t.Errorf("default %s: %+v, known %v", n, s, ok)
		}
	}
	for _, p2p := range []string{"ncclSend", "ncclRecv", "ncclGroupStart"} {
		if _, ok := lookupSymbol(p2p); !ok {
			t.Errorf("%s is not known", p2p)
		}
		for _, n := range got {
			if n == p2p {
				t.Errorf("%s is traced by default, but ranks call it asymmetrically", p2p)
			}
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, Record{Time: 1, TID: 2, PID: 3, Symbol: 4, Count: 5}))
	f.Add([]byte{})
	f.Add(make([]byte, RecordSize+8))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			return
		}
		// A record that decodes re-encodes to the same bytes.
		if again := appendRecord(nil, r); string(again) != string(b) {
			t.Errorf("decode(%x) = %+v re-encodes as %x", b, r, again)
		}
	})
}

// appendRecord encodes r in the programs' layout; tests use it to build
// records the way the kernel would.
func appendRecord(b []byte, r Record) []byte {
	o := binary.NativeEndian
	b = o.AppendUint64(b, r.Time)
	b = o.AppendUint32(b, r.TID)
	b = o.AppendUint32(b, r.PID)
	b = o.AppendUint32(b, r.Symbol)
	b = o.AppendUint32(b, 0)
	return o.AppendUint64(b, r.Count)
}
