package procfind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// fakeProc lays out a /proc tree: pid → environ (KEY=VALUE list), ppid,
// command name and start of stack (a forked child shares its parent's,
// an exec'd one has its own).
func fakeProc(t *testing.T, procs map[string]struct {
	env   []string
	ppid  string
	comm  string
	stack uint64
}) string {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, pid)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		env := strings.Join(p.env, "\x00") + "\x00"
		if err := os.WriteFile(filepath.Join(dir, "environ"), []byte(env), 0o644); err != nil {
			t.Fatal(err)
		}
		// A whole stat line, as the kernel writes it (procfs reads every
		// field up to 44); the start of stack is field 28.
		stat := pid + " (" + p.comm + ") S " + p.ppid + " 1 1 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 12345 1000000 100 " +
			"18446744073709551615 4194304 4238788 " + strconv.FormatUint(p.stack, 10) + " 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Entries that are not processes are skipped.
	if err := os.WriteFile(filepath.Join(root, "meminfo"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// rankProcess is what the workload supervisor's tests read of a rank:
// its run and attempt come from its environment.
type rankProcess struct {
	Pid, Rank int
	Job, Run  string
	Restart   int
	Main      bool
}

func rankProcesses(rs []Rank) []rankProcess {
	out := make([]rankProcess, len(rs))
	for i, r := range rs {
		env := Environ(r.Env)
		run, _ := env.Lookup("GPUCHAOS_RUN")
		restart, _ := env.Lookup("GPUCHAOS_RESTART")
		n, _ := strconv.Atoi(restart)
		out[i] = rankProcess{Pid: r.PID, Rank: r.Rank, Job: r.Job, Run: run, Restart: n, Main: r.Main}
	}
	return out
}

// TestRanksUnder was workload's TestFindRanks (a data-loader worker is not
// its rank) with a launcher chain added (a launcher is not its rank).
func TestRanksUnder(t *testing.T) {
	t.Parallel()
	type proc = struct {
		env   []string
		ppid  string
		comm  string
		stack uint64
	}
	root := fakeProc(t, map[string]proc{
		"100": {env: []string{"HOME=/root"}, ppid: "1", comm: "gpuchaos", stack: 1000},
		"201": {env: []string{"GPUCHAOS_JOB=llm", "RANK=1", "GPUCHAOS_RUN=r1", "GPUCHAOS_RESTART=2"}, ppid: "100", comm: "python3", stack: 2010},
		"200": {env: []string{"GPUCHAOS_JOB=llm", "RANK=0", "GPUCHAOS_RUN=r1", "GPUCHAOS_RESTART=2"}, ppid: "100", comm: "python3", stack: 2000},
		// A data-loader worker of rank 0: same environment, parent 200,
		// forked (its parent's start of stack).
		"300": {env: []string{"GPUCHAOS_JOB=llm", "RANK=0", "GPUCHAOS_RUN=r1", "GPUCHAOS_RESTART=2"}, ppid: "200", comm: "pt_data_worker (x) y", stack: 2000},
		"400": {env: []string{"GPUCHAOS_JOB=other", "RANK=0"}, ppid: "1", comm: "python3", stack: 4000},
		"401": {env: []string{"GPUCHAOS_JOB=llm", "RANK=abc"}, ppid: "1", comm: "python3", stack: 4010},
		"402": {env: []string{"GPUCHAOS_JOB=llm"}, ppid: "1", comm: "python3", stack: 4020},
		"403": {env: []string{"GPUCHAOS_JOB=llm-2", "RANK=0"}, ppid: "1", comm: "python3", stack: 4030},
		// Rank 0 of job l2 under a shell under torchrun, all carrying its
		// variables: the trainer (exec'd by the shell) is the rank, its
		// forked worker is not, and nor are its launchers.
		"500": {env: []string{"GPUCHAOS_JOB=l2", "RANK=0"}, ppid: "1", comm: "torchrun", stack: 5000},
		"501": {env: []string{"GPUCHAOS_JOB=l2", "RANK=0"}, ppid: "500", comm: "sh", stack: 5010},
		"502": {env: []string{"GPUCHAOS_JOB=l2", "RANK=0"}, ppid: "501", comm: "python3", stack: 5020},
		"503": {env: []string{"GPUCHAOS_JOB=l2", "RANK=0"}, ppid: "502", comm: "python3", stack: 5020},
		"504": {env: []string{"GPUCHAOS_JOB=l2", "RANK=0"}, ppid: "503", comm: "sh", stack: 5040},
	})
	got, err := ranksUnder(root, "llm", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []rankProcess{
		{Pid: 200, Rank: 0, Job: "llm", Run: "r1", Restart: 2, Main: true},
		{Pid: 300, Rank: 0, Job: "llm", Run: "r1", Restart: 2, Main: false},
		{Pid: 201, Rank: 1, Job: "llm", Run: "r1", Restart: 2, Main: true},
	}
	if rp := rankProcesses(got); !reflect.DeepEqual(rp, want) {
		t.Errorf("ranksUnder =\n%+v\nwant\n%+v", rp, want)
	}
	if _, err := ranksUnder(filepath.Join(root, "absent"), "llm", 0); err == nil {
		t.Error("ranksUnder of a missing /proc: no error")
	}

	got, err = ranksUnder(root, "l2", 0)
	if err != nil {
		t.Fatal(err)
	}
	var main []int
	for _, r := range got {
		if r.Main {
			main = append(main, r.PID)
		}
	}
	if len(got) != 5 || !reflect.DeepEqual(main, []int{502}) {
		t.Errorf("ranks of l2: %d processes, main %v; want 5, main [502] (the trainer)", len(got), main)
	}
}

func TestGroupLive(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for pid, line := range map[string]string{
		"10": "10 (a) S 1 10 10 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		"11": "11 (b) Z 1 11 11 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		pgid int
		want bool
	}{{"running member", 10, true}, {"zombie only", 11, false}, {"no member", 12, false}} {
		if got := groupLiveUnder(root, tc.pgid); got != tc.want {
			t.Errorf("%s: groupLiveUnder(%d) = %v, want %v", tc.name, tc.pgid, got, tc.want)
		}
	}
}

// TestReadThreadStat was numafault's TestReadStat: the thread path of
// /proc/PID/stat.
func TestReadThreadStat(t *testing.T) {
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
			var (
				st  Stat
				err error
			)
			if tc.tid == 0 {
				st, err = ReadStat(pid)
			} else {
				st, err = ReadThreadStat(pid, tc.tid)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("read stat of %d/%d = %+v, %v; want %v", pid, tc.tid, st, err, tc.wantErr)
				}
				return
			}
			if err != nil || st.StartTicks == 0 {
				t.Fatalf("read stat of %d/%d = %+v, %v", pid, tc.tid, st, err)
			}
		})
	}
}

func TestReason(t *testing.T) {
	t.Parallel()
	_, err := os.Open("/proc/self/no-such-file")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"a path error loses its path", err, "no such file or directory"},
		{"wrapped", fmt.Errorf("list: %w", err), "no such file or directory"},
		{"another error is whole", errors.New("short stat"), "short stat"},
	}
	for _, tc := range tests {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("%s: Reason(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}
