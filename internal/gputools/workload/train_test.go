package workload

import (
	"strings"
	"testing"
	"time"
)

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
