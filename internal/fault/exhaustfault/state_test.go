package exhaustfault

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
)

func TestParseState(t *testing.T) {
	t.Parallel()
	good := `{"version":1,"key":"k","fault":"exhaustion.vram","gpu":2,"created":"2026-01-02T03:04:05Z",` +
		`"children":[{"pid":4242,"start_ticks":777,"argv":["/usr/bin/gpuchaos","exhaust","vram"]}]}`
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{name: "good", in: good},
		{name: "no children yet", in: `{"version":1,"key":"k","children":[]}`},
		{name: "not json", in: `{"version":`, wantErr: "decode"},
		{name: "trailing data", in: good + `{}`, wantErr: "after the record"},
		{name: "unknown field", in: `{"version":1,"key":"k","pgid":5}`, wantErr: "unknown field"},
		{name: "other version", in: `{"version":2,"key":"k"}`, wantErr: "version 2"},
		{name: "no key", in: `{"version":1}`, wantErr: "no key"},
		{name: "pid zero is the caller's group", in: `{"version":1,"key":"k","children":[{"pid":0,"start_ticks":1,"argv":["x"]}]}`, wantErr: "pid 0"},
		{name: "pid one is init", in: `{"version":1,"key":"k","children":[{"pid":1,"start_ticks":1,"argv":["x"]}]}`, wantErr: "pid 1"},
		{name: "negative pid", in: `{"version":1,"key":"k","children":[{"pid":-1,"start_ticks":1,"argv":["x"]}]}`, wantErr: "pid -1"},
		{name: "no start time", in: `{"version":1,"key":"k","children":[{"pid":9,"argv":["x"]}]}`, wantErr: "no start time"},
		{name: "no argv", in: `{"version":1,"key":"k","children":[{"pid":9,"start_ticks":1}]}`, wantErr: "no argv"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseState([]byte(tc.in))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("parseState = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func TestStateRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, err := openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	const key = "exp/1"
	// The name an earlier version wrote, which an upgraded node must find.
	if got, want := d.File(key), filepath.Join(dir, "exp%2F1.json"); got != want {
		t.Fatalf("state file of %q is %s, want %s", key, got, want)
	}
	if _, err := readState(d, key); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("readState of no file = %v, want ErrNotExist", err)
	}
	st := state{Version: stateVersion, Key: key, Fault: "exhaustion.sm-burn", GPU: 1, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	for i := range 3 {
		if err := d.Write(key, st); err != nil {
			t.Fatal(err)
		}
		got, err := readState(d, key)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, st) {
			t.Fatalf("after %d children read %+v, want %+v", i, got, st)
		}
		st.Children = append(st.Children, childRecord{PID: 100 + i, StartTicks: uint64(5 + i), Argv: []string{"gpuchaos", "burn"}})
	}
	if err := os.WriteFile(d.File(key), make([]byte, maxStateBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readState(d, key); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("readState of an oversized file = %v, want an error", err)
	}
	if err := d.Remove(key); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(key); err != nil {
		t.Fatalf("removing a missing state: %v", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("files left in the state directory: %v", ents)
	}
}

func TestFileStem(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, want string }{
		{"exp-1_run.2", "exp-1_run.2"},
		{"faulttest/0", "faulttest%2F0"},
		{"../../etc/passwd", "..%2F..%2Fetc%2Fpasswd"},
		{"a b%c", "a%20b%25c"},
		{"ünï", "%C3%BCn%C3%AF"},
	}
	for _, tc := range tests {
		if got := fileStem(tc.key); got != tc.want {
			t.Errorf("fileStem(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	long1, long2 := strings.Repeat("k", 300)+"1", strings.Repeat("k", 300)+"2"
	s1, s2 := fileStem(long1), fileStem(long2)
	if len(s1) > 200 || s1 == s2 {
		t.Errorf("long keys give stems %q and %q: want distinct and at most 200 bytes", s1, s2)
	}
}

func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"version":1,"key":"k","fault":"exhaustion.vram","gpu":2,"created":"2026-01-02T03:04:05Z","children":[{"pid":4242,"start_ticks":777,"argv":["a"]}]}`))
	f.Add([]byte(`{"version":1,"key":"k","children":[{"pid":0,"start_ticks":1,"argv":["x"]}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseState(b)
		if err != nil {
			return
		}
		for _, c := range st.Children {
			if c.PID <= 1 || c.StartTicks == 0 || len(c.Argv) == 0 {
				t.Fatalf("parseState accepted child %+v", c)
			}
		}
		out, err := json.Marshal(st)
		if err != nil {
			t.Fatalf("a parsed state does not encode: %v", err)
		}
		again, err := parseState(out)
		if err != nil || !reflect.DeepEqual(again.Children, st.Children) || again.Key != st.Key {
			t.Fatalf("state does not round-trip: %+v → %s → %+v, %v", st, out, again, err)
		}
	})
}

// readState loads the key's state as Recover does.
func readState(d *statedir.Dir, key string) (state, error) { return statedir.Load(d, key, parseState) }
