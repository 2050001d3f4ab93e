package numafault

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/fault/statedir"
)

// The parser of /proc/PID/stat is tested and fuzzed in internal/procfind;
// this is the thread path that only this package reads.
func TestReadStat(t *testing.T) {
	t.Parallel()
	pid := os.Getpid()
	tests := []struct {
		name    string
		tid     int
		wantErr error
	}{
		{name: "process", tid: 0},
		{name: "main thread", tid: pid},
		{name: "no such thread", tid: 1<<22 + 1, wantErr: os.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, err := readStat(pid, tc.tid)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("readStat(%d, %d) = %+v, %v; want %v", pid, tc.tid, st, err, tc.wantErr)
				}
				return
			}
			if err != nil || st.StartTicks == 0 {
				t.Fatalf("readStat(%d, %d) = %+v, %v", pid, tc.tid, st, err)
			}
		})
	}
}

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

func FuzzEnvironHas(f *testing.F) {
	f.Add([]byte("PATH=/bin\x00GPUCHAOS_JOB=j\x00RANK=3\x00"), "j", "3")
	f.Add([]byte("RANK=3=3\x00GPUCHAOS_JOB=\x00"), "", "3=3")
	f.Fuzz(func(t *testing.T, block []byte, job, rank string) {
		want := map[string]string{JobEnv: job, RankEnv: rank}
		got := environHas(block, want)
		// It must agree with a plain search for both entries.
		var haveJob, haveRank bool
		for _, kv := range strings.Split(string(block), "\x00") {
			haveJob = haveJob || kv == JobEnv+"="+job
			haveRank = haveRank || kv == RankEnv+"="+rank
		}
		if got != (haveJob && haveRank) {
			t.Fatalf("environHas(%q) = %v, plain search %v/%v", block, got, haveJob, haveRank)
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
