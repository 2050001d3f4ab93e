package procfind

import (
	"errors"
	"testing"
)

// TestRankAmong finds a rank among a pod's processes as torchrun leaves
// them: RANK without GPUCHAOS_JOB, a launcher, a shell, the trainer and
// its forked loader all carrying it.
func TestRankAmong(t *testing.T) {
	t.Parallel()
	type proc = struct {
		env   []string
		ppid  string
		comm  string
		stack uint64
	}
	root := fakeProc(t, map[string]proc{
		"10": {env: []string{"HOME=/"}, ppid: "1", comm: "pause", stack: 100},
		"20": {env: []string{"MASTER_ADDR=x"}, ppid: "1", comm: "torchrun", stack: 200},
		"21": {env: []string{"RANK=8", "LOCAL_RANK=0"}, ppid: "20", comm: "sh", stack: 210},
		"22": {env: []string{"RANK=8", "LOCAL_RANK=0"}, ppid: "21", comm: "python3", stack: 220},
		"23": {env: []string{"RANK=8", "LOCAL_RANK=0"}, ppid: "22", comm: "pt_data_worker", stack: 220},
		"24": {env: []string{"RANK=9", "LOCAL_RANK=1"}, ppid: "20", comm: "python3", stack: 240},
		"30": {env: []string{"RANK=9", "GPUCHAOS_JOB=other"}, ppid: "1", comm: "python3", stack: 300},
		"31": {env: []string{"RANK=x"}, ppid: "1", comm: "python3", stack: 310},
		"40": {env: []string{"HOME=/"}, ppid: "1", comm: "sleep", stack: 400},
	})
	pod := []int{10, 20, 21, 22, 23, 24, 31, 99}
	tests := []struct {
		name        string
		pids        []int
		job         string
		rank        int
		want        int // 0: ErrNoRank
		wantCarried bool
	}{
		{"the trainer, not its shell, launcher or loader", pod, "", 8, 22, true},
		{"another rank", pod, "llm", 9, 24, true},
		{"another job's process is left out", []int{30}, "llm", 9, 0, true},
		{"a rank not in the pod", pod, "", 3, 0, true},
		{"a pod that does not say", []int{10, 40, 99}, "", 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, carried, err := rankAmongUnder(root, tc.pids, tc.job, tc.rank)
			if carried != tc.wantCarried {
				t.Errorf("carried = %v, want %v", carried, tc.wantCarried)
			}
			if tc.want == 0 {
				if !errors.Is(err, ErrNoRank) {
					t.Errorf("= %+v, %v; want ErrNoRank", r, err)
				}
				return
			}
			if err != nil || r.PID != tc.want || r.Rank != tc.rank {
				t.Errorf("= pid %d rank %d, %v; want pid %d", r.PID, r.Rank, err, tc.want)
			}
		})
	}
}
