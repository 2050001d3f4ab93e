package ckptfault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// The faults of this package.
const (
	idKillWriter = "checkpoint.kill-writer"
	idFill       = "checkpoint.fill-volume"
	idSlow       = "checkpoint.slow-storage"
	idCorrupt    = "checkpoint.corrupt-newest"
)

// Entries lists the mechanisms this package runs and the fault each
// causes, for the registry (internal/fault/nodeall). On k8s the agent
// passes the job's pod (WithPod, nodeagent's storageCtx) and the faults
// act on the checkpoint directory as the pod's containers see it.
func Entries() []fault.Entry {
	node := fault.NodeTargets()
	return []fault.Entry{
		{Mechanism: "signal", Targets: node, New: newFromEnv, Faults: []string{idKillWriter}},
		{Mechanism: "fallocate", Targets: node, New: newFromEnv, Faults: []string{idFill}},
		{Mechanism: "cgroup-io", Targets: node, New: newFromEnv, Faults: []string{idSlow}},
		{Mechanism: "byte-flip", Targets: node, New: newFromEnv, Faults: []string{idCorrupt}},
	}
}

func newFromEnv(f *catalog.Fault, m *catalog.Mechanism, env fault.Env) (fault.Injector, error) {
	dir, err := env.StateSubdir(f, m, "ckpt")
	if err != nil {
		return nil, err
	}
	in, err := New(f, m, Options{StateDir: dir, Logger: env.Component("ckptfault")})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// EnvCheckpointDir is the variable in a rank's environment that names the
// job's checkpoint directory when the path parameter is empty.
const EnvCheckpointDir = "GPUCHAOS_CKPT_DIR"

// Options configure New. The zero value of each field is its documented
// default, except StateDir, which is required.
type Options struct {
	// StateDir holds one record per injected key. It must outlive the
	// injecting process and be shared by every injector of this package
	// on the node. Created, mode 0700, when missing.
	StateDir string
	// Logger gets one record per action; nil means none.
	Logger *slog.Logger
	// PollInterval is how often kill-writer looks at the ranks' open
	// files; 0 means 2 ms, short next to the tens of milliseconds a
	// checkpoint write takes at the least.
	PollInterval time.Duration
}

// Injector injects one of this package's faults. It is safe for
// concurrent use; calls with the same key are serialised.
type Injector struct {
	fault string
	dir   *statedir.Dir
	log   *slog.Logger
	poll  time.Duration
}

// New returns the injector of mechanism m of fault f: signal for
// checkpoint.kill-writer, fallocate for checkpoint.fill-volume, cgroup-io
// for checkpoint.slow-storage, byte-flip for checkpoint.corrupt-newest.
func New(f *catalog.Fault, m *catalog.Mechanism, o Options) (*Injector, error) {
	if err := fault.CheckMechanism("ckptfault", f, m, Entries()); err != nil {
		return nil, err
	}
	d, err := statedir.OpenFor("ckptfault", f.ID, o.StateDir)
	if err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Millisecond
	}
	return &Injector{fault: f.ID, dir: d, log: log, poll: o.PollInterval}, nil
}

// Inject applies the fault to the job's checkpoint directory, recording
// it first. A key already recorded is a no-op. On error nothing stays
// applied and no record remains, unless undoing failed too; the error
// then says so and Recover retries.
func (in *Injector) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	pod, inPod := PodFrom(ctx)
	err := in.dir.Inject(ctx, key, func() error {
		var dir string
		var err error
		if inPod {
			dir, err = podCheckpointDir(pod, v)
		} else {
			dir, err = checkpointDir(ref, v)
		}
		if err != nil {
			return err
		}
		st := state{Version: stateVersion, Key: key, Fault: in.fault, Dir: dir, Created: time.Now().UTC()}
		if inPod {
			st.Pod = &podDir{Pod: pod}
			release, err := reachPod(&st, true)
			if err != nil {
				return err
			}
			defer release()
		}
		switch in.fault {
		case idKillWriter:
			return in.killWriter(ctx, key, st, ref, v)
		case idFill:
			return in.fill(ctx, key, st, v)
		case idSlow:
			if inPod {
				return in.podSlow(ctx, key, st, v)
			}
			return in.slow(ctx, key, st, ref, v)
		case idCorrupt:
			return in.corrupt(ctx, key, st, v)
		}
		return nil
	})
	if err != nil {
		if inPod {
			return fmt.Errorf("inject %s on job %s, pod %s: %w", in.fault, ref.Job, pod.UID, err)
		}
		return fmt.Errorf("inject %s on job %s: %w", in.fault, ref.Job, err)
	}
	return nil
}

// Recover undoes what key's record says and removes the record: the
// filler deleted, the ranks moved back, the flipped bytes restored;
// nothing for kill-writer. No record is success. The filler and the
// checkpoint are followed by inode wherever they live now (renamed,
// moved, deleted but held open); one whose inode is freed, or a
// checkpoint whose flipped bytes were all overwritten since, is reported
// as fault.ErrTargetGone with that proof. Where it cannot tell (a
// checkpoint rewritten since that still holds flipped bytes, a file that
// may live on where it cannot look, a cgroup hierarchy no longer mounted
// where the record says) the record stays and the error wraps
// fault.ErrUnproven.
func (in *Injector) Recover(ctx context.Context, key string) error {
	var st state
	var proof string
	err := statedir.Recover(in.dir, key, in.parser(key), func(rec state) (err error) {
		st = rec
		if st.Pod != nil && (st.Fault == idFill || st.Fault == idCorrupt) {
			release, err := reachPod(&st, false)
			if err != nil {
				return err
			}
			defer release()
		}
		switch st.Fault {
		case idFill:
			proof, err = removeFiller(ctx, st)
		case idSlow:
			if err = releaseAll(st.Confinements); err == nil {
				proof, err = restoreLimits(st.Limits)
			}
		case idCorrupt:
			proof, err = restore(ctx, st)
		}
		if err != nil {
			return fmt.Errorf("in %s: %w", st.Dir, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recover %s: %w", in.fault, err)
	}
	if st.Key == "" {
		return nil // no record
	}
	in.log.Info("recovered", "fault", in.fault, "key", key, "dir", st.Dir)
	if proof != "" {
		return fmt.Errorf("recover %s: %s: %w", in.fault, proof, fault.ErrTargetGone)
	}
	return nil
}

// parser decodes key's record and checks that it is this injector's.
func (in *Injector) parser(key string) func([]byte) (state, error) {
	return func(b []byte) (state, error) {
		st, err := parseState(b)
		if err == nil && (st.Key != key || st.Fault != in.fault) {
			err = fmt.Errorf("holds %s key %q", st.Fault, st.Key)
		}
		return st, err
	}
}

// checkpointDir returns the directory to act on: the path parameter, or
// the job's GPUCHAOS_CKPT_DIR. It must be an existing directory that
// resolves to itself, so no symlink can lead an action elsewhere, and so
// that it reads exactly as /proc prints the files under it.
func checkpointDir(ref inventory.Ref, v catalog.Values) (string, error) {
	p := v.String("path")
	if p == "" {
		if ref.Job == "" {
			return "", errors.New("no path parameter and no job to take the checkpoint directory from")
		}
		ranks, err := procfind.Ranks(ref.Job)
		if err != nil {
			return "", err
		}
		for _, r := range ranks {
			if d, ok := procfind.Environ(r.Env).Lookup(EnvCheckpointDir); ok && d != "" {
				p = d
				break
			}
		}
		if p == "" {
			return "", fmt.Errorf("no path parameter and no rank of job %s carries %s", ref.Job, EnvCheckpointDir)
		}
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", fmt.Errorf("checkpoint directory %q is not a clean absolute path", p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("checkpoint directory: %w", err)
	}
	if real != p {
		return "", fmt.Errorf("checkpoint directory %s resolves to %s through a symlink; name the real directory", p, real)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("checkpoint directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("checkpoint directory %s is not a directory", p)
	}
	return p, nil
}
