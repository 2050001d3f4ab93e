package ledger_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
)

// FuzzOpen feeds arbitrary journals to Open. Open must not panic; when it
// accepts a journal, the ledger must go on working across a restart: a new
// record lands after whatever was pending and survives a reopen.
func FuzzOpen(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("{\"op\":\"record\",\"entry\":{\"key\":\"a\"}}\n{\"op\":\"done\",\"key\":\"a\"}\n"))
	f.Add([]byte("{\"op\":\"record\",\"entry\":{\"key\":\"a\"}}\n{\"op\":\"record\",\"entry\":{\"key\":\"b\",\"ru"))
	f.Add([]byte("{\"op\":\"record\",\"entry\":{\"key\":\"fuzz\"}}\n{\"op\":\"record\"}\n"))
	f.Add([]byte("null\n{}\n{\"op\":\"other\"}\n"))
	f.Add([]byte("{\"op\":\"record\",\"entry\":{\"key\":\"a\",\"injected_at\":\"not a time\"}}\n"))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, journal []byte) {
		ctx := context.Background()
		path := filepath.Join(t.TempDir(), "ledger.jsonl")
		if err := os.WriteFile(path, journal, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := ledger.Open(path)
		if err != nil {
			return
		}
		before := keys(t, l)
		if err := l.Record(ctx, entry("fuzz")); err != nil {
			t.Fatalf("Record after a successful Open: %v", err)
		}
		l.Close()
		l, err = ledger.Open(path)
		if err != nil {
			t.Fatalf("reopen after Record: %v", err)
		}
		defer l.Close()
		want := before
		if !slices.Contains(want, "fuzz") {
			want = append(want, "fuzz")
		}
		if got := keys(t, l); !slices.Equal(got, want) {
			t.Fatalf("pending after reopen %q, want %q", got, want)
		}
	})
}
