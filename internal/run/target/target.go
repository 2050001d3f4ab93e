package target

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/tick"
)

// Kind names a kind of target, as --target spells it.
type Kind string

// The kinds of target. The catalogue lists mechanisms by the kind whose
// injectors run them (see Kind.Mechanisms).
const (
	// Twin is the digital twin on its virtual clock.
	Twin Kind = "twin"
	// Live is the twin in real time, its /metrics scraped by a real
	// Prometheus.
	Live Kind = "live"
	// Local is the node gpuchaos runs on. It is named as the ledger names
	// the node's own injections, which a node agent records too.
	Local Kind = ledger.Local
	// K8s is a Kubernetes cluster.
	K8s Kind = "k8s"
)

// Mechanisms returns the target name the catalogue lists k's mechanisms
// under: the live twin plays the twin's faults, so it runs the twin's.
func (k Kind) Mechanisms() string {
	if k == Live {
		return string(Twin)
	}
	return string(k)
}

// Recoverer recovers, through inj, the ledger entries targets of kind k
// recorded.
func (k Kind) Recoverer(inj func(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error)) ledger.Recoverer {
	return ledger.Recoverer{Kind: string(k), Mechanisms: k.Mechanisms(), Injector: inj}
}

// Target is what a run acts on. Implementations are used by one run at a
// time.
type Target interface {
	tick.Clock
	Kind() Kind
	// Inventory lists the nodes, GPUs and job ranks a selector resolves
	// against.
	Inventory(ctx context.Context) (inventory.Inventory, error)
	// Injector returns the injector for a fault's mechanism on this target.
	Injector(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error)
	// Probe builds a named probe from a spec.
	Probe(name string, spec v1alpha1.ProbeSpec) (probe.Probe, error)
	// Settings says how runs on this target are paced and journalled.
	Settings() Settings
	// Prepare brings the target to where an experiment can start (the
	// twin warms up so baselines exist; the live twin lets Prometheus
	// scrape it). It is called once, after planning, before the run.
	Prepare(ctx context.Context) error
	// Close releases what Open started (servers, followers, the ledger).
	Close() error
}

// Settings are a target's defaults for a run.
type Settings struct {
	// PollInterval is how often probes are observed.
	PollInterval time.Duration
	// RecoveryWindow is how long to wait after recovery for detectors to
	// clear; negative skips the wait (a kernel log line never clears).
	RecoveryWindow time.Duration
	// Ledger journals injections before they act; nil keeps them in
	// memory (the twin: nothing outlives the process).
	Ledger ledger.Ledger
	// LedgerPath names Ledger in messages.
	LedgerPath string
	// Concurrency is how many injections and recoveries a run makes at
	// once (engine.Options.Concurrency); zero or one runs them in order.
	Concurrency int
}

// Config is everything a target may be opened with; each kind reads the
// fields its documentation names and ignores the rest.
type Config struct {
	// Seed drives the twin.
	Seed uint64
	// Cluster is a twin cluster spec file (twin, live); empty means the
	// embedded default.
	Cluster string
	// Warmup is fault-free twin time before the experiment (twin, live).
	Warmup time.Duration
	// Listen is where the live twin serves /metrics.
	Listen string
	// Settle is wall time to let Prometheus scrape the live twin first.
	Settle time.Duration
	// Prometheus is the server Prometheus probes ask (live, local).
	Prometheus string
	// Ledger is the injection journal (local); empty with DryRun.
	Ledger string
	// Exporters are /metrics pages scraped for threshold probes, built-in
	// detectors and workload checks (local); the first is the GPU
	// exporter.
	Exporters []string
	// Jobs are training jobs found by their ranks' GPUCHAOS_JOB (local).
	Jobs []string
	// ScrapeInterval is how often Exporters are scraped (local).
	ScrapeInterval time.Duration
	// TraceLib and TracePIDs select processes whose NCCL collectives are
	// traced (local).
	TraceLib  string
	TracePIDs []int
	// DryRun opens the target only to plan: nothing is recovered,
	// journalled, served or touched.
	DryRun bool
	// Notes receives lines a person reads while the target starts
	// (recoveries, warm-up); nil discards them.
	Notes io.Writer
	// Warn receives warnings about the target (no NVML, so no GPUs); nil
	// discards them. The CLI sends them to stderr whatever the format.
	Warn io.Writer
	// Logger receives the target's and its injectors' logs; nil discards.
	Logger *slog.Logger
	// Kubeconfig is the kubeconfig file of the cluster (k8s); empty means
	// the in-cluster config, else $KUBECONFIG or ~/.kube/config as
	// kubectl finds them.
	Kubeconfig string
	// Namespace is the Experiment's (k8s): its jobs are named bare in
	// selectors, other namespaces' as namespace/name, as the controller
	// names them. Empty takes the kubeconfig context's.
	Namespace string
}

// Opener opens a target of one kind.
type Opener func(ctx context.Context, cfg Config) (Target, error)

// Registry maps each kind a binary can open by name to its opener. The
// command line holds the one list (internal/cli/targets.go), so which
// kinds a build has is read in one place, not gathered from init
// functions.
type Registry map[Kind]Opener

// Kinds returns the kinds of r, sorted.
func (r Registry) Kinds() []Kind {
	ks := make([]Kind, 0, len(r))
	for k := range r {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Open opens a target of kind k.
func (r Registry) Open(ctx context.Context, k Kind, cfg Config) (Target, error) {
	open, ok := r[k]
	if !ok {
		var names []string
		for _, k := range r.Kinds() {
			names = append(names, string(k))
		}
		return nil, &ConfigError{Field: "--target", Err: fmt.Errorf("%s is not available in this build; use %s", k, strings.Join(names, ", "))}
	}
	if cfg.Notes == nil {
		cfg.Notes = io.Discard
	}
	if cfg.Warn == nil {
		cfg.Warn = io.Discard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return open(ctx, cfg)
}

// ConfigError is a target refusing its configuration (a flag or a file it
// names): bad input, not a failed run.
type ConfigError struct {
	// Field names the flag or field, such as --cluster; empty when Err
	// already starts with it.
	Field string
	Err   error
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return e.Err.Error() // the error names its field already
	}
	return e.Field + ": " + e.Err.Error()
}
func (e *ConfigError) Unwrap() error { return e.Err }
