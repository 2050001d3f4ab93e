package statedir

import (
	"encoding/json"
	"errors"
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
