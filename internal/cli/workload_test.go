package cli

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/gputools/workload"
)

func TestWorkloadBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no end", []string{"workload", "run", "--ckpt-dir", "/tmp/x"}, "would not end"},
		{"zero ranks", []string{"workload", "run", "--steps", "10", "--ranks", "0"}, "--ranks 0"},
		{"bad mode", []string{"workload", "run", "--steps", "10", "--ckpt-mode", "lazy"}, "checkpoint mode"},
		{"bad policy", []string{"workload", "run", "--steps", "10", "--on-save-error", "shrug"}, "policy"},
		{"bad backend", []string{"workload", "run", "--steps", "10", "--backend", "mpi"}, "backend"},
		{"negative restarts", []string{"workload", "run", "--steps", "10", "--max-restarts", "-1"}, "negative"},
		{"stray argument", []string{"workload", "run", "--steps", "10", "extra"}, "unknown command"},
		{"verify without dir", []string{"workload", "verify"}, "accepts 1 arg"},
		{"verify a missing dir", []string{"workload", "verify", "/nonexistent-gpuchaos-ckpt"}, "/nonexistent-gpuchaos-ckpt: no such file or directory"},
		{"verify a file", []string{"workload", "verify", "/etc/hostname"}, "not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, errs := runCLI(t, "", tc.args...)
			if code != 2 || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errs, tc.want)
			}
		})
	}
}

func TestWorkloadScript(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "", "workload", "script")
	if code != 0 || out != workload.Script() {
		t.Fatalf("exit %d (%s); output is not the embedded script", code, errs)
	}
	for _, want := range []string{"init_process_group", "os.fsync", "sha256", "gpuchaos_job_step_total"} {
		if !strings.Contains(out, want) {
			t.Errorf("script lacks %q", want)
		}
	}
}

// TestWorkloadRun drives the command end to end with /bin/sh standing in
// for Python (the torch runs are internal/gputools/workload's tests).
func TestWorkloadRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "rank.sh")
	body := `#!/bin/sh
echo "rank $RANK of $WORLD_SIZE job $GPUCHAOS_JOB args $*"
case "$*" in *"--seed 1"*) [ "$RANK" = 1 ] && exit 5 ;; esac
exit 0
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(dir, "events.jsonl")
	args := []string{"workload", "run", "--python", "/bin/sh", "--script", script, "--ranks", "2", "--steps", "40",
		"--ckpt-dir", "/c", "--metrics-port", "0", "--job", "clijob", "--events", events, "--grace", "200ms"}

	code, out, errs := runCLI(t, "", args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for r := 0; r < 2; r++ {
		want := fmt.Sprintf("[rank %d] rank %d of 2 job clijob args --backend auto --steps 40 --ckpt-dir /c --ckpt-every 20 --ckpt-mode sync --keep 3 --on-save-error continue", r, r)
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errs, "finished after 0 restarts") {
		t.Errorf("stderr %q lacks the summary", errs)
	}
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var last workload.Event
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Event != "end" || last.Job != "clijob" {
		t.Errorf("last event %q (%v), want end of clijob", lines[len(lines)-1], err)
	}

	code, _, errs = runCLI(t, "", append(args, "--max-restarts", "1", "--seed", "1")...)
	if code != 1 || !strings.Contains(errs, "restarts exhausted") || !strings.Contains(errs, "rank 1 exited with status 5") {
		t.Errorf("failing ranks: exit %d, stderr %q; want 1 naming rank 1's status", code, errs)
	}
}

func TestWorkloadVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	if _, err := zw.Create("archive/data.pkl"); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(zb.Bytes())
	for _, step := range []int64{20, 40} {
		m := workload.Manifest{Format: workload.ManifestFormat, Step: step, File: workload.DataName(step), Size: int64(zb.Len()), SHA256: hex.EncodeToString(sum[:])}
		mb, _ := json.Marshal(m)
		data := zb.Bytes()
		if step == 40 {
			data = data[:10] // torn
		}
		if err := os.WriteFile(filepath.Join(dir, workload.DataName(step)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, workload.ManifestName(step)), mb, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ckpt-60.pt.tmp"), []byte("PK"), 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runCLI(t, "", "workload", "verify", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// Compare with the table's padding squeezed to one space.
	var norm []string
	for _, l := range strings.Split(out, "\n") {
		norm = append(norm, strings.Join(strings.Fields(l), " "))
	}
	flat := strings.Join(norm, "\n")
	for _, want := range []string{"40 ckpt-40.pt rejected:", "torn or truncated", "20 ckpt-20.pt ok", "- ckpt-60.pt.tmp unfinished write", "resume from step 20"} {
		if !strings.Contains(flat, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, "", "workload", "verify", "--format", "json", dir)
	var got struct {
		Checkpoints []struct {
			Step  int64 `json:"step"`
			Valid bool  `json:"valid"`
		} `json:"checkpoints"`
		Temporary  []string `json:"temporary"`
		ResumeFrom int64    `json:"resume_from"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	if got.ResumeFrom != 20 || len(got.Checkpoints) != 2 || got.Checkpoints[0].Valid || !got.Checkpoints[1].Valid || len(got.Temporary) != 1 {
		t.Errorf("json = %+v", got)
	}
}
