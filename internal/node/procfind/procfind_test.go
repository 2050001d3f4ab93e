package procfind

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// roleEnv makes the re-executed test binary a sleeper that carries
// whatever rank variables the test gives it.
const roleEnv = "PROCFIND_TEST_ROLE"

func TestMain(m *testing.M) {
	if os.Getenv(testutil.LeaderlessEnv) != "" {
		testutil.Leaderless()
	}
	if os.Getenv(roleEnv) == "sleeper" {
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// statLine is a /proc/PID/stat line with the given command name, state,
// CPU times and start time, parent 77 and process group 1234.
func statLine(comm string, state byte, utime, stime, start uint64) string {
	return statOf(comm, Stat{State: state, PPID: 77, PGRP: 1234, UTime: utime, STime: stime, StartTicks: start})
}

// statOf is the /proc/PID/stat line that holds st's fields.
func statOf(comm string, st Stat) string {
	return fmt.Sprintf("1234 (%s) %s %d %d 1234 0 -1 4194560 100 0 0 0 %d %d 0 0 20 0 1 0 %d 12345678 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n",
		comm, []byte{st.State}, st.PPID, st.PGRP, st.UTime, st.STime, st.StartTicks)
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    Stat
		wantErr string
	}{
		{name: "plain", in: statLine("gpuchaos", 'S', 5, 3, 987654), want: Stat{State: 'S', PPID: 77, PGRP: 1234, UTime: 5, STime: 3, StartTicks: 987654}},
		{name: "stopped", in: statLine("python", 'T', 0, 0, 5), want: Stat{State: 'T', PPID: 77, PGRP: 1234, StartTicks: 5}},
		{name: "spaces and parentheses in the name", in: statLine("a) S 1 (b", 'R', 1, 2, 42), want: Stat{State: 'R', PPID: 77, PGRP: 1234, UTime: 1, STime: 2, StartTicks: 42}},
		{name: "empty", in: "", wantErr: "no command name"},
		{name: "truncated", in: "1234 (x) S 1 2 3", wantErr: "fields after the command name"},
		{name: "bad start time", in: strings.Replace(statLine("x", 'S', 0, 0, 7), " 7 ", " seven ", 1), wantErr: "start time"},
		{name: "bad user time", in: strings.Replace(statLine("x", 'S', 31, 0, 7), " 31 ", " -1 ", 1), wantErr: "user time"},
		{name: "state not a letter", in: strings.Replace(statLine("x", 'S', 0, 0, 7), ") S ", ") 9 ", 1), wantErr: "not one letter"},
		{name: "long state", in: strings.Replace(statLine("x", 'S', 0, 0, 7), ") S ", ") SS ", 1), wantErr: "not one letter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseStat([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseStat = %+v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseStat = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add(statLine("gpuchaos", 'S', 1, 2, 1))
	f.Add(statLine("x) y (z", 'Z', 0, 0, 99))
	f.Add("")
	f.Add("1 () S")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseStat([]byte(s))
		if err != nil {
			return
		}
		// Whatever precedes the last ')' is the name; the fields read must
		// be what a line rebuilt from them says.
		end := strings.LastIndexByte(s, ')')
		again, err := ParseStat([]byte(statOf(strings.ReplaceAll(s[:end], "\n", " "), st)))
		if err != nil || again != st {
			t.Fatalf("ParseStat(%q) = %+v, but a line rebuilt from it reads %+v, %v", s, st, again, err)
		}
	})
}

func env(kv ...string) Environ { return Environ(strings.Join(kv, "\x00") + "\x00") }

func TestParseRank(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     Environ
		want    Rank
		ok      bool
		wantErr string
	}{
		{name: "full", env: env("PATH=/bin", "GPUCHAOS_JOB=llm", "RANK=3", "LOCAL_RANK=1", "WORLD_SIZE=8"), ok: true,
			want: Rank{Job: "llm", Rank: 3, LocalRank: 1, WorldSize: 8}},
		{name: "rank only", env: env("GPUCHAOS_JOB=llm", "RANK=0"), ok: true, want: Rank{Job: "llm", LocalRank: -1, WorldSize: -1}},
		{name: "no trailing NUL", env: Environ("GPUCHAOS_JOB=a\x00RANK=2"), ok: true, want: Rank{Job: "a", Rank: 2, LocalRank: -1, WorldSize: -1}},
		{name: "first of two wins", env: env("RANK=1", "GPUCHAOS_JOB=a", "RANK=2"), ok: true, want: Rank{Job: "a", Rank: 1, LocalRank: -1, WorldSize: -1}},
		{name: "prefix is not the key", env: env("GPUCHAOS_JOBX=a", "RANKS=1", "XRANK=4")},
		{name: "no job", env: env("RANK=1")},
		{name: "empty job", env: env("GPUCHAOS_JOB=", "RANK=1")},
		{name: "no rank", env: env("GPUCHAOS_JOB=a")},
		{name: "empty", env: nil},
		{name: "negative rank", env: env("GPUCHAOS_JOB=a", "RANK=-1"), wantErr: "RANK"},
		{name: "bad local rank", env: env("GPUCHAOS_JOB=a", "RANK=1", "LOCAL_RANK=x"), wantErr: "LOCAL_RANK"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok, err := ParseRank(tc.env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseRank = %+v, %v, %v; want an error with %q", got, ok, err, tc.wantErr)
				}
				return
			}
			if err != nil || ok != tc.ok || got != tc.want {
				t.Fatalf("ParseRank = %+v, %v, %v; want %+v, %v", got, ok, err, tc.want, tc.ok)
			}
		})
	}
}

func FuzzEnvironLookup(f *testing.F) {
	f.Add([]byte("GPUCHAOS_JOB=a\x00RANK=1\x00"), "RANK")
	f.Add([]byte("=\x00\x00RANK"), "")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		v, ok := Environ(b).Lookup(key)
		if !ok {
			return
		}
		// A value found is a whole entry's tail: KEY=VALUE must occur as a
		// NUL-delimited entry.
		entry := "\x00" + key + "=" + v + "\x00"
		if !strings.Contains("\x00"+string(b)+"\x00", entry) {
			t.Fatalf("Lookup(%q) = %q, which is no entry of %q", key, v, b)
		}
		if strings.ContainsRune(v, 0) {
			t.Fatalf("value %q holds a NUL", v)
		}
		if _, _, err := ParseRank(Environ(b)); err != nil && !strings.Contains(err.Error(), "not a non-negative integer") {
			t.Fatalf("ParseRank: unexpected error %v", err)
		}
	})
}

func TestParseFdinfo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		want     Fdinfo
		writable bool
		wantErr  string
	}{
		{name: "write only", in: "pos:\t4096\nflags:\t0100001\nmnt_id:\t27\nino:\t1234\n", want: Fdinfo{Pos: 4096, Flags: 0o100001}, writable: true},
		{name: "read write", in: "pos:\t0\nflags:\t02\n", want: Fdinfo{Flags: 2}, writable: true},
		{name: "read only", in: "pos:\t10\nflags:\t0100000\nmnt_id:\t27\n", want: Fdinfo{Pos: 10, Flags: 0o100000}},
		{name: "append create", in: "flags:\t02102\npos:\t7\n", want: Fdinfo{Pos: 7, Flags: 0o2102}, writable: true},
		{name: "no flags", in: "pos:\t1\n", wantErr: "no pos or no flags"},
		{name: "decimal digits in flags", in: "pos:\t1\nflags:\t09\n", wantErr: "not octal"},
		{name: "negative pos", in: "pos:\t-1\nflags:\t01\n", wantErr: "not a file offset"},
		{name: "empty", in: "", wantErr: "no pos or no flags"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFdinfo([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseFdinfo = %+v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || got.Writable() != tc.writable {
				t.Fatalf("ParseFdinfo = %+v (writable %v), %v; want %+v (writable %v)", got, got.Writable(), err, tc.want, tc.writable)
			}
		})
	}
}

func FuzzParseFdinfo(f *testing.F) {
	f.Add([]byte("pos:\t4096\nflags:\t0100001\nmnt_id:\t27\n"))
	f.Add([]byte("flags:0\npos:0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fi, err := ParseFdinfo(b)
		if err != nil {
			return
		}
		again, err := ParseFdinfo(fmt.Appendf(nil, "pos:\t%d\nflags:\t0%o\n", fi.Pos, fi.Flags))
		if err != nil || again != fi || fi.Pos < 0 {
			t.Fatalf("ParseFdinfo(%q) = %+v, rebuilt reads %+v, %v", b, fi, again, err)
		}
	})
}

// startRank runs the test binary as a sleeper carrying the variables.
func startRank(t *testing.T, vars ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{roleEnv + "=sleeper"}, vars...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func TestRanksOfARealJob(t *testing.T) {
	t.Parallel()
	job := fmt.Sprintf("procfind-test-%d", os.Getpid())
	r1 := startRank(t, EnvJob+"="+job, "RANK=1", "LOCAL_RANK=1", "WORLD_SIZE=2")
	r0 := startRank(t, EnvJob+"="+job, "RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=2")
	startRank(t, EnvJob+"="+job+"-other", "RANK=0")
	startRank(t, "RANK=0") // a rank of no job of ours

	got, err := Ranks(job)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].PID != r0.Process.Pid || got[1].PID != r1.Process.Pid {
		t.Fatalf("Ranks(%s) = %+v; want pids %d, %d", job, got, r0.Process.Pid, r1.Process.Pid)
	}
	if got[1].Rank != 1 || got[1].LocalRank != 1 || got[1].WorldSize != 2 || got[1].StartTicks == 0 {
		t.Errorf("rank 1 = %+v", got[1])
	}
	tests := []struct {
		name    string
		job     string
		rank    int
		wantPID int
	}{
		{name: "rank 0", job: job, rank: 0, wantPID: r0.Process.Pid},
		{name: "rank 1", job: job, rank: 1, wantPID: r1.Process.Pid},
		{name: "absent rank", job: job, rank: 2},
		{name: "absent job", job: job + "-none", rank: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := RankProcess(tc.job, tc.rank)
			if tc.wantPID == 0 {
				if !errors.Is(err, ErrNoRank) {
					t.Fatalf("RankProcess = %+v, %v; want ErrNoRank", r, err)
				}
				return
			}
			if err != nil || r.PID != tc.wantPID {
				t.Fatalf("RankProcess = %+v, %v; want pid %d", r, err, tc.wantPID)
			}
		})
	}
}

func TestSignalNeverReachesAReusedPid(t *testing.T) {
	t.Parallel()
	cmd := startRank(t)
	p, err := Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// The same pid with another start time is what a recycled pid looks
	// like from a record.
	other := Proc{PID: p.PID, StartTicks: p.StartTicks - 1}
	if err := other.Signal(syscall.SIGKILL); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Signal to a stale identity = %v, want os.ErrNotExist", err)
	}
	if ok, err := p.Alive(); err != nil || !ok {
		t.Fatalf("the process was reached: alive %v, %v", ok, err)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("wait = %v, want killed by SIGKILL", err)
	}
	if err := p.Signal(syscall.SIGKILL); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Signal after exit = %v, want os.ErrNotExist", err)
	}
	for _, bad := range []Proc{{PID: 0, StartTicks: 1}, {PID: -1, StartTicks: 1}, {PID: 1, StartTicks: 1}, {PID: 5}} {
		if err := bad.Signal(0); err == nil || errors.Is(err, os.ErrNotExist) {
			t.Errorf("Signal(%+v) = %v, want a refusal", bad, err)
		}
	}
}

func TestWritersUnder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.Create(filepath.Join(dir, "ckpt-1.pt.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString("hello"); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(filepath.Join(dir, "ckpt-1.pt.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	outside, err := os.CreateTemp("", "procfind-outside")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(outside.Name())
	defer outside.Close()

	got, err := WritersUnder(os.Getpid(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].FD != int(w.Fd()) || got[0].Path != w.Name() || got[0].Pos != 5 {
		t.Fatalf("WritersUnder = %+v; want fd %d on %s at pos 5", got, w.Fd(), w.Name())
	}
	// A sibling whose name merely starts with dir is not under it.
	if got, err := WritersUnder(os.Getpid(), dir[:len(dir)-1]); err != nil || len(got) != 0 {
		t.Fatalf("WritersUnder(prefix of dir) = %+v, %v; want none", got, err)
	}
}
