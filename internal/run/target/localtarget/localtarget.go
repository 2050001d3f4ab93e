// Package localtarget is the local target: experiments on the node
// gpuchaos runs on, on the wall clock, through the node's own mechanisms
// (the kernel log, network namespaces, cgroups, child processes) and
// probes of its kernel log, exporter pages and Prometheus.
package localtarget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe/promapi"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe/scrape"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/fault/nodeall"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/colltrace"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
	"github.com/gpuchaos/gpuchaos/internal/node/tick"
	"github.com/gpuchaos/gpuchaos/internal/node/xidwatch"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
)

// Options configure Start. Zero values take the documented
// defaults.
type Options struct {
	// Source lists this node's GPUs; required. The target does not close
	// it.
	Source gpu.Source
	// Hostname names the node in the inventory; empty means os.Hostname().
	Hostname string
	// Kmsg says where to read the kernel log (default /dev/kmsg).
	Kmsg kmsg.Options
	// Writer writes kernel log records for the kernel-log mechanism; nil
	// means kmsg.Writer{}, /dev/kmsg.
	Writer fault.KmsgWriter
	// StateDir is where mechanisms that change the node (network qdiscs
	// and filters, child processes) record what they did, so that the
	// next start recovers what a killed run left; keep it beside the
	// ledger. Empty refuses those mechanisms.
	StateDir string
	// Prometheus is the base URL Prometheus probes without a url of their
	// own ask; empty refuses such probes.
	Prometheus string
	// Exporter is the /metrics page threshold probes and the built-in
	// exporter detectors read, scraped at each observation as a
	// Prometheus would (see internal/detect/probe/scrape); empty means the
	// gpuchaos agent's default, DefaultExporter.
	Exporter string
	// MoreExporters are further pages scraped with it: a training job's
	// ranks and supervisor, whose job series the workload detectors
	// read. Each series carries its page's instance label.
	MoreExporters []string
	// ScrapeInterval is how often the pages are scraped in the background
	// from Start to Close, as a Prometheus would, so that the job's
	// rate before injection is known (the workload checks' baseline);
	// default 1s, negative scrapes only when a probe observes.
	ScrapeInterval time.Duration
	// Client sends Prometheus queries; nil means http.DefaultClient.
	Client *http.Client
	// LogWindow is how long a matching kernel log line keeps a log probe
	// holding, as a log watcher's alert stays up; default 10m.
	LogWindow time.Duration
	// LogHistory is how many recent kernel log lines log probes can see;
	// default 4096.
	LogHistory int
	// Collectives, when set, traces NCCL collectives of the job's
	// processes with uprobes for the collective-trace detector; nil
	// refuses that detector.
	Collectives *colltrace.Options
	// Jobs declares the training jobs running on this node, so that
	// rank- and job-scope faults have targets to select: the node cannot
	// tell on its own which processes form a job. A rank without a Node
	// is put on this node.
	Jobs []inventory.Job
	// Logger receives the target's and its injectors' logs; nil discards
	// them.
	Logger *slog.Logger
	// JobNames are jobs found at each inventory by their processes:
	// every process whose environment has GPUCHAOS_JOB set to the name
	// and a RANK is a rank, on the GPU its LOCAL_RANK names (its RANK
	// without one), or on no GPU when the node lists none.
	JobNames []string
}

// DefaultExporter is where the gpuchaos agent serves by default.
const DefaultExporter = "http://127.0.0.1:9400/metrics"

// Target runs experiments on the node it runs on, on the wall clock.
// Faults go through the node's mechanisms (the kernel-log mechanism writes
// to /dev/kmsg); probes read the real kernel log, which the target follows
// from Start until Close, or ask a Prometheus server.
type Target struct {
	opts  Options
	host  string
	devs  []gpu.Device
	watch *xidwatch.Watcher
	// metrics is the history of the exporter page, shared by every
	// metric probe so one observation round costs one fetch.
	metrics *scrape.Store
	// coll traces collectives for the collective-trace detector; nil
	// without Options.Collectives.
	coll *colltrace.Tracer
	// started is when the history begins; stopScrape ends the background
	// scrapes and waits for them.
	started    time.Time
	stopScrape func()
	// ledger and closeMore are set by Open: the journal it recovered and
	// what it opened besides the target.
	ledger     ledger.Ledger
	ledgerPath string
	closeMore  func() error

	mu    sync.Mutex
	lines []logLine // ring of recent records, oldest first once full
}

// logLine is one kernel log record as log probes see it.
type logLine struct {
	at   time.Time
	text string
}

// Start lists the node's GPUs and starts following the kernel log at
// its end. Reading /dev/kmsg needs root or CAP_SYSLOG. Close stops it.
func Start(ctx context.Context, opts Options) (*Target, error) {
	if opts.Source == nil {
		return nil, errors.New("start local target: no gpu source")
	}
	if opts.Writer == nil {
		opts.Writer = kmsg.Writer{}
	}
	if opts.LogWindow <= 0 {
		opts.LogWindow = 10 * time.Minute
	}
	if opts.LogHistory <= 0 {
		opts.LogHistory = 4096
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	host := opts.Hostname
	if host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("start local target: read hostname: %w", err)
		}
		host = h
	}
	devs, err := opts.Source.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("start local target: list gpus: %w", err)
	}
	if opts.Exporter == "" {
		opts.Exporter = DefaultExporter
	}
	if opts.ScrapeInterval == 0 {
		opts.ScrapeInterval = time.Second
	}
	// A scrape never outlasts the interval (Prometheus' rule), so a
	// stopped rank's page goes stale at once instead of holding up
	// every observation behind it.
	timeout := 5 * time.Second
	if opts.ScrapeInterval > 0 {
		timeout = min(timeout, opts.ScrapeInterval)
	}
	store, err := scrape.New(scrape.Options{URL: opts.Exporter, More: opts.MoreExporters, Client: opts.Client, Timeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("start local target: %w", err)
	}
	t := &Target{opts: opts, host: host, devs: devs, metrics: store, started: time.Now(), stopScrape: func() {}}
	f, err := kmsg.Open(opts.Kmsg)
	if err != nil {
		return nil, fmt.Errorf("start local target: %w", err)
	}
	// One follower feeds both the XID watcher and the log probes, so both
	// see the same records in the same order.
	t.watch, err = xidwatch.Start(ctx, xidwatch.Options{
		Source:  teeSource{f: f, tap: t.keep},
		Resolve: xidwatch.GPUResolver(devs),
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("start local target: %w", err)
	}
	if opts.Collectives != nil {
		if t.coll, err = colltrace.Start(ctx, *opts.Collectives); err != nil {
			return nil, errors.Join(fmt.Errorf("start local target: %w", err), t.watch.Stop())
		}
	}
	if opts.ScrapeInterval > 0 {
		t.stopScrape = scrapeEvery(context.WithoutCancel(ctx), store, opts.ScrapeInterval)
	}
	return t, nil
}

// scrapeEvery scrapes s every d until the returned stop is called, which
// waits for the loop to end. A failed scrape is kept as staleness in the
// history, which is what probes should see, so errors go nowhere else.
func scrapeEvery(ctx context.Context, s *scrape.Store, d time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			_ = s.Scrape(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// HistorySince is when the target began recording the pages' history.
func (t *Target) HistorySince() time.Time { return t.started }

// Close stops following the kernel log, scraping and tracing collectives,
// and closes what Open opened (the GPU source, the ledger).
func (t *Target) Close() error {
	t.stopScrape()
	err := t.watch.Stop()
	if t.coll != nil {
		err = errors.Join(err, t.coll.Close())
	}
	if t.closeMore != nil {
		err = errors.Join(err, t.closeMore())
	}
	return err
}

// Settings polls every second and skips the wait for detectors to clear: a
// kernel log line never leaves the log, so kmsg-xid cannot clear, and
// waiting would only wait out the window. The ledger is the one Open
// recovered.
func (t *Target) Settings() target.Settings {
	return target.Settings{PollInterval: time.Second, RecoveryWindow: -1, Ledger: t.ledger, LedgerPath: t.ledgerPath}
}

// Prepare does nothing: the node is what it is; workload checks wait for
// their baseline in the engine (HistorySince).
func (*Target) Prepare(context.Context) error { return nil }

// Watcher returns the XID watcher over the node's kernel log.
func (t *Target) Watcher() *xidwatch.Watcher { return t.watch }

// keep stores a record for log probes; the watcher's goroutine calls it.
func (t *Target) keep(r kmsg.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == t.opts.LogHistory {
		t.lines = append(t.lines[:0], t.lines[1:]...)
	}
	t.lines = append(t.lines, logLine{at: time.Now(), text: r.Message})
}

// teeSource hands every record of a kernel log follower to tap before the
// XID watcher sees it.
type teeSource struct {
	f   *kmsg.Follower
	tap func(kmsg.Record)
}

func (s teeSource) Run(ctx context.Context, fn func(kmsg.Record)) error {
	return s.f.Run(ctx, func(r kmsg.Record) {
		s.tap(r)
		fn(r)
	})
}

func (s teeSource) Lost() uint64 { return s.f.Lost() }

// Kind returns target.Local.
func (*Target) Kind() target.Kind { return target.Local }

// Now returns the wall-clock time.
func (*Target) Now() time.Time { return time.Now() }

// Sleep waits for d of wall time, returning ctx.Err() early when ctx ends.
func (*Target) Sleep(ctx context.Context, d time.Duration) error {
	return tick.Sleep(ctx, d)
}

// Inventory returns one node, named by the hostname, with the GPUs the
// source listed at start, and the jobs Options.Jobs declares.
func (t *Target) Inventory(ctx context.Context) (inventory.Inventory, error) {
	n := inventory.Node{Name: t.host}
	for _, d := range t.devs {
		n.GPUs = append(n.GPUs, inventory.GPU{Index: d.Index, UUID: d.UUID, PCI: d.PCI, Model: d.Name})
	}
	inv := inventory.Inventory{Nodes: []inventory.Node{n}}
	for _, j := range t.opts.Jobs {
		// A copy, so that filling in the node leaves the options alone.
		j.Ranks = slices.Clone(j.Ranks)
		for i := range j.Ranks {
			if j.Ranks[i].Node == "" {
				j.Ranks[i].Node = t.host
			}
		}
		inv.Jobs = append(inv.Jobs, j)
	}
	for _, name := range t.opts.JobNames {
		ranks, err := procfind.Ranks(name)
		if err != nil {
			return inventory.Inventory{}, fmt.Errorf("find the ranks of job %s: %w", name, err)
		}
		if len(ranks) == 0 {
			return inventory.Inventory{}, fmt.Errorf("job %s: no process on this node has %s=%s and a RANK", name, procfind.EnvJob, name)
		}
		j := inventory.Job{Name: name}
		for _, r := range ranks {
			// A rank's launcher and its forked workers carry its
			// environment too: the one procfind marks Main is the rank
			// (see procfind's package doc), the others add nothing here.
			if !r.Main {
				continue
			}
			g := r.LocalRank
			if g < 0 {
				g = r.Rank
			}
			if len(t.devs) == 0 {
				g = inventory.NoGPU // a job on CPUs, on a node without GPUs
			}
			j.Ranks = append(j.Ranks, inventory.Rank{Rank: r.Rank, Node: t.host, GPU: g})
		}
		inv.Jobs = append(inv.Jobs, j)
	}
	return inv, ctx.Err()
}

// Injector returns the node's injector for the mechanism: the kernel-log
// mechanism writes through the target's kernel log writer; mechanisms
// without an injector in this build say so.
func (t *Target) Injector(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error) {
	return nodeall.Injector(f, m, nodeall.Env(nodeall.Node{Kmsg: t.opts.Writer, StateDir: t.opts.StateDir, GPUNode: t.gpuNode, Logger: t.opts.Logger}))
}

// gpuNode returns the NUMA node NVML (or sysfs) reported for GPU index at
// start, -1 when unknown.
func (t *Target) gpuNode(_ context.Context, index int) (int, error) {
	for _, d := range t.devs {
		if d.Index == index {
			return d.NUMANode, nil
		}
	}
	return -1, fmt.Errorf("gpu %d is not on this node (%d GPUs)", index, len(t.devs))
}

// Probe builds a probe over the node's kernel log (a log pattern, or the
// kmsg-xid detector through the XID watcher), a Prometheus probe, or a
// threshold probe or built-in detector over the exporter's page (the
// agent's by default), which the target scrapes at each observation and
// keeps a history of, as a Prometheus would.
func (t *Target) Probe(name string, spec v1alpha1.ProbeSpec) (probe.Probe, error) {
	switch {
	case spec.Kubernetes != nil:
		return nil, fmt.Errorf("probe %s asks the Kubernetes API server, which only the k8s target has", name)
	case spec.Prometheus != nil:
		return promapi.FromSpec(name, *spec.Prometheus, t.opts.Prometheus, t.opts.Client)
	case spec.Log != nil:
		re, err := regexp.Compile(spec.Log.Pattern)
		if err != nil {
			return nil, fmt.Errorf("probe %s: log pattern: %w", name, err)
		}
		return &localLogProbe{name: name, t: t, re: re}, nil
	case spec.Detector == "kmsg-xid":
		// The watcher's probe counts XIDs read since it was made, so an
		// XID logged before the run does not read as already firing.
		return newXIDProbe(t.watch, name, t.host, nil), nil
	case spec.Detector == probe.CollectiveTraceDetector:
		if t.coll == nil {
			return nil, fmt.Errorf("probe %s: detector %s needs the job's processes or libnccl to trace (run --trace-pid or --trace-lib)", name, spec.Detector)
		}
		return colltrace.NewProbe(name, t.coll, colltrace.ProbeOptions{Node: t.host}), nil
	case spec.Detector != "", spec.Threshold != nil, spec.Workload != nil:
		every := t.opts.ScrapeInterval
		if every <= 0 {
			every = time.Second
		}
		p, err := probe.FromSpec(name, spec, evalEvery{t.metrics, every})
		if err != nil {
			return nil, fmt.Errorf("probe %s: %w", name, err)
		}
		if t.opts.ScrapeInterval > 0 {
			// The background scrapes keep the history current.
			return scrape.Over(p, t.metrics), nil
		}
		return scrape.Probe(p, t.metrics), nil
	}
	return nil, fmt.Errorf("probe %s: defines nothing: set detector, threshold, log, prometheus, workload or kubernetes", name)
}

// localLogProbe holds while a kernel log line matching re was read within
// the log window.
type localLogProbe struct {
	name string
	t    *Target
	re   *regexp.Regexp
}

func (p *localLogProbe) Name() string { return p.name }

func (p *localLogProbe) Observe(ctx context.Context) (probe.Observation, error) {
	if err := ctx.Err(); err != nil {
		return probe.Observation{}, err
	}
	from := time.Now().Add(-p.t.opts.LogWindow)
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	for i := len(p.t.lines) - 1; i >= 0 && p.t.lines[i].at.After(from); i-- {
		if l := p.t.lines[i]; p.re.MatchString(l.text) {
			return probe.Observation{
				Holds: true, Detail: p.t.host + ": " + l.text,
				Subjects: []probe.Subject{{Node: p.t.host}},
			}, nil
		}
	}
	return probe.Observation{}, nil
}

// evalEvery is the scraped history as rule probes read it: the target
// evaluates rules as often as it scrapes, not on the rule groups' 15 s, which
// would only delay every detection on a node that has no Prometheus.
type evalEvery struct {
	*scrape.Store
	every time.Duration
}

func (e evalEvery) EvalEvery() time.Duration { return e.every }
