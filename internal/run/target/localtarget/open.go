package localtarget

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/fault/nodeall"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/node/colltrace"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu/nvmlgpu"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
)

// Open recovers what killed runs left in cfg.Ledger (which a run that is
// not dry must set), then opens NVML and starts following the kernel log.
// Recovery comes first and needs neither: a node whose driver is gone must
// still get its network back. A dry run gets no ledger and no state
// directory: it must not touch anything. What it recovers is written to
// cfg.Notes.
func Open(ctx context.Context, cfg target.Config) (target.Target, error) {
	var l *ledger.File
	if !cfg.DryRun {
		if cfg.Ledger == "" {
			return nil, &target.ConfigError{Field: "--ledger", Err: fmt.Errorf("the local target journals every injection; name a ledger")}
		}
		var err error
		if l, err = RecoverLedger(ctx, cfg.Notes, cfg.Ledger); err != nil {
			return nil, err
		}
	}
	src, err := nvmlgpu.Open()
	if err != nil {
		// Network, storage and checkpoint faults act on the node, and a
		// training job on CPUs (gloo) still has ranks to break: only GPU
		// faults need NVML.
		fmt.Fprintf(cfg.Warn, "note: no GPUs listed (%v); GPU faults cannot be selected, node, job, rank and checkpoint faults can\n", err)
		src = noGPUs{}
	}
	opts := Options{Source: src, Prometheus: cfg.Prometheus, JobNames: cfg.Jobs, ScrapeInterval: cfg.ScrapeInterval, Logger: cfg.Logger}
	if len(cfg.Exporters) > 0 {
		opts.Exporter, opts.MoreExporters = cfg.Exporters[0], cfg.Exporters[1:]
	}
	if l != nil {
		opts.StateDir = ledger.StateDir(cfg.Ledger)
	}
	if cfg.TraceLib != "" || len(cfg.TracePIDs) > 0 {
		opts.Collectives = &colltrace.Options{Lib: cfg.TraceLib, PIDs: cfg.TracePIDs}
	}
	t, err := Start(ctx, opts)
	if err != nil {
		src.Close()
		if l != nil {
			l.Close()
		}
		return nil, fmt.Errorf("--target local: %w", err)
	}
	t.closeMore = func() error {
		err := src.Close()
		if l != nil {
			if cerr := l.Close(); err == nil {
				err = cerr
			}
		}
		return err
	}
	if l != nil {
		t.ledger, t.ledgerPath = l, cfg.Ledger
	}
	return t, nil
}

// RecoverLedger opens the ledger at path and recovers every injection it
// still holds, writing one line for each to notes. It fails, naming every
// entry left pending, when some cannot be recovered or proved gone: a run
// must not add faults on top of ones it cannot account for.
func RecoverLedger(ctx context.Context, notes io.Writer, path string) (*ledger.File, error) {
	l, err := ledger.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--ledger: %w", err)
	}
	rs, err := ledger.RecoverPending(ctx, NodeRecoverer(ledger.StateDir(path)), l)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("--ledger: %w", err)
	}
	PrintRecoveries(notes, rs)
	if left := ledger.StillPendingIn(rs); len(left) > 0 {
		l.Close()
		return nil, fmt.Errorf("nothing new was injected: %w", &ledger.PendingError{Ledger: path, Entries: left})
	}
	return l, nil
}

// PrintRecoveries says, one line each, what became of a killed run's
// injections.
func PrintRecoveries(w io.Writer, rs []ledger.Recovery) {
	for _, r := range rs {
		left := fmt.Sprintf("left by run %s at %s", r.Entry.Run, r.Entry.InjectedAt.Format(time.RFC3339))
		switch r.Status {
		case ledger.Recovered:
			fmt.Fprintf(w, "Recovered %s, %s.\n", r.What, left)
		case ledger.Gone:
			fmt.Fprintf(w, "Gone: %s, %s: %s.\n", r.What, left, oneLine(r.Detail))
		default:
			fmt.Fprintf(w, "STILL PENDING: %s, %s: %s.\n", r.What, left, oneLine(r.Detail))
		}
	}
}

func oneLine(s string) string {
	out := []rune(s)
	for i, r := range out {
		if r == '\n' || r == '\r' {
			out[i] = ' '
		}
	}
	return string(out)
}

// NodeRecoverer recovers what local runs on this node left, from the state
// directory beside their ledger, without listing the node's GPUs or
// following its kernel log: recovery must not wait for NVML, nor fail
// because a driver is gone.
func NodeRecoverer(stateDir string) ledger.Recoverer {
	return target.Local.Recoverer(nodeRecoverer{stateDir: stateDir}.Injector)
}

type nodeRecoverer struct{ stateDir string }

func (r nodeRecoverer) Injector(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error) {
	return nodeall.Injector(f, m, nodeall.Env(nodeall.Node{StateDir: r.stateDir}))
}

// noGPUs is the GPU source of a node without NVML: it lists none.
type noGPUs struct{}

func (noGPUs) Devices(context.Context) ([]gpu.Device, error) { return nil, nil }
func (noGPUs) Sample(_ context.Context, i int) (gpu.Sample, error) {
	return gpu.Sample{}, fmt.Errorf("gpu %d: %w", i, gpu.ErrNoDevice)
}
func (noGPUs) Close() error { return nil }
