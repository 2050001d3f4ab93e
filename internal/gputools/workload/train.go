package workload

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

//go:embed train.py
var script string

// Script returns the training script that Run starts when Options.Script
// is empty: the reference workload, as `gpuchaos workload script` prints
// it for use under torchrun.
func Script() string { return script }

// writeScript puts the embedded script in a new temporary directory and
// returns its path and a function that removes the directory.
func writeScript() (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "gpuchaos-workload-")
	if err != nil {
		return "", nil, fmt.Errorf("write training script: %w", err)
	}
	path = filepath.Join(dir, "train.py")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("write training script: %w", err)
	}
	return path, func() { os.RemoveAll(dir) }, nil
}

// Checkpoint modes of Train.CkptMode.
const (
	ModeSync  = "sync"
	ModeAsync = "async"
)

// Save-error policies of Train.OnSaveError.
const (
	// OnSaveErrorContinue counts a failed checkpoint and trains on.
	OnSaveErrorContinue = "continue"
	// OnSaveErrorExit ends rank 0 with ExitSaveFailed, so the supervisor
	// restarts the job from its newest valid checkpoint.
	OnSaveErrorExit = "exit"
)

// Exit statuses of the training script besides 0 (done) and Python's own
// (1 for an uncaught exception, 2 for bad arguments).
const (
	// ExitSaveFailed: a checkpoint write failed under OnSaveErrorExit.
	ExitSaveFailed = 3
	// ExitBadCheckpoint: the checkpoint chosen to resume from could not be
	// loaded, or was written by a model of another shape.
	ExitBadCheckpoint = 4
)

// Train holds the training script's settings. The zero value of a field
// leaves the script's default (shown in train.py --help); Args turns the
// rest into flags.
type Train struct {
	// Backend is "gloo", "nccl" or "auto" (nccl when CUDA is there).
	Backend string
	// Hidden, Layers and Batch size the MLP and the batch per rank.
	Hidden, Layers, Batch int
	// Steps is the global step to train to; a resumed run continues to it.
	Steps int
	// Duration stops training after this long (all ranks at one step).
	Duration time.Duration
	// StepSleep stretches every step by this long.
	StepSleep time.Duration
	// CkptDir is the checkpoint directory; empty means no checkpoints.
	CkptDir string
	// CkptEvery is the checkpoint interval in steps.
	CkptEvery int
	// CkptMode is ModeSync or ModeAsync.
	CkptMode string
	// Keep is how many checkpoints to keep.
	Keep int
	// OnSaveError is OnSaveErrorContinue or OnSaveErrorExit.
	OnSaveError string
	// MetricsPort is the base port: rank r serves 127.0.0.1:MetricsPort+r.
	MetricsPort int
	// LogEvery is how often, in steps, a rank prints a step line.
	LogEvery int
	// Seed seeds the model, the teacher and the data.
	Seed int
}

// Validate rejects settings the script would reject, so a bad value is
// reported before any process starts.
func (t Train) Validate() error {
	switch {
	case !slices.Contains([]string{"", "auto", "gloo", "nccl"}, t.Backend):
		return fmt.Errorf("backend %q is not gloo, nccl or auto", t.Backend)
	case !slices.Contains([]string{"", ModeSync, ModeAsync}, t.CkptMode):
		return fmt.Errorf("checkpoint mode %q is not sync or async", t.CkptMode)
	case !slices.Contains([]string{"", OnSaveErrorContinue, OnSaveErrorExit}, t.OnSaveError):
		return fmt.Errorf("save-error policy %q is not continue or exit", t.OnSaveError)
	case t.Steps < 0 || t.Duration < 0 || t.StepSleep < 0:
		return fmt.Errorf("steps, duration and step sleep must not be negative")
	case t.Steps == 0 && t.Duration == 0:
		return fmt.Errorf("neither steps nor a duration: the run would not end")
	case t.Hidden < 0 || t.Layers < 0 || t.Batch < 0 || t.CkptEvery < 0 || t.Keep < 0 || t.LogEvery < 0:
		return fmt.Errorf("sizes and intervals must not be negative")
	case t.MetricsPort < 0 || t.MetricsPort > 65535:
		return fmt.Errorf("metrics port %d is out of range", t.MetricsPort)
	}
	return nil
}

// Args returns the script flags for the non-zero fields.
func (t Train) Args() []string {
	var a []string
	str := func(flag, v string) {
		if v != "" {
			a = append(a, flag, v)
		}
	}
	num := func(flag string, v int) {
		if v != 0 {
			a = append(a, flag, strconv.Itoa(v))
		}
	}
	dur := func(flag string, d time.Duration) {
		if d != 0 {
			a = append(a, flag, strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
		}
	}
	str("--backend", t.Backend)
	num("--hidden", t.Hidden)
	num("--layers", t.Layers)
	num("--batch", t.Batch)
	num("--steps", t.Steps)
	dur("--max-seconds", t.Duration)
	dur("--step-sleep", t.StepSleep)
	str("--ckpt-dir", t.CkptDir)
	num("--ckpt-every", t.CkptEvery)
	str("--ckpt-mode", t.CkptMode)
	num("--keep", t.Keep)
	str("--on-save-error", t.OnSaveError)
	num("--metrics-port", t.MetricsPort)
	num("--log-every", t.LogEvery)
	num("--seed", t.Seed)
	return a
}
