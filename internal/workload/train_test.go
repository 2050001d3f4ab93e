package workload

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeProc lays out a /proc tree: pid → environ (KEY=VALUE list) and ppid.
func fakeProc(t *testing.T, procs map[string]struct {
	env  []string
	ppid string
	comm string
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
		// A whole stat line, as the kernel writes it (fields 3 to 22 at
		// least: the parser wants the start time too).
		stat := pid + " (" + p.comm + ") S " + p.ppid + " 1 1 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 12345 1000000 100\n"
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

func TestFindRanks(t *testing.T) {
	t.Parallel()
	type proc = struct {
		env  []string
		ppid string
		comm string
	}
	root := fakeProc(t, map[string]proc{
		"100": {env: []string{"HOME=/root"}, ppid: "1", comm: "gpuchaos"},
		"201": {env: []string{"GPUCHAOS_JOB=llm", "RANK=1", "GPUCHAOS_RUN=r1", "GPUCHAOS_RESTART=2"}, ppid: "100", comm: "python3"},
		"200": {env: []string{"GPUCHAOS_JOB=llm", "RANK=0", "GPUCHAOS_RUN=r1", "GPUCHAOS_RESTART=2"}, ppid: "100", comm: "python3"},
		// A data-loader worker of rank 0: same environment, parent 200.
		"300": {env: []string{"GPUCHAOS_JOB=llm", "RANK=0", "GPUCHAOS_RUN=r1", "GPUCHAOS_RESTART=2"}, ppid: "200", comm: "pt_data_worker (x) y"},
		"400": {env: []string{"GPUCHAOS_JOB=other", "RANK=0"}, ppid: "1", comm: "python3"},
		"401": {env: []string{"GPUCHAOS_JOB=llm", "RANK=abc"}, ppid: "1", comm: "python3"},
		"402": {env: []string{"GPUCHAOS_JOB=llm"}, ppid: "1", comm: "python3"},
		"403": {env: []string{"GPUCHAOS_JOB=llm-2", "RANK=0"}, ppid: "1", comm: "python3"},
	})
	got, err := FindRanks(root, "llm")
	if err != nil {
		t.Fatal(err)
	}
	want := []RankProcess{
		{Pid: 200, Rank: 0, Job: "llm", Run: "r1", Restart: 2, Main: true},
		{Pid: 300, Rank: 0, Job: "llm", Run: "r1", Restart: 2, Main: false},
		{Pid: 201, Rank: 1, Job: "llm", Run: "r1", Restart: 2, Main: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FindRanks =\n%+v\nwant\n%+v", got, want)
	}
	if _, err := FindRanks(filepath.Join(root, "absent"), "llm"); err == nil {
		t.Error("FindRanks of a missing /proc: no error")
	}
}

func TestTrainArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		tr      Train
		want    string
		wantErr string
	}{
		{name: "steps only", tr: Train{Steps: 10}, want: "--steps 10"},
		{name: "everything", tr: Train{Backend: "gloo", Hidden: 64, Layers: 2, Batch: 8, Steps: 100, Duration: 1500 * time.Millisecond,
			StepSleep: 10 * time.Millisecond, CkptDir: "/c", CkptEvery: 20, CkptMode: ModeAsync, Keep: 2,
			OnSaveError: OnSaveErrorExit, MetricsPort: 9500, LogEvery: 5, Seed: 3},
			want: "--backend gloo --hidden 64 --layers 2 --batch 8 --steps 100 --max-seconds 1.5 --step-sleep 0.01 --ckpt-dir /c " +
				"--ckpt-every 20 --ckpt-mode async --keep 2 --on-save-error exit --metrics-port 9500 --log-every 5 --seed 3"},
		{name: "no end", tr: Train{}, wantErr: "would not end"},
		{name: "bad mode", tr: Train{Steps: 1, CkptMode: "lazy"}, wantErr: "checkpoint mode"},
		{name: "bad backend", tr: Train{Steps: 1, Backend: "mpi"}, wantErr: "backend"},
		{name: "bad policy", tr: Train{Steps: 1, OnSaveError: "ignore"}, wantErr: "policy"},
		{name: "negative interval", tr: Train{Steps: 1, CkptEvery: -1}, wantErr: "negative"},
		{name: "port out of range", tr: Train{Steps: 1, MetricsPort: 70000}, wantErr: "port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.tr.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Validate = %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(tc.tr.Args(), " "); got != tc.want {
				t.Errorf("Args = %q, want %q", got, tc.want)
			}
		})
	}
}
