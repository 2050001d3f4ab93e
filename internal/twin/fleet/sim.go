package fleet

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Defaults for the zero values of Options.
const (
	DefaultGPUsPerNode        = 8
	DefaultModel              = "H100"
	DefaultCheckpointInterval = 30 * time.Minute
	DefaultCheckpointCost     = 60 * time.Second
	DefaultRestartCost        = 10 * time.Minute
)

// Limits on Options, so that no input can make Simulate eat the host's
// memory or run for ever. Errors past them name the limit.
const (
	// MaxGPUs is the largest fleet: 2^20, 64 times Llama 3's 16,384 and
	// five times the largest clusters announced in 2025.
	MaxGPUs = 1 << 20
	// MaxGPUsPerNode is the most GPUs of one node, as in the twin: 72, a
	// GB200 NVL72 rack counted as one node.
	MaxGPUsPerNode = 72
	// MaxRate is the highest interruption rate per GPU-hour, for each
	// class and for all classes together: one failure per GPU every hour,
	// fifty thousand times Llama 3's 2e-5.
	MaxRate = 1.0
	// MaxInterruptions bounds the interruptions a run may expect (rates ×
	// GPUs × Duration): every one is an event and an entry of
	// Result.Events. At the limit a run takes about a second and 150 MB;
	// the default rates reach it only past a century of 16,384 GPUs or
	// 2.7 years of MaxGPUs.
	MaxInterruptions = 500_000
)

// ExpectedInterruptions is the number of random interruptions a run of
// classes over gpus for d expects: the sum of the rates × gpus × hours.
func ExpectedInterruptions(classes []Class, gpus int, d time.Duration) float64 {
	total := 0.0
	for _, c := range classes {
		total += c.Rate
	}
	return total * float64(gpus) * d.Hours()
}

// asyncStallRatio is the stall of an asynchronous checkpoint as a share of
// the synchronous cost, from the 7B-model measurement in DESIGN.md §6 (a
// 149 s stall cut to 6 s).
const asyncStallRatio = 6.0 / 149.0

// checkEvery is how many events pass between two looks at ctx; a few
// thousand events take well under a millisecond, so cancellation is prompt
// without paying for a channel receive on every event.
const checkEvery = 1024

// ErrInvalidOptions wraps every error Simulate returns for options it
// cannot run, so callers can tell bad input from a cancelled run.
var ErrInvalidOptions = errors.New("invalid options")

// Models returns the GPU models Simulate accepts. The default rates were
// measured on H100; for the others they are applied unchanged and the
// result says so in Notes.
func Models() []string { return []string{"A100", "H100", "H200", "B200"} }

// Options describe one fleet-wide synchronous training job. The zero value
// of every field but GPUs and Duration means the documented default.
type Options struct {
	// GPUs is the number of GPUs the job spans, from 1 to MaxGPUs.
	GPUs int
	// GPUsPerNode groups GPUs into nodes for reporting which node a
	// failure hit, at most MaxGPUsPerNode; zero means DefaultGPUsPerNode.
	GPUsPerNode int
	// Duration is the simulated wall-clock window; it must be positive.
	Duration time.Duration
	// Seed makes the run reproducible: equal options give equal results.
	Seed uint64
	// Model is the GPU model, one of Models; empty means DefaultModel.
	Model string
	// Classes are the interruption classes; nil means DefaultClasses.
	// Their rates add up to at most MaxRate, and with GPUs and Duration
	// expect at most MaxInterruptions.
	Classes []Class
	// CheckpointInterval is the running time between the end of one
	// checkpoint (or a resume) and the start of the next; zero means
	// DefaultCheckpointInterval.
	CheckpointInterval time.Duration
	// CheckpointCost is how long writing a checkpoint takes: the stall of
	// a synchronous checkpoint, or the background write of an
	// asynchronous one. Zero means DefaultCheckpointCost.
	CheckpointCost time.Duration
	// Async selects asynchronous checkpoints: training stalls only for
	// AsyncStall while the state is copied, and the checkpoint becomes the
	// restore point CheckpointCost later, once it is written.
	Async bool
	// AsyncStall is the stall of an asynchronous checkpoint; zero means
	// CheckpointCost × 6/149 (DESIGN.md §6).
	AsyncStall time.Duration
	// RestartCost is the down time of every interruption before class
	// recovery is added; zero means DefaultRestartCost.
	RestartCost time.Duration
	// Injected are failures at fixed times, in addition to the random
	// ones; with all rates zero they script a run exactly.
	Injected []Injection
}

// Injection is one failure at a fixed time of the window.
type Injection struct {
	// At is the offset from the start of the window; it must lie inside
	// it.
	At time.Duration
	// Class names one of the run's classes.
	Class string
	// GPU is the index of the GPU hit, in [0, GPUs).
	GPU int
}

// Interruption records one failure that interrupted the job or its restart.
type Interruption struct {
	// At is the offset from the start of the window.
	At time.Duration
	// Class is the name of the failure's class.
	Class string
	// GPU and Node locate the failure; Node is GPU / GPUsPerNode.
	GPU, Node int
	// DuringRestart is true when the job was already down; the failure
	// then extends the restart instead of losing work.
	DuringRestart bool
	// LostWork is the training time since the last restore point that the
	// interruption threw away.
	LostWork time.Duration
}

// LostGPUHours splits the GPU-hours that produced no kept training.
type LostGPUHours struct {
	// Total is GPUs × (wall − productive time), in hours; it is the sum of
	// the other three.
	Total float64
	// Work is training thrown away by rolling back to a checkpoint.
	Work float64
	// Restart is time spent down: restart cost, class recovery and
	// failures during restarts.
	Restart float64
	// Checkpoint is time stalled writing checkpoints, including
	// checkpoints cut short by a failure.
	Checkpoint float64
}

// Result is the outcome of one simulated window. The four time buckets
// Productive, LostWork, Restart and CheckpointStall add up to Wall exactly.
type Result struct {
	// Options are the options run, with defaults filled in.
	Options Options
	// Wall is the length of the window.
	Wall time.Duration
	// Productive is training time kept at the end of the window; work
	// after the last checkpoint counts, since nothing interrupted it.
	Productive time.Duration
	// LostWork is training time rolled back by interruptions.
	LostWork time.Duration
	// Restart is the time the job was down.
	Restart time.Duration
	// CheckpointStall is the time training stood still for checkpoints.
	CheckpointStall time.Duration
	// Interruptions counts every failure in the window, including those
	// that struck while the job was already restarting.
	Interruptions int
	// InterruptionsDuringRestart is the part of Interruptions that struck
	// a job already down.
	InterruptionsDuringRestart int
	// ByClass counts Interruptions per class name; every class of the run
	// is present, with zero where none struck.
	ByClass map[string]int
	// Checkpoints counts checkpoints that became restore points.
	Checkpoints int
	// NodesHit is the number of distinct nodes at least one failure hit.
	NodesHit int
	// Events lists the interruptions in time order.
	Events []Interruption
	// MTBF is the measured mean time between interruptions, Wall divided
	// by Interruptions; zero when there were none.
	MTBF time.Duration
	// ExpectedMTBF is 1 / (GPUs × sum of class rates); zero when every
	// rate is zero.
	ExpectedMTBF time.Duration
	// YoungInterval is Young's checkpoint interval √(2 · stall · MTBF) for
	// the run's checkpoint stall, using the measured MTBF, or the expected
	// one when nothing failed; zero when nothing can fail.
	YoungInterval time.Duration
	// ETTR is the effective training time ratio: Productive / Wall.
	ETTR float64
	// Goodput is kept GPU-hours of training over GPU-hours held. The job
	// holds the whole fleet for the whole window at full speed, so here
	// it equals ETTR; the two part once a job holds less than the fleet or
	// runs slower than ideal, which this model leaves out.
	Goodput float64
	// LostGPUHours splits GPUs × (Wall − Productive) by cause.
	LostGPUHours LostGPUHours
	// Notes are caveats about the inputs worth showing a reader.
	Notes []string
}

// YoungInterval returns Young's first-order optimal checkpoint interval
// √(2 · cost · mtbf), rounded to the second; zero if either is not
// positive.
func YoungInterval(cost, mtbf time.Duration) time.Duration {
	if cost <= 0 || mtbf <= 0 {
		return 0
	}
	s := math.Sqrt(2 * cost.Seconds() * mtbf.Seconds())
	return time.Duration(math.Round(s)) * time.Second
}

// Simulate runs one window of a synchronous data-parallel job over the
// whole fleet and returns what it achieved. It is deterministic for given
// options, and returns ctx's error, wrapped, if ctx ends first.
func Simulate(ctx context.Context, opts Options) (Result, error) {
	o, notes, err := opts.withDefaults()
	if err != nil {
		return Result{}, err
	}
	s := newSim(o)
	if err := s.run(ctx); err != nil {
		return Result{}, fmt.Errorf("simulate %d GPUs for %s: %w", o.GPUs, o.Duration, err)
	}
	return s.result(notes), nil
}

func (o Options) withDefaults() (Options, []string, error) {
	bad := func(format string, a ...any) (Options, []string, error) {
		return Options{}, nil, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, a...)...)
	}
	if o.GPUs <= 0 {
		return bad("GPUs must be positive, got %d", o.GPUs)
	}
	if o.GPUs > MaxGPUs {
		return bad("GPUs must be at most %d, got %d", MaxGPUs, o.GPUs)
	}
	if o.Duration <= 0 {
		return bad("Duration must be positive, got %s", o.Duration)
	}
	if o.GPUsPerNode < 0 || o.GPUsPerNode > MaxGPUsPerNode {
		return bad("GPUsPerNode must be in 0..%d, got %d", MaxGPUsPerNode, o.GPUsPerNode)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"CheckpointInterval", o.CheckpointInterval},
		{"CheckpointCost", o.CheckpointCost},
		{"AsyncStall", o.AsyncStall},
		{"RestartCost", o.RestartCost},
	} {
		if d.v < 0 {
			return bad("%s must not be negative, got %s", d.name, d.v)
		}
	}
	if o.GPUsPerNode == 0 {
		o.GPUsPerNode = DefaultGPUsPerNode
	}
	if o.Model == "" {
		o.Model = DefaultModel
	}
	if !slices.Contains(Models(), o.Model) {
		return bad("Model %q is not one of %v", o.Model, Models())
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.CheckpointCost == 0 {
		o.CheckpointCost = DefaultCheckpointCost
	}
	if o.RestartCost == 0 {
		o.RestartCost = DefaultRestartCost
	}
	if o.Async && o.AsyncStall == 0 {
		o.AsyncStall = time.Duration(float64(o.CheckpointCost) * asyncStallRatio).Round(time.Millisecond)
	}
	if !o.Async {
		o.AsyncStall = 0
	}
	if o.Classes == nil {
		o.Classes = DefaultClasses()
	} else {
		o.Classes = append([]Class(nil), o.Classes...)
	}
	seen := map[string]bool{}
	for _, c := range o.Classes {
		if c.Name == "" {
			return bad("a class has no name")
		}
		if seen[c.Name] {
			return bad("class %q appears twice", c.Name)
		}
		seen[c.Name] = true
		if err := checkRate(c.Rate); err != nil {
			return bad("class %q: %v", c.Name, err)
		}
		if c.Recovery < 0 {
			return bad("class %q: Recovery must not be negative, got %s", c.Name, c.Recovery)
		}
	}
	if err := checkTotal(o.Classes); err != nil {
		return bad("%v", err)
	}
	if n := ExpectedInterruptions(o.Classes, o.GPUs, o.Duration); n > MaxInterruptions {
		return bad("%.0f interruptions expected (rates × GPUs × Duration), over the limit of %d", n, MaxInterruptions)
	}
	o.Injected = append([]Injection(nil), o.Injected...)
	for _, in := range o.Injected {
		if !seen[in.Class] {
			return bad("injection at %s: class %q is not one of the run's classes", in.At, in.Class)
		}
		if in.At < 0 || in.At >= o.Duration {
			return bad("injection at %s: outside the window [0, %s)", in.At, o.Duration)
		}
		if in.GPU < 0 || in.GPU >= o.GPUs {
			return bad("injection at %s: GPU %d outside [0, %d)", in.At, in.GPU, o.GPUs)
		}
	}
	var notes []string
	if o.Model != DefaultModel && usesDefaultRates(o.Classes) {
		notes = append(notes, fmt.Sprintf("the default rates were measured on H100 (Llama 3); applied unchanged to %s", o.Model))
	}
	return o, notes, nil
}

// usesDefaultRates reports whether classes carry the default rates, so the
// note about H100-measured rates is only shown when it applies.
func usesDefaultRates(classes []Class) bool {
	def := DefaultRates()
	for _, c := range classes {
		if r, ok := def[c.Name]; !ok || r != c.Rate {
			return false
		}
	}
	return true
}

type jobState uint8

const (
	running jobState = iota
	stalled          // writing (sync) or snapshotting (async) a checkpoint
	down             // restarting after an interruption
)

// eventKind doubles as the tie-break at equal times: lower kinds run
// first. The window's end comes before anything at the same instant, so
// the window is [0, Duration); completions come before failures, so a
// checkpoint that ends the instant a GPU fails still counts.
type eventKind uint8

const (
	evEnd eventKind = iota
	evPersisted
	evCheckpointEnd
	evResume
	evFailure
	evCheckpointStart
)

type event struct {
	at    time.Duration
	kind  eventKind
	seq   uint64 // insertion order, the last tie-break
	epoch uint64 // job incarnation the event belongs to (not failures)
	class int    // failures: index into classes
	gpu   int    // injected failures: the GPU; -1 means draw one
	value time.Duration
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.seq < b.seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// sim is the state of one run. Time is integer nanoseconds so that the
// accounting buckets add up to the window exactly.
type sim struct {
	o      Options
	events eventHeap
	seq    uint64
	rngs   []*rand.Rand     // one stream per class
	perNs  []float64        // fleet arrival rate of each class, per nanosecond
	stall  time.Duration    // per checkpoint
	nodes  map[int]struct{} // nodes hit

	now       time.Duration
	since     time.Duration // when the current state began
	state     jobState
	epoch     uint64
	downUntil time.Duration
	progress  time.Duration // training time of the current history
	durable   time.Duration // progress at the newest restore point

	lostWork, restart, stallTime time.Duration
	checkpoints                  int
	byClass                      []int
	duringRestart                int
	log                          []Interruption
}

func newSim(o Options) *sim {
	s := &sim{
		o:       o,
		rngs:    make([]*rand.Rand, len(o.Classes)),
		perNs:   make([]float64, len(o.Classes)),
		byClass: make([]int, len(o.Classes)),
		nodes:   map[int]struct{}{},
		stall:   o.CheckpointCost,
	}
	if o.Async {
		s.stall = o.AsyncStall
	}
	for i, c := range o.Classes {
		// Each class draws from its own stream keyed by its name, so a
		// class's failure times depend only on the seed, its rate and the
		// fleet size: runs that differ only in checkpoint settings see the
		// same failures (common random numbers), and adding a class leaves
		// the others' failures where they were.
		h := fnv.New64a()
		h.Write([]byte(c.Name))
		s.rngs[i] = rand.New(rand.NewPCG(o.Seed, h.Sum64()))
		s.perNs[i] = c.Rate * float64(o.GPUs) / float64(time.Hour)
	}
	return s
}

// push schedules e. Events past the end of the window can never run, so
// they are dropped rather than kept in the heap.
func (s *sim) push(e event) {
	if e.at > s.o.Duration {
		return
	}
	e.seq = s.seq
	s.seq++
	heap.Push(&s.events, e)
}

// scheduleFailure draws the next arrival of class i after now, or nothing
// if it falls outside the window.
func (s *sim) scheduleFailure(i int) {
	if s.perNs[i] <= 0 {
		return
	}
	dt := s.rngs[i].ExpFloat64() / s.perNs[i]
	if dt >= float64(s.o.Duration-s.now) {
		return
	}
	s.push(event{at: s.now + time.Duration(dt), kind: evFailure, class: i, gpu: -1})
}

// after returns now + d, saturating instead of overflowing, so that a
// checkpoint interval of centuries cannot wrap round into the past.
func (s *sim) after(d time.Duration) time.Duration { return satAdd(s.now, d) }

// satAdd adds two non-negative durations, saturating at the largest one.
func satAdd(a, b time.Duration) time.Duration {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

func (s *sim) run(ctx context.Context) error {
	s.events = make(eventHeap, 0, len(s.o.Classes)+len(s.o.Injected)+4)
	s.push(event{at: s.o.Duration, kind: evEnd})
	for i := range s.o.Classes {
		s.scheduleFailure(i)
	}
	index := map[string]int{}
	for i, c := range s.o.Classes {
		index[c.Name] = i
	}
	for _, in := range s.o.Injected {
		s.push(event{at: in.At, kind: evFailure, class: index[in.Class], gpu: in.GPU})
	}
	s.push(event{at: s.o.CheckpointInterval, kind: evCheckpointStart, epoch: s.epoch})
	for n := 1; ; n++ {
		if n%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		e := heap.Pop(&s.events).(event)
		s.advance(e.at)
		if e.kind == evEnd {
			return nil
		}
		if e.kind == evFailure {
			s.fail(e)
			continue
		}
		if e.epoch != s.epoch {
			continue // scheduled by an incarnation an interruption ended
		}
		switch e.kind {
		case evResume:
			s.state = running
			s.push(event{at: s.after(s.o.CheckpointInterval), kind: evCheckpointStart, epoch: s.epoch})
		case evCheckpointStart:
			s.state = stalled
			s.push(event{at: s.after(s.stall), kind: evCheckpointEnd, epoch: s.epoch, value: s.progress})
		case evCheckpointEnd:
			s.state = running
			if s.o.Async {
				s.push(event{at: s.after(s.o.CheckpointCost), kind: evPersisted, epoch: s.epoch, value: e.value})
			} else {
				s.restorePoint(e.value)
			}
			s.push(event{at: s.after(s.o.CheckpointInterval), kind: evCheckpointStart, epoch: s.epoch})
		case evPersisted:
			s.restorePoint(e.value)
		}
	}
}

// advance moves the clock to t, charging the elapsed time to the bucket of
// the state the job was in.
func (s *sim) advance(t time.Duration) {
	d := t - s.since
	switch s.state {
	case running:
		s.progress += d
	case stalled:
		s.stallTime += d
	case down:
		s.restart += d
	}
	s.now, s.since = t, t
}

func (s *sim) restorePoint(progress time.Duration) {
	// Asynchronous writes can finish out of order when the interval is
	// shorter than the write; the newest snapshot wins.
	s.durable = max(s.durable, progress)
	s.checkpoints++
}

// fail handles one failure. A failure while the job runs or checkpoints
// rolls it back to the newest restore point and takes it down for the
// restart cost plus the class's recovery. A failure while it is already
// down restarts the restart: the job comes back no earlier than the new
// failure's restart and recovery allow, and no sooner than already planned.
func (s *sim) fail(e event) {
	if e.gpu < 0 {
		e.gpu = s.rngs[e.class].IntN(s.o.GPUs)
		s.scheduleFailure(e.class)
	}
	c := s.o.Classes[e.class]
	rec := Interruption{At: s.now, Class: c.Name, GPU: e.gpu, Node: e.gpu / s.o.GPUsPerNode}
	s.byClass[e.class]++
	s.nodes[rec.Node] = struct{}{}
	until := s.after(satAdd(s.o.RestartCost, c.Recovery))
	if s.state == down {
		rec.DuringRestart = true
		s.duringRestart++
		if until > s.downUntil {
			s.epoch++
			s.downUntil = until
			s.push(event{at: until, kind: evResume, epoch: s.epoch})
		}
	} else {
		rec.LostWork = s.progress - s.durable
		s.lostWork += rec.LostWork
		s.progress = s.durable
		s.state = down
		s.epoch++
		s.downUntil = until
		s.push(event{at: until, kind: evResume, epoch: s.epoch})
	}
	s.log = append(s.log, rec)
}

func (s *sim) result(notes []string) Result {
	o := s.o
	r := Result{
		Options:                    o,
		Wall:                       o.Duration,
		Productive:                 s.progress,
		LostWork:                   s.lostWork,
		Restart:                    s.restart,
		CheckpointStall:            s.stallTime,
		Interruptions:              len(s.log),
		InterruptionsDuringRestart: s.duringRestart,
		ByClass:                    make(map[string]int, len(o.Classes)),
		Checkpoints:                s.checkpoints,
		NodesHit:                   len(s.nodes),
		Events:                     s.log,
		Notes:                      notes,
	}
	for i, c := range o.Classes {
		r.ByClass[c.Name] = s.byClass[i]
	}
	if r.Interruptions > 0 {
		r.MTBF = r.Wall / time.Duration(r.Interruptions)
	}
	var perHour float64
	for _, c := range o.Classes {
		perHour += c.Rate * float64(o.GPUs)
	}
	if perHour > 0 {
		r.ExpectedMTBF = time.Duration(float64(time.Hour) / perHour)
	}
	mtbf := r.MTBF
	if mtbf == 0 {
		mtbf = r.ExpectedMTBF
	}
	r.YoungInterval = YoungInterval(s.stall, mtbf)
	r.ETTR = float64(r.Productive) / float64(r.Wall)
	gpuHours := func(d time.Duration) float64 { return float64(o.GPUs) * d.Hours() }
	r.Goodput = gpuHours(r.Productive) / gpuHours(r.Wall)
	r.LostGPUHours = LostGPUHours{
		Work:       gpuHours(r.LostWork),
		Restart:    gpuHours(r.Restart),
		Checkpoint: gpuHours(r.CheckpointStall),
	}
	r.LostGPUHours.Total = r.LostGPUHours.Work + r.LostGPUHours.Restart + r.LostGPUHours.Checkpoint
	return r
}
