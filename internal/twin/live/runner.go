package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
	"github.com/gpuchaos/gpuchaos/internal/node/exposition"
	"github.com/gpuchaos/gpuchaos/internal/node/tick"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// Defaults of Options.
const (
	// DefaultScrapeInterval is the twin's sampling interval in live mode:
	// every second has fresh values, whatever interval Prometheus scrapes at.
	DefaultScrapeInterval = time.Second
	// DefaultTick is how often Start advances the twin.
	DefaultTick = 100 * time.Millisecond
	// DefaultRetention is how much sample history the twin keeps.
	DefaultRetention = 15 * time.Minute
	// MaxSpeed is the fastest Options.Speed: an hour of virtual time per
	// wall second, already a day of the cluster in 24 s. Faster, a tick
	// would ask for more simulation than a tick can hold.
	MaxSpeed = 3600
)

// minCatchUp is the least wall time's worth of virtual time one tick may
// advance to catch up after missed ticks (and catchUpTicks ticks' worth, if
// more). A twin further behind gives the rest up instead: with the lock
// held for one tick's work only, it runs slower than asked rather than
// freezing in ever longer catch-ups.
const (
	minCatchUp   = time.Second
	catchUpTicks = 10
)

// maxCatchUpRounds bounds the rounds New takes to catch up the wall time
// its warm-up took.
const maxCatchUpRounds = 10

// trimFraction sets how often history is trimmed: every tenth of the
// retention in virtual time, so at most 10 % more than the retention is
// ever held and the copying is spread thin.
const trimFraction = 10

// Options configure New. Zero values take the documented defaults.
type Options struct {
	// Twin configures the twin. A zero ScrapeInterval means
	// DefaultScrapeInterval. Start, when set, is when the twin began: New
	// runs it from there to the wall clock's now instead of for Warmup
	// (which must then be zero), so the twin keeps the phase of its
	// scrapes and jobs from Start, as a coverage prediction's twin does
	// from its own (internal/harness/e2e). A zero Start means now minus Warmup.
	// Either way the twin's clock reads the wall clock when New returns
	// (at Speed 1): the wall time the warm-up took is caught up too.
	Twin twin.Options
	// Speed is virtual seconds per wall second, at most MaxSpeed; zero
	// means 1.
	Speed float64
	// Tick is how often Start advances the twin; zero means DefaultTick.
	Tick time.Duration
	// Warmup is virtual time New runs before returning, so baselines and
	// rates exist from the first scrape; at most twin.MaxWarmup. Zero
	// when Twin.Start is set, whose distance from now must respect the
	// same limit.
	Warmup time.Duration
	// Retention is how much sample history is kept; zero means
	// DefaultRetention, negative keeps everything. It is also the twin's
	// own retention (twin.Options.Retention) unless that is set, so the
	// warm-up keeps no more than the runner will.
	Retention time.Duration
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
}

// Runner owns a twin and advances it in real time. All its methods are
// safe for concurrent use; the twin itself is only ever touched with mu
// held.
type Runner struct {
	mu sync.Mutex
	tw *twin.Twin // guarded by mu
	// metrics lists the metric names in the order the twin created their
	// first series; the twin creates every series in New, so it is fixed.
	metrics []string
	// wall0 and virt0 anchor virtual to wall time: at wall time w the twin
	// should read virt0 + Speed × (w − wall0). Every tick moves the anchor
	// to itself, so the product stays a tick's worth and cannot overflow
	// however long the runner runs. Guarded by mu.
	wall0, virt0 time.Time
	// trimmed is the virtual time of the last trim. Guarded by mu.
	trimmed time.Time
	// slipped is the virtual time given up because the twin could not
	// keep up. Guarded by mu.
	slipped time.Duration

	speed     float64
	tick      time.Duration
	retention time.Duration
	log       *slog.Logger

	// handler serves /metrics and /healthz.
	handler http.Handler

	running atomic.Bool
	missed  atomic.Uint64
}

// New builds the twin, runs the warm-up and returns a runner whose clock
// starts now. ctx bounds the warm-up.
func New(ctx context.Context, opts Options) (*Runner, error) {
	switch {
	case opts.Speed < 0 || math.IsNaN(opts.Speed) || math.IsInf(opts.Speed, 0):
		return nil, fmt.Errorf("live twin: speed must be a positive number, got %v", opts.Speed)
	case opts.Speed > MaxSpeed:
		return nil, fmt.Errorf("live twin: speed must be at most %d, got %v", MaxSpeed, opts.Speed)
	case opts.Tick < 0:
		return nil, fmt.Errorf("live twin: tick must not be negative, got %s", opts.Tick)
	}
	if err := twin.CheckWarmup("warm-up", opts.Warmup); err != nil {
		return nil, fmt.Errorf("live twin: %w", err)
	}
	// The instant the twin's clock is to read once warm: now.
	wallAt := time.Now()
	to := opts.Twin
	warm := opts.Warmup
	switch {
	case to.Start.IsZero():
		to.Start = wallAt.Add(-warm).Truncate(time.Millisecond)
		warm = wallAt.Sub(to.Start)
	case warm != 0:
		return nil, fmt.Errorf("live twin: a start time (%s) and a warm-up (%s) both say how long to run before now; give one", to.Start.Format(time.RFC3339Nano), warm)
	case to.Start.After(wallAt):
		return nil, fmt.Errorf("live twin: start time %s is in the future", to.Start.Format(time.RFC3339Nano))
	default:
		warm = wallAt.Sub(to.Start)
		if err := twin.CheckWarmup("warm-up from the start time", warm); err != nil {
			return nil, fmt.Errorf("live twin: %w", err)
		}
	}
	r := &Runner{speed: opts.Speed, tick: opts.Tick, retention: opts.Retention, log: opts.Logger}
	if r.speed == 0 {
		r.speed = 1
	}
	if r.tick == 0 {
		r.tick = DefaultTick
	}
	if r.retention == 0 {
		r.retention = DefaultRetention
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if to.ScrapeInterval == 0 {
		to.ScrapeInterval = DefaultScrapeInterval
	}
	if to.Retention == 0 {
		to.Retention = r.retention
	}
	tw, err := twin.New(to)
	if err != nil {
		return nil, fmt.Errorf("live twin: %w", err)
	}
	if err := tw.Sleep(ctx, warm); err != nil {
		if opts.Warmup == 0 {
			return nil, fmt.Errorf("live twin: warm up from %s: %w", to.Start.Format(time.RFC3339Nano), err)
		}
		return nil, fmt.Errorf("live twin: warm up for %s: %w", opts.Warmup, err)
	}
	// The warm-up itself took wall time, which the twin would otherwise
	// lag by for ever (a second or two for an hour at 1 s scrapes): catch
	// it up to within a tick, each round at most what one tick may catch
	// up. A round that leaves the twin further behind means it simulates
	// slower than Speed asks, and ticks would slip it anyway: stop there.
	virtAt := tw.Now()
	limit := time.Duration(float64(max(catchUpTicks*r.tick, minCatchUp)) * r.speed)
	last := time.Duration(math.MaxInt64)
	for range maxCatchUpRounds {
		behind := time.Duration(float64(time.Since(wallAt))*r.speed) - tw.Now().Sub(virtAt)
		if behind < r.tick || behind >= last {
			break
		}
		last = behind
		if err := tw.Sleep(ctx, min(behind, limit)); err != nil {
			return nil, fmt.Errorf("live twin: catch up with the wall clock: %w", err)
		}
	}
	r.wall0, r.virt0 = time.Now(), tw.Now()
	r.trim(tw)
	seen := map[string]bool{}
	for _, s := range tw.Series() {
		if !seen[s.Metric] {
			seen[s.Metric] = true
			r.metrics = append(r.metrics, s.Metric)
		}
	}
	r.tw = tw
	r.handler = exposition.Handler(exposition.Options{Gather: r.gather, Healthy: r.Running, Logger: r.log})
	return r, nil
}

// Start advances the twin with the wall clock until ctx ends, then returns
// nil. Ticks are aligned to multiples of the tick interval; a tick missed
// because the previous one overran is counted (MissedTicks) and its time
// is caught up on the next, since the twin's clock is set from the wall
// clock rather than incremented. Start returns an error if the runner is
// already started.
func (r *Runner) Start(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("live twin: already started")
	}
	defer r.running.Store(false)
	r.log.Info("live twin started", "speed", r.speed, "tick", r.tick)

	err := tick.Run(ctx, r.tick, func(now time.Time) error { return r.advance(ctx, now) }, func(n uint64) {
		r.missed.Add(n)
		r.log.Debug("live twin missed ticks", "missed", n)
	})
	if err != nil && ctx.Err() == nil {
		return err
	}
	r.log.Info("live twin stopped", "missed_ticks", r.missed.Load())
	return nil
}

// advance moves the twin to where the wall clock says it should be, but by
// no more than the catch-up limit, and trims its history when due.
func (r *Runner) advance(ctx context.Context, wall time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	// In float64 until clamped: a long stall times a high speed would
	// overflow a Duration.
	behind := float64(r.virt0.Sub(r.tw.Now())) + float64(wall.Sub(r.wall0))*r.speed
	limit := float64(max(catchUpTicks*r.tick, minCatchUp)) * r.speed
	if behind > limit {
		r.slipped = min(r.slipped+saturate(behind-limit), saturate(math.Inf(1)))
		r.log.Debug("live twin slipped", "behind", saturate(behind), "slipped_total", r.slipped)
		behind = limit
	}
	// Ahead (the wall clock stepped back): wait, but no longer than the
	// same limit.
	behind = max(behind, -limit)
	d := time.Duration(behind)
	r.wall0, r.virt0 = wall, r.tw.Now().Add(d)
	if d <= 0 {
		return nil
	}
	if err := r.tw.Sleep(ctx, d); err != nil {
		return fmt.Errorf("live twin: advance %s: %w", d, err)
	}
	if r.tw.Now().Sub(r.trimmed) >= r.retention/trimFraction {
		r.trim(r.tw)
	}
	return nil
}

// trim drops history past the retention; the caller holds mu or owns tw.
func (r *Runner) trim(tw *twin.Twin) {
	if r.retention > 0 {
		tw.Trim(tw.Now().Add(-r.retention))
		r.trimmed = tw.Now()
	}
}

// saturate converts virtual nanoseconds to a Duration, capped at 2^62 ns
// (146 years) so that sums of two stay in range; a float64 past the int64
// range does not convert to anything defined.
func saturate(ns float64) time.Duration {
	return time.Duration(min(ns, 1<<62))
}

// MissedTicks returns how many ticks Start has missed because advancing
// the twin took longer than a tick.
func (r *Runner) MissedTicks() uint64 { return r.missed.Load() }

// Slipped returns the virtual time the twin has given up because it could
// not keep up with Speed: behind by more than the catch-up limit (ten ticks
// or a second of wall time, whichever is longer), it skips the rest rather
// than hold its lock for ever longer advances.
func (r *Runner) Slipped() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slipped
}

// Running reports whether Start is running.
func (r *Runner) Running() bool { return r.running.Load() }

// Apply plays effects on ref under key (twin.Twin.Apply), with the lock.
func (r *Runner) Apply(key string, ref inventory.Ref, effects []catalog.Effect) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tw.Apply(key, ref, effects)
}

// Revert undoes key (twin.Twin.Revert), with the lock.
func (r *Runner) Revert(key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tw.Revert(key)
}

// Inventory returns the twin's nodes, GPUs and jobs.
func (r *Runner) Inventory() inventory.Inventory {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tw.Inventory()
}

// Now returns the twin's virtual time.
func (r *Runner) Now() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tw.Now()
}

// WithTwin calls fn with the twin while holding the lock, so fn may read
// the twin (Series, Select, Logs, Active, Job) or act on it. Whatever fn
// keeps of the twin (the twin itself, series, samples) may be used only
// inside later WithTwin calls: outside the lock the twin is advancing and
// trimming. fn must not call the Runner's methods: the lock is not
// reentrant.
func (r *Runner) WithTwin(fn func(*twin.Twin)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r.tw)
}

// ServeHTTP serves /metrics (the exposition, through the exposition
// package's handler) and /healthz (200 while Start runs, 503 otherwise);
// other paths are not found.
func (r *Runner) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.handler.ServeHTTP(w, req)
}

// gather builds the page under the lock; promhttp writes it after the
// lock is released, so a slow client does not stall the twin.
func (r *Runner) gather() []*dto.MetricFamily {
	r.mu.Lock()
	defer r.mu.Unlock()
	return families(r.tw, r.metrics)
}

// families returns the newest non-stale sample of every series of each
// metric, grouped by metric with its help and type. A metric none of whose
// series has a value (every GPU off the bus) is left out entirely. No
// timestamps: the scraper stamps samples with its scrape time, as it does
// for dcgm-exporter, so a twin running faster or slower than the wall
// clock is still accepted.
func families(tw *twin.Twin, metrics []string) []*dto.MetricFamily {
	var b exposition.Builder
	var kv []string
	for _, m := range metrics {
		f := describe(m)
		b.Family(m, f.help, f.typ)
		for _, s := range tw.Select(m) {
			n := len(s.Samples)
			if n == 0 || series.IsStale(s.Samples[n-1].V) {
				continue
			}
			kv = kv[:0]
			for _, l := range s.Labels {
				kv = append(kv, l.Name, l.Value)
			}
			b.AddKV(s.Samples[n-1].V, kv...)
		}
	}
	return b.Families()
}
