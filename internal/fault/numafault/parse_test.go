package numafault

import (
	"os"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	self, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		in    string
		state byte
		start uint64
		err   bool
	}{
		{name: "command with spaces and parens",
			in:    "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 98765 1000 10 18446744073709551615",
			state: 'S', start: 98765},
		{name: "too short", in: "42 (x) S 1 2 3", err: true},
		{name: "no parens", in: "42 x S", err: true},
		{name: "state not a letter", in: "42 (x) 7 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 5 1 1", err: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, err := parseStat([]byte(c.in))
			if c.err {
				if err == nil {
					t.Fatalf("parseStat(%q) = %+v, want an error", c.in, st)
				}
				return
			}
			if err != nil || st.State != c.state || st.StartTicks != c.start || st.UTime != 7 || st.STime != 3 {
				t.Fatalf("parseStat = %+v, %v", st, err)
			}
		})
	}
	if st, err := parseStat(self); err != nil || st.StartTicks == 0 {
		t.Errorf("own stat: %+v, %v", st, err)
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

func FuzzParseStat(f *testing.F) {
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("1 ((x)) Z 0 0 0 0 0 0 0 0 0 0 1 2 0 0 0 0 0 0 3"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStat(b)
		if err == nil && !('A' <= st.State && st.State <= 'Z' || 'a' <= st.State && st.State <= 'z') {
			t.Fatalf("state %q accepted", st.State)
		}
	})
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
