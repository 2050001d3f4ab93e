package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/gputools/workload"
)

func newWorkloadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workload",
		Short: "Run the reference training job under a restarting supervisor",
		Long: `The reference workload is a small PyTorch data-parallel training job
(synthetic data, gloo on CPU or nccl on GPUs) that checkpoints atomically
with a checksum, resumes from its newest valid checkpoint and exports the
job metrics gpuchaos's probes and alert packs read. Checkpoint, rank and
NUMA faults need a real job to hit; this is one whose recovery can be
measured.`,
	}
	cmd.AddCommand(newWorkloadRunCmd(), newWorkloadScriptCmd(), newWorkloadVerifyCmd())
	return cmd
}

func newWorkloadRunCmd() *cobra.Command {
	var (
		tr          workload.Train
		o           workload.Options
		eventsPath  string
		verboseLogs bool
	)
	cmd := &cobra.Command{
		Use:   "run (--steps N | --duration D) [flags]",
		Short: "Train with N ranks, restarting the whole group when a rank fails",
		Long: `Start --ranks copies of the training script (the embedded one, or
--script) with /usr/bin/python3, as torchrun would: RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a new MASTER_PORT for every attempt,
plus GPUCHAOS_JOB, GPUCHAOS_RUN and GPUCHAOS_RESTART, by which fault
injectors find the ranks in /proc/*/environ.

When a rank exits non-zero or dies of a signal the supervisor stops the
others (SIGTERM, SIGKILL after --grace) and restarts the group, up to
--max-restarts times; the ranks resume from the newest checkpoint whose
checksum verifies. Rank output goes to stdout, each line prefixed
"[rank R]"; --events writes the supervisor's start, exit, stop and restart
events as JSON lines with times. Rank r serves Prometheus metrics on
127.0.0.1:(--metrics-port + r); --supervisor-addr serves the supervisor's
(gpuchaos_job_restarts_total, gpuchaos_job_up).

Exit status 0 when the ranks finish, 1 when the restarts run out or a rank
cannot start, 2 on bad flags. Nothing is left running when it returns,
nor when it is killed.`,
		Example: `  gpuchaos workload run --ranks 2 --backend gloo --ckpt-dir /tmp/ckpt --ckpt-every 20 --steps 2000
  gpuchaos workload run --ranks 8 --backend nccl --ckpt-dir /ckpt --ckpt-mode async --duration 30m \
      --max-restarts 3 --metrics-port 9500 --supervisor-addr 127.0.0.1:9499 --events events.jsonl
  curl -s 127.0.0.1:9500/metrics | grep gpuchaos_job_step_total`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Ranks < 1 {
				return fmt.Errorf("workload run: --ranks %d: need at least 1", o.Ranks)
			}
			if o.MaxRestarts < 0 {
				return fmt.Errorf("workload run: --max-restarts %d is negative", o.MaxRestarts)
			}
			if err := tr.Validate(); err != nil {
				return fmt.Errorf("workload run: %w (give --steps or --duration)", err)
			}
			o.Args = tr.Args()
			if tr.CkptDir != "" {
				// Checkpoint faults find the directory of a job's ranks
				// here when an experiment does not name it.
				dir, err := filepath.Abs(tr.CkptDir)
				if err != nil {
					return fmt.Errorf("workload run: --ckpt-dir: %w", err)
				}
				o.Env = append(o.Env, "GPUCHAOS_CKPT_DIR="+dir)
			}
			o.Output = cmd.OutOrStdout()
			if verboseLogs {
				o.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			}
			if eventsPath != "" {
				f, err := os.OpenFile(eventsPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
				if err != nil {
					return failed(fmt.Errorf("workload run: open events log: %w", err))
				}
				defer f.Close()
				o.Events = f
			}
			res, err := workload.Run(cmd.Context(), o)
			summarize(cmd.ErrOrStderr(), res, err)
			if err != nil {
				return failed(err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Ranks, "ranks", 2, "rank processes (WORLD_SIZE)")
	f.StringVar(&tr.Backend, "backend", "auto", "gloo (CPU), nccl (one GPU per rank) or auto")
	f.IntVar(&tr.Steps, "steps", 0, "train to this global step (a resumed run continues to it)")
	f.DurationVar(&tr.Duration, "duration", 0, "train for this long per attempt")
	f.StringVar(&tr.CkptDir, "ckpt-dir", "", "checkpoint directory, shared by the ranks; empty: no checkpoints")
	f.IntVar(&tr.CkptEvery, "ckpt-every", 20, "checkpoint every N steps")
	f.StringVar(&tr.CkptMode, "ckpt-mode", workload.ModeSync, "sync (the step waits for the write) or async (background write)")
	f.IntVar(&tr.Keep, "keep", 3, "checkpoints to keep")
	f.StringVar(&tr.OnSaveError, "on-save-error", workload.OnSaveErrorContinue, "a failed checkpoint: continue (count it) or exit (restart the job)")
	f.IntVar(&tr.MetricsPort, "metrics-port", 9500, "rank r serves /metrics on 127.0.0.1:port+r; 0: off")
	f.IntVar(&tr.Hidden, "hidden", 0, "MLP width (0: the script's 256)")
	f.IntVar(&tr.Layers, "layers", 0, "MLP layers (0: the script's 4)")
	f.IntVar(&tr.Batch, "batch", 0, "rows per rank per step (0: the script's 64)")
	f.DurationVar(&tr.StepSleep, "step-sleep", 0, "added to every step, to make steps longer")
	f.IntVar(&tr.LogEvery, "log-every", 0, "a step line every N steps (0: the script's 10)")
	f.IntVar(&tr.Seed, "seed", 0, "seed of the model and the data")
	f.IntVar(&o.MaxRestarts, "max-restarts", 3, "restarts of the group before giving up")
	f.DurationVar(&o.RestartDelay, "restart-delay", 0, "pause before each restart")
	f.DurationVar(&o.Grace, "grace", workload.DefaultGrace, "SIGTERM to SIGKILL when stopping ranks")
	f.StringVar(&o.Python, "python", workload.DefaultPython, "Python interpreter with torch")
	f.StringVar(&o.Script, "script", "", "training script to run instead of the embedded one")
	f.StringVar(&o.Job, "job", workload.DefaultJob, "job name: GPUCHAOS_JOB and the metrics' job label")
	f.StringVar(&o.MetricsAddr, "supervisor-addr", "", "address for the supervisor's /metrics, e.g. 127.0.0.1:9499; empty: off")
	f.StringVar(&eventsPath, "events", "", "append the supervisor's events (JSON lines) to this file")
	f.BoolVar(&verboseLogs, "verbose", false, "log the supervisor's decisions on stderr")
	return cmd
}

// summarize prints one line about how the run ended.
func summarize(w io.Writer, res workload.Result, err error) {
	var last time.Duration
	if n := len(res.Attempts); n > 0 {
		a := res.Attempts[n-1]
		last = a.End.Sub(a.Start).Round(time.Millisecond)
	}
	switch {
	case err == nil:
		fmt.Fprintf(w, "workload: job %s run %s finished after %d restarts (last attempt %v)\n", res.Job, res.RunID, res.Restarts, last)
	case errors.Is(err, workload.ErrRestartsExhausted):
		fmt.Fprintf(w, "workload: job %s run %s failed after %d restarts\n", res.Job, res.RunID, res.Restarts)
	}
}

func newWorkloadScriptCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "script",
		Short: "Print the embedded training script",
		Long: `Print the training script 'gpuchaos workload run' starts, to run it
yourself, for instance under torchrun. 'python3 train.py --help' lists its
flags.`,
		Example: `  gpuchaos workload script > train.py
  torchrun --standalone --nproc-per-node 2 train.py --backend gloo --ckpt-dir /tmp/ckpt --steps 500`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := io.WriteString(cmd.OutOrStdout(), workload.Script())
			return err
		},
	}
}

func newWorkloadVerifyCmd() *cobra.Command {
	var f format
	cmd := &cobra.Command{
		Use:   "verify DIR",
		Short: "Check every checkpoint in a directory and name the one a resume takes",
		Long: `Verify each checkpoint of the reference workload in DIR, newest first,
as the training script does before resuming: its manifest must exist and
name it, and the data file's size and SHA-256 must match (and it must be a
torch.save archive). Prints each with its verdict, leftover temporary
files, and the step a resume would start from (0: a fresh start).`,
		Example: `  gpuchaos workload verify /tmp/ckpt
  gpuchaos workload verify /tmp/ckpt --format json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Scan takes a missing directory for a fresh start, as the
			// training script must; asked to verify one, that is a typo.
			if fi, err := os.Stat(args[0]); err != nil {
				return fmt.Errorf("%s: %w", args[0], errors.Unwrap(err))
			} else if !fi.IsDir() {
				return fmt.Errorf("%s: not a directory; want the checkpoint directory", args[0])
			}
			cps, temps, err := workload.Scan(args[0])
			if err != nil {
				return failed(err)
			}
			return writeCheckpoints(cmd.OutOrStdout(), f, cps, temps)
		},
	}
	addFormatFlag(cmd, &f)
	return cmd
}

func writeCheckpoints(w io.Writer, f format, cps []workload.Checkpoint, temps []string) error {
	type row struct {
		Step   int64  `json:"step"`
		File   string `json:"file"`
		Valid  bool   `json:"valid"`
		Reason string `json:"reason,omitempty"`
		Size   int64  `json:"size,omitempty"`
		SHA256 string `json:"sha256,omitempty"`
	}
	out := struct {
		Checkpoints []row    `json:"checkpoints"`
		Temporary   []string `json:"temporary"`
		ResumeFrom  int64    `json:"resume_from"`
	}{Checkpoints: []row{}, Temporary: temps}
	if out.Temporary == nil {
		out.Temporary = []string{}
	}
	for _, c := range cps {
		r := row{Step: c.Step, File: workload.DataName(c.Step), Valid: c.Valid()}
		if c.Valid() {
			r.Size, r.SHA256 = c.Manifest.Size, c.Manifest.SHA256
			if out.ResumeFrom == 0 {
				out.ResumeFrom = c.Step
			}
		} else {
			r.Reason = c.Err.Error()
		}
		out.Checkpoints = append(out.Checkpoints, r)
	}
	if f == "json" {
		return writeJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tFILE\tVERDICT")
	for _, r := range out.Checkpoints {
		v := "ok"
		if !r.Valid {
			v = "rejected: " + r.Reason
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", r.Step, r.File, v)
	}
	for _, t := range out.Temporary {
		fmt.Fprintf(tw, "-\t%s\tunfinished write\n", t)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "resume from step %d\n", out.ResumeFrom)
	return err
}
