package colltrace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLibFromMaps(t *testing.T) {
	t.Parallel()
	captured, err := os.ReadFile("testdata/maps-standin.txt")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, maps, prefix, want string
	}{
		{"captured stand-in rank", string(captured), "libnccl.so", "/tmp/sb/libnccl.so.2"},
		{"captured, libc", string(captured), "libc.so", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{"path with spaces", "7f00-7f01 r-xp 00001000 fe:00 42   /opt/my libs/libnccl.so.2.21.5\n", "libnccl.so", "/opt/my libs/libnccl.so.2.21.5"},
		{"deleted copy skipped for the live one",
			"7f00-7f01 r-xp 00001000 fe:00 41 /old/libnccl.so.2 (deleted)\n7f02-7f03 r-xp 00001000 fe:00 42 /new/libnccl.so.2\n",
			"libnccl.so", "/new/libnccl.so.2"},
		{"a directory named like the library does not count",
			"7f00-7f01 r-xp 00001000 fe:00 42 /libnccl.so.d/libfoo.so\n", "libnccl.so", ""},
		{"anonymous and special mappings only", "7f00-7f01 rw-p 00000000 00:00 0 \n7f02-7f03 r-xp 00000000 00:00 0   [vdso]\n", "libnccl.so", ""},
		{"short line", "7f00-7f01 rw-p\n", "libnccl.so", ""},
		{"empty", "", "libnccl.so", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := LibFromMaps(strings.NewReader(tt.maps), tt.prefix)
			if tt.want == "" {
				if !errors.Is(err, ErrNotMapped) {
					t.Errorf("got %q, %v; want ErrNotMapped", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestRankFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		environ string
		want    Rank
	}{
		{"torchrun", "PATH=/bin\x00LOCAL_RANK=1\x00RANK=9\x00WORLD_SIZE=16\x00", Rank{PID: 5, Rank: 9, LocalRank: 1, Label: "rank 9"}},
		{"local rank only", "LOCAL_RANK=3\x00", Rank{PID: 5, Rank: -1, LocalRank: 3, Label: "local_rank 3"}},
		{"none", "PATH=/bin\x00HOME=/root\x00", Rank{PID: 5, Rank: -1, LocalRank: -1, Label: "pid 5"}},
		{"not a number", "RANK=first\x00", Rank{PID: 5, Rank: -1, LocalRank: -1, Label: "pid 5"}},
		{"negative", "RANK=-1\x00", Rank{PID: 5, Rank: -1, LocalRank: -1, Label: "pid 5"}},
		{"value with =", "X=a=b\x00RANK=0\x00", Rank{PID: 5, Rank: 0, LocalRank: -1, Label: "rank 0"}},
		{"entries without = or name", "junk\x00=1\x00RANK=2", Rank{PID: 5, Rank: 2, LocalRank: -1, Label: "rank 2"}},
		{"empty", "", Rank{PID: 5, Rank: -1, LocalRank: -1, Label: "pid 5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := RankFromEnv(5, ParseEnviron([]byte(tt.environ))); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestProcRank(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "42"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "42", "environ"), []byte("HOME=/\x00RANK=3\x00LOCAL_RANK=1\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := ProcRank(root, 42); err != nil || r.Label != "rank 3" || r.LocalRank != 1 {
		t.Errorf("ProcRank(42) = %+v, %v; want rank 3, local rank 1", r, err)
	}
	// A process gone before its environment is read keeps its pid label.
	if r, err := ProcRank(root, 43); err == nil || r != PIDRank(43) {
		t.Errorf("ProcRank(43) = %+v, %v; want the pid label and an error", r, err)
	}
}

func FuzzLibFromMaps(f *testing.F) {
	if b, err := os.ReadFile("testdata/maps-standin.txt"); err == nil {
		f.Add(string(b))
	}
	f.Add("7f00-7f01 r-xp 00001000 fe:00 42   /opt/my libs/libnccl.so.2 (deleted)\n")
	f.Fuzz(func(t *testing.T, maps string) {
		p, err := LibFromMaps(strings.NewReader(maps), "libnccl.so")
		if err != nil {
			return
		}
		if !strings.HasPrefix(p, "/") || !strings.Contains(maps, p) || strings.HasSuffix(p, " (deleted)") {
			t.Errorf("path %q from %q", p, maps)
		}
	})
}

func FuzzParseEnviron(f *testing.F) {
	f.Add([]byte("RANK=1\x00LOCAL_RANK=0\x00"))
	f.Add([]byte("=\x00\x00a"))
	f.Fuzz(func(t *testing.T, b []byte) {
		env := ParseEnviron(b)
		for k := range env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				t.Errorf("key %q", k)
			}
		}
		r := RankFromEnv(1, env)
		if r.Label == "" || r.Rank < -1 || r.LocalRank < -1 {
			t.Errorf("rank %+v", r)
		}
	})
}
