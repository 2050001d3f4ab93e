package numafault

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
)

func TestFileStem(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, k := range []string{"exp/1", "exp%2F1", "..", ".hidden", "a b", strings.Repeat("x", 300), strings.Repeat("x", 301)} {
		s := fileStem(k)
		if strings.ContainsAny(s, "/ ") || s == ".." || strings.HasPrefix(s, ".") || len(s) > 200 {
			t.Errorf("fileStem(%q) = %q: not a safe file name", k, s)
		}
		if other, dup := seen[s]; dup {
			t.Errorf("keys %q and %q share the stem %q", k, other, s)
		}
		seen[s] = k
	}
}

func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"version":1,"key":"k","fault":"numa.wrong-affinity","gpu":0,"gpu_node":0,"created":"2026-11-30T00:00:00Z",` +
		`"target":{"pid":1234,"start_ticks":99},"to_node":1,"back_node":0,"threads":[{"tid":1234,"start_ticks":99,"cpus":"0-3"}]}`))
	f.Add([]byte(`{"version":1,"key":"k","child":{"pid":1,"start_ticks":5}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseState(b)
		if err != nil {
			return
		}
		// Nothing a recovery would signal or touch may be init, us or a group.
		for _, p := range []*procID{st.Target, st.Child} {
			if p != nil && p.PID <= 1 {
				t.Fatalf("pid %d accepted", p.PID)
			}
		}
		for _, th := range st.Threads {
			if th.TID <= 1 {
				t.Fatalf("tid %d accepted", th.TID)
			}
		}
	})
}

// TestStateFileNames pins where state files are: an upgraded node must
// find the files an earlier version wrote.
func TestStateFileNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, err := openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, key, want string }{
		{"slash", "exp/1", "exp%2F1.json"},
		{"leading dot", ".hidden", "%2Ehidden.json"},
		{"inner dot", "run.2", "run.2.json"},
	}
	for _, tc := range tests {
		if got := d.File(tc.key); got != filepath.Join(dir, tc.want) {
			t.Errorf("%s: File(%q) = %s, want %s", tc.name, tc.key, got, filepath.Join(dir, tc.want))
		}
	}
}

// readState loads the key's state as Recover does.
func readState(d *statedir.Dir, key string) (state, error) { return statedir.Load(d, key, parseState) }
