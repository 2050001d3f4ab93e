package twin

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// Errors Apply wraps, so callers can branch on them with errors.Is.
var (
	// ErrTargetGone means the target exists in the inventory but cannot be
	// touched now: its GPU has fallen off the bus.
	ErrTargetGone = errors.New("target gone")
	// ErrUnknownTarget means the target is not in the inventory.
	ErrUnknownTarget = errors.New("unknown target")
)

// defaultStart is the virtual time a twin starts at when Options.Start is zero.
func defaultStart() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// Options configure New. The zero value is the demo cluster, seed 0.
type Options struct {
	// Spec is the cluster; the zero value means Default().
	Spec ClusterSpec
	// Seed drives all randomness (math/rand/v2 PCG): the same seed gives
	// the same run, byte for byte.
	Seed uint64
	// Start is the virtual time at creation; zero means
	// 2026-01-01T00:00:00Z.
	Start time.Time
	// ScrapeInterval is how often series are sampled; zero means the
	// spec's value, by default 30s (dcgm-exporter's default collection
	// interval).
	ScrapeInterval time.Duration
	// BackgroundFailures turns on random failures at the spec's rates per
	// GPU-hour (off by default so experiments are clean).
	BackgroundFailures bool
	// Retention is how much sample and kernel-log history Sleep keeps
	// behind the clock; zero means DefaultRetention, negative keeps
	// everything. History from Retention before the first fault applied
	// with Apply onward is never dropped, so an experiment's probes read
	// from their baselines before injection to its end: memory follows
	// Retention plus the experiment's own span, not the length of the
	// warm-up.
	Retention time.Duration
}

// Twin is a simulated cluster on a virtual clock. It is not safe for
// concurrent use: one caller drives it.
type Twin struct {
	spec   ClusterSpec
	start  time.Time
	now    time.Duration // virtual time since start
	scrape time.Duration
	seed   uint64

	seq    uint64
	events eventQueue

	nodes  []*node
	gpus   []*gpu
	jobs   []*job
	byNode map[string]*node
	byJob  map[string]*job

	applied map[string]*application
	active  []*application // in apply order, so overlapping effects combine deterministically

	store seriesStore
	logs  []series.LogLine

	// retention is Options.Retention resolved (negative: keep everything);
	// Sleep trims every trimEvery, trimmed being the virtual time of the
	// last trim. pinned is set by the first Apply, at pin: history from
	// retention before it is kept for the experiment.
	retention time.Duration
	trimEvery time.Duration
	trimmed   time.Duration
	pinned    bool
	pin       time.Duration

	failRNG    *rand.Rand
	noiseRNG   *rand.Rand // telemetry noise (noise.go), drawn at every scrape
	background bool
	bgCount    int

	// thermalDecay is exp(−physicsStep/τ), the first-order decay per step.
	thermalDecay float64
}

// New builds a twin from opts. It validates the spec (a zero Spec means
// Default()), places the jobs, draws per-GPU variability from the seed and
// takes the first scrape at the start time, so a fresh twin already has one
// sample per series.
func New(opts Options) (*Twin, error) {
	spec := opts.Spec
	if reflect.ValueOf(spec).IsZero() {
		spec = Default()
	} else {
		// Normalise a copy: the caller's slices and maps stay untouched.
		spec = cloneSpec(spec)
		if err := spec.normalize(); err != nil {
			return nil, fmt.Errorf("new twin: %w", err)
		}
	}
	start := opts.Start
	if start.IsZero() {
		start = defaultStart()
	}
	t := &Twin{
		spec:       spec,
		start:      start.UTC(),
		scrape:     spec.Exporter.ScrapeInterval,
		seed:       opts.Seed,
		byNode:     map[string]*node{},
		byJob:      map[string]*job{},
		applied:    map[string]*application{},
		background: opts.BackgroundFailures,
		retention:  opts.Retention,
		// Separate streams, so that turning background failures on does
		// not change the variability a seed draws.
		failRNG:  rand.New(rand.NewPCG(opts.Seed, 0x6661696c)),   // "fail"
		noiseRNG: rand.New(rand.NewPCG(opts.Seed, 0x6e6f697365)), // "noise"
	}
	t.thermalDecay = math.Exp(-spec.PhysicsStep.Seconds() / spec.ThermalTimeConstant.Seconds())
	if opts.ScrapeInterval < 0 || opts.ScrapeInterval > 0 && opts.ScrapeInterval < time.Second {
		// As exporter.scrapeInterval: each scrape appends a sample to every
		// series, so a nanosecond interval would fill memory at once.
		return nil, fmt.Errorf("new twin: scrape interval %s is shorter than 1s", opts.ScrapeInterval)
	}
	if opts.ScrapeInterval > 0 {
		t.scrape = opts.ScrapeInterval
	}
	if t.retention == 0 {
		t.retention = DefaultRetention
	}
	// Never more often than a scrape: between two scrapes nothing new
	// has been kept, so a tiny retention cannot make every event a trim.
	t.trimEvery = max(t.retention/trimFraction, t.scrape)
	if err := t.build(); err != nil {
		return nil, fmt.Errorf("new twin: %w", err)
	}
	t.store.init(t)
	// Start in steady state: the cluster has been training for a while.
	for _, j := range t.jobs {
		t.resume(j, false)
	}
	for _, g := range t.gpus {
		g.settle(t)
	}
	t.schedule(t.spec.PhysicsStep, evPhysics, 0, 0, "")
	t.doScrape()
	t.schedule(t.scrape, evScrape, 0, 0, "")
	if t.background {
		t.scheduleBackground()
	}
	return t, nil
}

// Spec returns the normalised cluster spec the twin runs.
func (t *Twin) Spec() ClusterSpec { return cloneSpec(t.spec) }

// Now returns the virtual time.
func (t *Twin) Now() time.Time { return t.start.Add(t.now) }

// Sleep advances virtual time by d, processing every event that falls due in
// order. It returns ctx.Err() if ctx is done; the context is checked between
// events (at least once per physics step, 1s simulated by default), and the
// clock then stays at the last processed event.
//
// As it goes, Sleep drops samples and kernel log lines older than the
// retention (Options.Retention), every twentieth of it, so a long warm-up
// holds no more than a short one; the newest sample of every series stays,
// as with Trim. A trimmed series gets a new sample
// slice: slices read before Sleep stay as they were.
func (t *Twin) Sleep(ctx context.Context, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("sleep: negative duration %s", d)
	}
	end := t.now + d
	for len(t.events) > 0 && t.events[0].at <= end {
		if err := ctx.Err(); err != nil {
			return err
		}
		ev := t.events.pop()
		t.now = ev.at
		t.handle(ev)
		if t.retention > 0 && t.now-t.trimmed >= t.trimEvery {
			t.autoTrim()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t.now = end
	return nil
}

// Inventory lists nodes, GPUs (with UUID and PCI bus id) and jobs with their
// rank placement. GPUs off the bus stay listed: they are still in the
// machine and in the scheduler's books.
func (t *Twin) Inventory() inventory.Inventory {
	inv := inventory.Inventory{Nodes: make([]inventory.Node, 0, len(t.nodes)), Jobs: make([]inventory.Job, 0, len(t.jobs))}
	for _, n := range t.nodes {
		tn := inventory.Node{Name: n.name, GPUs: make([]inventory.GPU, 0, len(n.gpus))}
		if len(n.labels) > 0 {
			tn.Labels = make(map[string]string, len(n.labels))
			for k, v := range n.labels {
				tn.Labels[k] = v
			}
		}
		for _, g := range n.gpus {
			tn.GPUs = append(tn.GPUs, inventory.GPU{Index: g.index, UUID: g.uuid, PCI: g.pci, Model: g.model.ModelName})
		}
		inv.Nodes = append(inv.Nodes, tn)
	}
	for _, j := range t.jobs {
		tj := inventory.Job{Name: j.spec.Name, Ranks: make([]inventory.Rank, len(j.ranks))}
		for r, g := range j.ranks {
			tj.Ranks[r] = inventory.Rank{Rank: r, Node: g.node.name, GPU: g.index}
		}
		inv.Jobs = append(inv.Jobs, tj)
	}
	return inv
}

// Series returns every series so far, in creation order; samples reach up to
// Now. Callers must not modify the series.
func (t *Twin) Series() []*series.Series {
	out := make([]*series.Series, len(t.store.all))
	copy(out, t.store.all)
	return out
}

// Select returns the series of one metric name. Callers must not modify the
// result.
func (t *Twin) Select(metric string) []*series.Series { return t.store.byMetric[metric] }

// Logs returns the kernel log lines so far, all nodes, in time order.
// Callers must not modify the result.
func (t *Twin) Logs() []series.LogLine { return t.logs }

// event kinds. Job events carry the job's index and a generation: a crash or
// hang bumps the generation, so events scheduled before it are dropped when
// they come due instead of being searched for and removed.
type evKind uint8

const (
	evPhysics evKind = iota
	evScrape
	evStep       // a training step completes
	evStallEnd   // an async checkpoint's snapshot stall ends
	evWriteDone  // a checkpoint write completes (generation: write gen)
	evWriteKill  // the checkpoint writer dies mid-write (generation: write gen)
	evRestart    // restart cost paid: the job tries to start again
	evWatchdog   // the NCCL watchdog fires on a hung job
	evBackground // a background failure
	evRepair     // a background failure is repaired (key)
)

type event struct {
	at   time.Duration
	seq  uint64
	kind evKind
	idx  int
	gen  uint64
	key  string
}

// eventQueue is a min-heap on (at, seq): seq breaks ties in scheduling
// order, which makes runs deterministic. push and pop work on values and
// use heap.Fix, so the hot path does not box events into interfaces.
type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }

// Push and Pop satisfy heap.Interface; the twin itself uses push and pop.
func (q *eventQueue) Push(x any) { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (q *eventQueue) push(e event) {
	*q = append(*q, e)
	heap.Fix(q, len(*q)-1)
}

func (q *eventQueue) pop() event {
	old := *q
	e := old[0]
	n := len(old) - 1
	old[0] = old[n]
	*q = old[:n]
	if n > 0 {
		heap.Fix(q, 0)
	}
	return e
}

func (t *Twin) schedule(after time.Duration, kind evKind, idx int, gen uint64, key string) {
	t.seq++
	t.events.push(event{at: t.now + after, seq: t.seq, kind: kind, idx: idx, gen: gen, key: key})
}

func (t *Twin) handle(ev event) {
	switch ev.kind {
	case evPhysics:
		t.physics(t.spec.PhysicsStep.Seconds())
		t.schedule(t.spec.PhysicsStep, evPhysics, 0, 0, "")
	case evScrape:
		t.doScrape()
		t.schedule(t.scrape, evScrape, 0, 0, "")
	case evStep, evStallEnd, evRestart, evWatchdog:
		j := t.jobs[ev.idx]
		if ev.gen != j.gen {
			return
		}
		switch ev.kind {
		case evStep:
			t.stepDone(j)
		case evStallEnd:
			j.state = jobRunning
			t.startStep(j)
		case evRestart:
			t.tryRestart(j)
		case evWatchdog:
			t.crash(j, "nccl watchdog timeout")
		}
	case evWriteDone, evWriteKill:
		j := t.jobs[ev.idx]
		if j.write == nil || ev.gen != j.write.gen {
			return
		}
		if ev.kind == evWriteDone {
			t.writeDone(j)
		} else {
			t.crashRank(j, "checkpoint writer killed")
		}
	case evBackground:
		t.backgroundFailure()
	case evRepair:
		// Revert of a key the twin applied itself cannot fail.
		_ = t.Revert(ev.key)
	}
}

func (t *Twin) log(n *node, prio int, text string) {
	if len(t.logs) >= MaxLogLines {
		// A ring buffer's worth is kept; dropping a batch at once, not a
		// line per line, keeps the copying amortised.
		t.logs = slices.Clone(t.logs[len(t.logs)-MaxLogLines+MaxLogLines/8:])
	}
	t.logs = append(t.logs, series.LogLine{Time: t.Now(), Node: n.name, Priority: prio, Text: text})
}

func cloneSpec(s ClusterSpec) ClusterSpec {
	c := s
	// slices.Clone keeps nil and empty apart, so a clone compares equal.
	c.Nodes.List = slices.Clone(s.Nodes.List)
	for i := range c.Nodes.List {
		c.Nodes.List[i].Labels = cloneMap(c.Nodes.List[i].Labels)
	}
	c.Nodes.Labels = cloneMap(s.Nodes.Labels)
	c.FailureRates = cloneMap(s.FailureRates)
	c.Exporter.Counters = slices.Clone(s.Exporter.Counters)
	c.Exporter.OptIn = slices.Clone(s.Exporter.OptIn)
	c.Exporter.Exporters = slices.Clone(s.Exporter.Exporters)
	c.Jobs = slices.Clone(s.Jobs)
	return c
}

func cloneMap[V any](m map[string]V) map[string]V {
	if m == nil {
		return nil
	}
	c := make(map[string]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
