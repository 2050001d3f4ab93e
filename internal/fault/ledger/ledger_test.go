package ledger_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

var at = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func entry(key string) ledger.Entry {
	return ledger.Entry{
		Key: key, Run: "run-1", Target: "twin", Fault: "hardware.xid", Mechanism: "kmsg",
		Params:     map[string]string{"code": "79"},
		Ref:        inventory.Ref{Kind: catalog.ScopeGPU, Node: "gpu-node-0", GPU: 3, UUID: "GPU-3", PCI: "00000000:18:00.0"},
		InjectedAt: at, Expires: at.Add(20 * time.Minute),
	}
}

func keys(t *testing.T, l ledger.Ledger) []string {
	t.Helper()
	es, err := l.Pending(context.Background())
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	out := []string{}
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}

// step is one call on a ledger in a script.
type step struct {
	record, done string
}

func apply(t *testing.T, l ledger.Ledger, steps []step) {
	t.Helper()
	ctx := context.Background()
	for _, s := range steps {
		if s.record != "" {
			if err := l.Record(ctx, entry(s.record)); err != nil {
				t.Fatalf("Record(%s): %v", s.record, err)
			}
		}
		if s.done != "" {
			if err := l.Done(ctx, s.done); err != nil {
				t.Fatalf("Done(%s): %v", s.done, err)
			}
		}
	}
}

var semantics = []struct {
	name  string
	steps []step
	want  []string
}{
	{"empty", nil, []string{}},
	{"record order is kept", []step{{record: "c"}, {record: "a"}, {record: "b"}}, []string{"c", "a", "b"}},
	{"recording twice is one entry in its first place", []step{{record: "a"}, {record: "b"}, {record: "a"}}, []string{"a", "b"}},
	{"done removes only its key", []step{{record: "a"}, {record: "b"}, {record: "c"}, {done: "b"}}, []string{"a", "c"}},
	{"done of an unknown key is fine", []step{{record: "a"}, {done: "zzz"}}, []string{"a"}},
	{"done twice is fine", []step{{record: "a"}, {done: "a"}, {done: "a"}}, []string{}},
	{"record after done is pending again, at the end", []step{{record: "a"}, {record: "b"}, {done: "a"}, {record: "a"}}, []string{"b", "a"}},
}

// ledgers builds each implementation fresh for a test.
var ledgers = map[string]func(t *testing.T) ledger.Ledger{
	"memory": func(*testing.T) ledger.Ledger { return &ledger.Memory{} },
	"file": func(t *testing.T) ledger.Ledger {
		f, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	},
}

func TestSemantics(t *testing.T) {
	t.Parallel()
	for kind, mk := range ledgers {
		for _, tt := range semantics {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				l := mk(t)
				apply(t, l, tt.steps)
				if got := keys(t, l); !slices.Equal(got, tt.want) {
					t.Errorf("pending %q, want %q", got, tt.want)
				}
			})
		}
	}
}

func TestPendingKeepsTheWholeEntry(t *testing.T) {
	t.Parallel()
	for kind, mk := range ledgers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			l := mk(t)
			apply(t, l, []step{{record: "a"}})
			es, err := l.Pending(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != 1 || !sameEntry(es[0], entry("a")) {
				t.Fatalf("pending %+v, want [%+v]", es, entry("a"))
			}
			// The caller owns what Pending returns.
			es[0].Key = "changed"
			if got := keys(t, l); !slices.Equal(got, []string{"a"}) {
				t.Errorf("changing Pending's result changed the ledger: %q", got)
			}
		})
	}
}

func sameEntry(a, b ledger.Entry) bool {
	return a.Key == b.Key && a.Run == b.Run && a.Target == b.Target && a.Fault == b.Fault &&
		a.Mechanism == b.Mechanism && fmt.Sprint(a.Params) == fmt.Sprint(b.Params) && a.Ref == b.Ref &&
		a.InjectedAt.Equal(b.InjectedAt) && a.Expires.Equal(b.Expires)
}

// TestFileSurvivesReopen replays each script, closing and reopening the
// journal after every step: what a crash between steps would leave.
func TestFileSurvivesReopen(t *testing.T) {
	t.Parallel()
	for _, tt := range semantics {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "ledger.jsonl")
			for _, s := range tt.steps {
				f := open(t, path)
				apply(t, f, []step{s})
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			}
			f := open(t, path)
			defer f.Close()
			if got := keys(t, f); !slices.Equal(got, tt.want) {
				t.Errorf("pending after reopen %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("whole entry", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "sub", "dir", "ledger.jsonl")
		f := open(t, path)
		apply(t, f, []step{{record: "a"}})
		f.Close()
		f = open(t, path)
		defer f.Close()
		es, err := f.Pending(context.Background())
		if err != nil || len(es) != 1 || !sameEntry(es[0], entry("a")) {
			t.Fatalf("pending after reopen %+v, %v; want [%+v]", es, err, entry("a"))
		}
	})
}

func open(t *testing.T, path string) *ledger.File {
	t.Helper()
	f, err := ledger.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return f
}

// tear simulates a crash mid-append: part of a record line, no newline.
func tear(t *testing.T, path, partial string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(partial); err != nil {
		t.Fatal(err)
	}
}

func TestFileTornLastLine(t *testing.T) {
	t.Parallel()
	partials := map[string]string{
		"cut inside the object":  `{"op":"record","entry":{"key":"torn","run":"ru`,
		"cut before the newline": `{"op":"record","entry":{"key":"torn"}}`,
		"cut after the brace":    `{`,
	}
	for name, partial := range partials {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "ledger.jsonl")
			f := open(t, path)
			apply(t, f, []step{{record: "a"}, {record: "b"}, {done: "a"}})
			f.Close()
			tear(t, path, partial)

			// The torn record was never acknowledged: it is ignored.
			f = open(t, path)
			if got := keys(t, f); !slices.Equal(got, []string{"b"}) {
				t.Fatalf("pending after a torn line %q, want [b]", got)
			}
			// Life goes on after the crash: new records must survive
			// the next restart too.
			apply(t, f, []step{{record: "c"}})
			f.Close()
			f = open(t, path)
			defer f.Close()
			if got := keys(t, f); !slices.Equal(got, []string{"b", "c"}) {
				t.Errorf("pending after recording past a torn line and reopening %q, want [b c]", got)
			}
		})
	}
}

func TestFileCorruptLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		line    int
	}{
		{"garbage in the middle", "{\"op\":\"record\",\"entry\":{\"key\":\"a\"}}\nnot json\n{\"op\":\"done\",\"key\":\"a\"}\n", 2},
		{"complete last line that is not JSON", "{\"op\":\"record\",\"entry\":{\"key\":\"a\"}}\n{\"op\":\n", 2},
		{"blank line", "{\"op\":\"record\",\"entry\":{\"key\":\"a\"}}\n\n{\"op\":\"done\",\"key\":\"a\"}\n", 2},
		{"wrong type", "[1,2]\n", 1},
		{"a line past the limit", "{\"op\":\"record\",\"entry\":{\"key\":\"a\"}}\n" + strings.Repeat("x", 2<<20) + "\n", 2},
		{"an endless last line", strings.Repeat("y", 3<<20), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "ledger.jsonl")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := ledger.Open(path)
			if err == nil {
				f.Close()
				t.Fatal("Open accepted a corrupt journal")
			}
			for _, want := range []string{path, fmt.Sprintf("line %d", tt.line)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
}

func TestFileOpenErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A journal whose directory is a regular file cannot be created.
	if f, err := ledger.Open(filepath.Join(blocker, "ledger.jsonl")); err == nil {
		f.Close()
		t.Error("Open under a regular file succeeded")
	}
	// A directory is not a journal.
	if f, err := ledger.Open(dir); err == nil {
		f.Close()
		t.Error("Open of a directory succeeded")
	}
}

func TestFileWriteAfterClose(t *testing.T) {
	t.Parallel()
	f := open(t, filepath.Join(t.TempDir(), "ledger.jsonl"))
	f.Close()
	if err := f.Record(context.Background(), entry("a")); err == nil {
		t.Error("Record on a closed ledger succeeded")
	}
	if err := f.Done(context.Background(), "a"); err == nil {
		t.Error("Done on a closed ledger succeeded")
	}
	// A failed Record must not leave the entry pending: the caller
	// did not act on it.
	if got := keys(t, f); len(got) != 0 {
		t.Errorf("pending after failed Record %q, want none", got)
	}
}

func TestConcurrentRecord(t *testing.T) {
	t.Parallel()
	const workers, each = 8, 25
	for kind, mk := range ledgers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			l, path := mk(t), ""
			if kind == "file" {
				path = filepath.Join(t.TempDir(), "ledger.jsonl")
				l = open(t, path)
			}
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						k := fmt.Sprintf("w%d-%d", w, i)
						if err := l.Record(context.Background(), entry(k)); err != nil {
							t.Error(err)
							return
						}
						if i%5 == 0 {
							if err := l.Done(context.Background(), k); err != nil {
								t.Error(err)
								return
							}
						}
						if _, err := l.Pending(context.Background()); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			want := wantConcurrent(workers, each)
			got := keys(t, l)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("pending %d keys, want %d", len(got), len(want))
			}
			if path == "" {
				return
			}
			// Every interleaved line must have landed whole.
			l.(*ledger.File).Close()
			f := open(t, path)
			defer f.Close()
			got = keys(t, f)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("after reopen: pending %d keys, want %d", len(got), len(want))
			}
		})
	}
}

func wantConcurrent(workers, each int) []string {
	var want []string
	for w := range workers {
		for i := range each {
			if i%5 != 0 {
				want = append(want, fmt.Sprintf("w%d-%d", w, i))
			}
		}
	}
	slices.Sort(want)
	return want
}
