package statedir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestRoundTripAndNames(t *testing.T) {
	t.Parallel()
	d, err := Open(filepath.Join(t.TempDir(), "a", "b"), "x-")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, key string }{
		{"plain", "run-1/fault-0"},
		{"path separators", "../../etc/passwd"},
		{"long", strings.Repeat("k", 4000)},
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if ok, err := d.Exists(tc.key); err != nil || ok {
				t.Fatalf("Exists before Write = %v, %v", ok, err)
			}
			if _, err := d.Read(tc.key); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("Read before Write = %v, want ErrNotExist", err)
			}
			if err := d.Write(tc.key, map[string]string{"key": tc.key}); err != nil {
				t.Fatal(err)
			}
			f := d.File(tc.key)
			if filepath.Dir(f) != d.path || !strings.HasPrefix(filepath.Base(f), "x-") || seen[f] {
				t.Fatalf("File(%q) = %s: outside the directory, unprefixed or shared", tc.key, f)
			}
			seen[f] = true
			b, err := d.Read(tc.key)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]string
			if err := json.Unmarshal(b, &got); err != nil || got["key"] != tc.key {
				t.Fatalf("Read = %s, %v", b, err)
			}
			if err := d.Remove(tc.key); err != nil {
				t.Fatal(err)
			}
			if err := d.Remove(tc.key); err != nil {
				t.Fatalf("second Remove: %v", err)
			}
			if ok, err := d.Exists(tc.key); err != nil || ok {
				t.Fatalf("Exists after Remove = %v, %v", ok, err)
			}
		})
	}
	ents, _ := os.ReadDir(d.path)
	if len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

func TestLockSerialisesOneKey(t *testing.T) {
	t.Parallel()
	d, err := Open(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	inside := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := d.Lock("k")
			defer unlock()
			inside++
			if inside != 1 {
				t.Error("two holders of one key's lock")
			}
			inside--
		}()
	}
	wg.Wait()
}

// TestEscaped pins the names exhaustfault (then gpuproc) and numafault wrote before they used
// this package: a node upgraded with records on disk must find them.
func TestEscaped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, key string
		escapeDot bool
		want      string
	}{
		{"plain", "exp-1_run.2", false, "exp-1_run.2"},
		{"slash", "faulttest/0", false, "faulttest%2F0"},
		{"traversal", "../../etc/passwd", false, "..%2F..%2Fetc%2Fpasswd"},
		{"traversal, leading dot escaped", "../../etc/passwd", true, "%2E.%2F..%2Fetc%2Fpasswd"},
		{"space and percent", "a b%c", false, "a%20b%25c"},
		{"utf-8", "ünï", true, "%C3%BCn%C3%AF"},
		{"inner dot kept when escaping the first", "a.b", true, "a.b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Escaped(tc.key, tc.escapeDot); got != tc.want {
				t.Errorf("Escaped(%q, %v) = %q, want %q", tc.key, tc.escapeDot, got, tc.want)
			}
		})
	}
	long1, long2 := strings.Repeat("k", 300)+"1", strings.Repeat("k", 300)+"2"
	s1, s2 := Escaped(long1, false), Escaped(long2, false)
	if len(s1) != maxEscaped || s1 == s2 || !strings.HasPrefix(s1, strings.Repeat("k", 100)) {
		t.Errorf("long keys give %q and %q: want distinct, %d bytes, readable start", s1, s2, maxEscaped)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, err := Open(dir, "p-", WithNames(func(k string) string { return Escaped(k, true) }), WithMaxRecord(64))
	if err != nil {
		t.Fatal(err)
	}
	if d.Path() != dir {
		t.Errorf("Path = %s, want %s", d.Path(), dir)
	}
	if got, want := d.File("a/b"), filepath.Join(dir, "p-a%2Fb.json"); got != want {
		t.Errorf("File = %s, want %s", got, want)
	}
	tests := []struct {
		name    string
		value   string
		wantErr bool
	}{
		{"under the bound", "short", false},
		{"over the bound", strings.Repeat("x", 100), true},
	}
	for _, tc := range tests {
		if err := d.Write("a/b", tc.value); err != nil {
			t.Fatal(err)
		}
		_, err := d.Read("a/b")
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: Read = %v, want error %v", tc.name, err, tc.wantErr)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	d, err := Open(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	type rec struct{ N int }
	parse := func(b []byte) (rec, error) {
		var r rec
		if err := json.Unmarshal(b, &r); err != nil {
			return rec{}, err
		}
		if r.N < 0 {
			return rec{}, errors.New("negative")
		}
		return r, nil
	}
	if err := d.Write("good", rec{N: 7}); err != nil {
		t.Fatal(err)
	}
	if err := d.Write("bad", rec{N: -1}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, key string
		want      rec
		wantErr   string
		notExist  bool
	}{
		{name: "good", key: "good", want: rec{N: 7}},
		{name: "refused by parse", key: "bad", wantErr: "negative"},
		{name: "missing", key: "none", notExist: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Load(d, tc.key, parse)
			switch {
			case tc.notExist:
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("Load = %+v, %v; want ErrNotExist", got, err)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), d.File(tc.key)) {
					t.Fatalf("Load = %+v, %v; want an error naming the file and %q", got, err, tc.wantErr)
				}
			default:
				if err != nil || got != tc.want {
					t.Fatalf("Load = %+v, %v; want %+v", got, err, tc.want)
				}
			}
		})
	}
}

func TestInject(t *testing.T) {
	t.Parallel()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	boom := errors.New("boom")
	tests := []struct {
		name      string
		ctx       context.Context
		key       string
		recorded  bool
		applyErr  error
		wantApply bool
		wantErr   error
	}{
		{name: "applies a new key", ctx: context.Background(), key: "k", wantApply: true},
		{name: "recorded key is a no-op", ctx: context.Background(), key: "k", recorded: true},
		{name: "apply's error", ctx: context.Background(), key: "k", applyErr: boom, wantApply: true, wantErr: boom},
		{name: "done context", ctx: done, key: "k", wantErr: context.Canceled},
		{name: "empty key", ctx: context.Background(), key: "", wantErr: errAny},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := Open(t.TempDir(), "")
			if err != nil {
				t.Fatal(err)
			}
			if tc.recorded {
				if err := d.Write(tc.key, "x"); err != nil {
					t.Fatal(err)
				}
			}
			applied := false
			err = d.Inject(tc.ctx, tc.key, func() error { applied = true; return tc.applyErr })
			if applied != tc.wantApply {
				t.Errorf("apply called = %v, want %v", applied, tc.wantApply)
			}
			checkErr(t, err, tc.wantErr)
		})
	}
}

// errAny stands for any error in a table.
var errAny = errors.New("any error")

func checkErr(t *testing.T, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("error %v, want none", err)
	case want == errAny && err == nil:
		t.Fatal("no error, want one")
	case want != nil && want != errAny && !errors.Is(err, want):
		t.Fatalf("error %v, want %v", err, want)
	}
}

func TestRecover(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	parse := func(b []byte) (string, error) {
		var s string
		if err := Decode(b, &s); err != nil {
			return "", err
		}
		if s == "bad" {
			return "", errors.New("refused")
		}
		return s, nil
	}
	tests := []struct {
		name       string
		key        string
		record     string // "" writes none
		undoErr    error
		wantUndo   string
		wantErr    error
		wantRecord bool
	}{
		{name: "undoes and removes", key: "k", record: "r", wantUndo: "r"},
		{name: "no record", key: "k"},
		{name: "undo fails: record stays", key: "k", record: "r", undoErr: boom, wantUndo: "r", wantErr: boom, wantRecord: true},
		{name: "refused record stays", key: "k", record: "bad", wantErr: errAny, wantRecord: true},
		{name: "empty key", key: "", wantErr: errAny},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := Open(t.TempDir(), "")
			if err != nil {
				t.Fatal(err)
			}
			if tc.record != "" {
				if err := d.Write(tc.key, tc.record); err != nil {
					t.Fatal(err)
				}
			}
			var undone string
			err = Recover(d, tc.key, parse, func(s string) error { undone = s; return tc.undoErr })
			checkErr(t, err, tc.wantErr)
			if undone != tc.wantUndo {
				t.Errorf("undo got %q, want %q", undone, tc.wantUndo)
			}
			if tc.key == "" {
				return
			}
			if ok, err := d.Exists(tc.key); err != nil || ok != tc.wantRecord {
				t.Errorf("record exists = %v, %v; want %v", ok, err, tc.wantRecord)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	type rec struct {
		A int `json:"a"`
	}
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{name: "one object", in: `{"a":1}`},
		{name: "trailing newline", in: "{\"a\":1}\n"},
		{name: "unknown field", in: `{"a":1,"b":2}`, wantErr: "unknown field"},
		{name: "second object", in: `{"a":1}{}`, wantErr: "after the record"},
		{name: "stray brace", in: `{"a":1}}`, wantErr: "after the record"},
		{name: "truncated", in: `{"a":`, wantErr: "decode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r rec
			err := Decode([]byte(tc.in), &r)
			if tc.wantErr == "" {
				if err != nil || r.A != 1 {
					t.Fatalf("Decode = %+v, %v", r, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Decode = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte(`{"a":1}]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var v map[string]any
		if err := Decode(b, &v); err != nil {
			return
		}
		// Whatever Decode accepts is exactly one JSON value.
		if !json.Valid(b) {
			t.Fatalf("Decode accepted %q, which is not one JSON value", b)
		}
	})
}

func TestCheckHeader(t *testing.T) {
	for _, tc := range []struct {
		version, want int
		key, err      string
	}{
		{1, 1, "k", ""},
		{2, 1, "k", "version 2: this build reads version 1"},
		{0, 1, "k", "version 0: this build reads version 1"},
		{1, 1, "", "no key"},
	} {
		err := CheckHeader(tc.version, tc.want, tc.key)
		if got := fmt.Sprint(err); tc.err == "" && err != nil || tc.err != "" && got != tc.err {
			t.Errorf("CheckHeader(%d, %d, %q) = %v, want %q", tc.version, tc.want, tc.key, err, tc.err)
		}
	}
}

func TestOpenFor(t *testing.T) {
	if _, err := OpenFor("pkg", "workload.kill-rank", ""); err == nil || err.Error() != "pkg: workload.kill-rank needs a state directory to recover after a crash" {
		t.Errorf("OpenFor without a path: %v", err)
	}
	path := filepath.Join(t.TempDir(), "made")
	d, err := OpenFor("pkg", "workload.kill-rank", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write("k", map[string]int{"version": 1}); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(path)
	if err != nil || len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "pkg-") {
		t.Errorf("records in %s: %v, %v; want one named pkg-…", path, ents, err)
	}
}
