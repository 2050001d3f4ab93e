package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
)

// Options configure an Engine. Zero values take the documented defaults.
type Options struct {
	Target target.Target
	// Ledger records injections before they act; nil takes the target's
	// (target.Settings), else keeps them in memory.
	Ledger ledger.Ledger
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
	// PollInterval is how often probes are observed; zero takes the
	// target's.
	PollInterval time.Duration
	// RecoveryWindow is how long after recovery the engine waits for every
	// detector that fired to clear, to measure time to recover; zero takes
	// the target's, negative skips the wait.
	RecoveryWindow time.Duration
	// Seed drives target selection (modes one, fixed, percent).
	Seed uint64
	// OnEvent, if set, is called for every timeline event as it happens
	// (for progress output). It must not block. With Concurrency above
	// one it is called from several goroutines, one call at a time.
	OnEvent func(Event)
	// Concurrency is how many injections (and recoveries) run at once;
	// zero takes the target's (target.Settings), and below two they run
	// one after another in plan order. A target whose injectors wait on
	// something remote (a node agent acknowledging) sets it, so that many
	// nodes are injected in about the time of one. Each injection is still
	// recorded in the ledger before its Inject is called.
	Concurrency int
}

// Engine runs experiments on one target. It is not safe for concurrent runs.
type Engine struct {
	opts Options
	log  *slog.Logger
	// mu guards a run's record while injections and recoveries run
	// concurrently (Options.Concurrency).
	mu sync.Mutex
}

// New returns an engine.
func New(opts Options) *Engine {
	var set target.Settings
	if opts.Target != nil {
		set = opts.Target.Settings()
	}
	if opts.Ledger == nil {
		opts.Ledger = set.Ledger
	}
	if opts.Ledger == nil {
		opts.Ledger = &ledger.Memory{}
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = set.PollInterval
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 15 * time.Second
	}
	if opts.RecoveryWindow == 0 {
		opts.RecoveryWindow = set.RecoveryWindow
	}
	if opts.RecoveryWindow == 0 {
		opts.RecoveryWindow = 10 * time.Minute
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = set.Concurrency
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Engine{opts: opts, log: log}
}

// Verdict outcomes.
const (
	Pass   = "pass"   // detected within the deadline
	Late   = "late"   // detected after the deadline, while the fault was injected
	Missed = "missed" // never detected while the fault was injected
	Error  = "error"  // could not be judged (probe failed, already firing)
	// Failed is a measurement made in time but outside its bound (a
	// workload check: more work lost than allowed, a goodput too low).
	Failed = "failed"
	// Interrupted: the run was stopped (Ctrl-C, SIGTERM) before the
	// expectation was met and before its deadline passed, so it was
	// neither detected nor missed.
	Interrupted = "interrupted"
)

// Injection is one planned injection.
type Injection struct {
	Key       string            `json:"key"`
	Fault     string            `json:"fault"`
	Mechanism string            `json:"mechanism"`
	Safety    catalog.Safety    `json:"safety"`
	Params    map[string]string `json:"params"`
	Ref       inventory.Ref     `json:"target"`

	fault  *catalog.Fault
	mech   *catalog.Mechanism
	values catalog.Values
}

// Plan is what a run would touch; a dry run prints it.
type Plan struct {
	Experiment string      `json:"experiment"`
	Target     string      `json:"target"`
	Injections []Injection `json:"injections"`
	Nodes      []string    `json:"nodes"`
	GPUs       int         `json:"gpus"`

	// inv is the inventory the plan was made from; observations are
	// matched against it.
	inv inventory.Inventory
}

// Event is one entry of a run's timeline.
type Event struct {
	Time time.Time `json:"time"`
	// Offset is seconds since injection (negative before it).
	Offset float64 `json:"offset_seconds"`
	Kind   string  `json:"kind"` // steady-state, inject, detect, abort, recover, clear, error
	Name   string  `json:"name,omitempty"`
	Detail string  `json:"detail,omitempty"`
}

// Verdict is the outcome of one expectation.
type Verdict struct {
	Name       string          `json:"name"`
	Detector   string          `json:"detector,omitempty"`
	Within     float64         `json:"within_seconds"`
	Verdict    string          `json:"verdict"`
	TTDSeconds *float64        `json:"ttd_seconds"`
	Subjects   []probe.Subject `json:"subjects,omitempty"`
	Detail     string          `json:"detail,omitempty"`
	// Value is what a measuring expectation (a workload check) measured:
	// steps lost, a rate ratio, a goodput.
	Value *float64 `json:"value,omitempty"`
	// ClearedSeconds is how long after recovery the detector stopped
	// holding; nil when it never fired or had not cleared in the window.
	ClearedSeconds *float64 `json:"cleared_seconds,omitempty"`
}

// Record is the evidence of one run, written as JSON.
type Record struct {
	Experiment  *v1alpha1.Experiment `json:"experiment"`
	Target      string               `json:"target"`
	Seed        uint64               `json:"seed"`
	Plan        *Plan                `json:"plan"`
	StartedAt   time.Time            `json:"started_at"`
	InjectedAt  time.Time            `json:"injected_at"`
	RecoveredAt time.Time            `json:"recovered_at"`
	EndedAt     time.Time            `json:"ended_at"`
	Aborted     string               `json:"aborted,omitempty"`
	Verdicts    []Verdict            `json:"verdicts"`
	// TTRSeconds is the time from recovery until every expectation that
	// fired had cleared; nil when some had not within the window.
	TTRSeconds *float64 `json:"ttr_seconds"`
	Timeline   []Event  `json:"timeline"`
	// Err is what stopped the run, kept as a value so callers can test it
	// (errors.Is(rec.Err, context.Canceled)); JSON carries its text as
	// "error".
	Err error `json:"-"`
}

// MarshalJSON writes the record with Err as its text, "error".
func (r *Record) MarshalJSON() ([]byte, error) {
	type plain Record
	var msg string
	if r.Err != nil {
		msg = r.Err.Error()
	}
	return json.Marshal(struct {
		*plain
		Error string `json:"error,omitempty"`
	}{(*plain)(r), msg})
}

// UnmarshalJSON reads a record written by MarshalJSON; Err comes back as
// an error with the same text.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record
	aux := struct {
		*plain
		Error string `json:"error,omitempty"`
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	if aux.Error != "" {
		r.Err = errors.New(aux.Error)
	}
	return nil
}

// Passed reports whether every expectation passed.
func (r *Record) Passed() bool {
	if r.Err != nil {
		return false
	}
	for _, v := range r.Verdicts {
		if v.Verdict != Pass {
			return false
		}
	}
	return true
}

// Plan resolves an experiment into the injections it would make, checking
// faults, mechanisms, safety and the blast radius. Nothing is touched.
func (e *Engine) Plan(ctx context.Context, exp *v1alpha1.Experiment) (*Plan, error) {
	inv, err := e.opts.Target.Inventory(ctx)
	if err != nil {
		return nil, fmt.Errorf("read inventory of %s: %w", e.opts.Target.Kind(), err)
	}
	plan := &Plan{Experiment: exp.ObjectMeta.Name, Target: string(e.opts.Target.Kind()), inv: inv}
	var all []inventory.Ref
	for i, fs := range exp.Spec.Faults {
		path := fmt.Sprintf("spec.faults[%d]", i)
		f, ok := catalog.Lookup(fs.ID)
		if !ok {
			return nil, fmt.Errorf("%s.id: %q is not in the catalogue", path, fs.ID)
		}
		m, err := e.mechanism(f, fs.Mechanism, exp.Spec.AllowHardwareRisk)
		if err != nil {
			return nil, fmt.Errorf("%s.mechanism: %w", path, err)
		}
		raw := map[string]string{}
		for k, v := range fs.Params {
			raw[k] = string(v)
		}
		vals, err := f.Resolve(raw)
		if err != nil {
			return nil, fmt.Errorf("%s.params.%w", path, err)
		}
		refs, err := inventory.Select(inv, exp.Spec.Selector, f.Scope, e.opts.Seed+uint64(i))
		if err != nil {
			return nil, err
		}
		all = append(all, refs...)
		for _, ref := range refs {
			plan.Injections = append(plan.Injections, Injection{
				Key:   fmt.Sprintf("%s/%d/%s", exp.ObjectMeta.Name, i, refKey(ref)),
				Fault: f.ID, Mechanism: m.Name, Safety: m.Safety, Params: formatValues(f, vals), Ref: ref,
				fault: f, mech: m, values: vals,
			})
		}
	}
	// A job or node ref stands for every GPU under it: count those.
	footprint := inventory.Footprint(inv, all)
	if err := inventory.CheckBlastRadius(footprint, exp.Spec.BlastRadius); err != nil {
		return nil, err
	}
	nodes := map[string]bool{}
	gpus := map[string]bool{}
	for _, r := range footprint {
		nodes[r.Node] = true
		if r.Kind == catalog.ScopeGPU || r.Kind == catalog.ScopeRank {
			gpus[r.Node+"/"+strconv.Itoa(r.GPU)] = true
		}
	}
	for n := range nodes {
		if n != "" {
			plan.Nodes = append(plan.Nodes, n)
		}
	}
	slices.Sort(plan.Nodes)
	plan.GPUs = len(gpus)
	for _, in := range plan.Injections {
		e.log.Debug("planned", "experiment", plan.Experiment, "fault", in.Fault, "mechanism", in.Mechanism, "target", refKey(in.Ref), "params", in.Params)
	}
	return plan, ctx.Err()
}

// mechanism chooses the mechanism of f for the engine's target by the
// catalogue's one rule (catalog.ChooseMechanism): a mechanism only planned
// there fails wrapping catalog.ErrPlanned, and a risky one is used only
// when allowed.
func (e *Engine) mechanism(f *catalog.Fault, name string, allowRisk bool) (*catalog.Mechanism, error) {
	return catalog.ChooseMechanism(f, name, e.opts.Target.Kind().Mechanisms(), allowRisk)
}

func refKey(r inventory.Ref) string { return r.Key() }

func formatValues(f *catalog.Fault, v catalog.Values) map[string]string {
	out := map[string]string{}
	for _, p := range f.Params {
		out[p.Name] = fmt.Sprint(v[p.Name])
	}
	return out
}

type expectation struct {
	spec     v1alpha1.Expectation
	name     string
	probe    probe.Probe
	verdict  Verdict
	detected bool
	cleared  bool
	// waiting is what an anchored probe last said it waits for, the
	// detail of a missed measurement.
	waiting string
}

// anchor tells an anchored probe where its run stands; other probes need
// nothing.
func (x *expectation) anchor(a probe.Anchor) {
	if p, ok := x.probe.(probe.Anchored); ok {
		a.Within = x.spec.Within.Duration
		p.SetAnchor(a)
	}
}

func (x *expectation) anchored() bool {
	_, ok := x.probe.(probe.Anchored)
	return ok
}

// Run executes the experiment and returns its record. The record is
// returned also on error, with Error set, whenever a run started; recovery
// has then been attempted for everything injected.
func (e *Engine) Run(ctx context.Context, exp *v1alpha1.Experiment) (*Record, error) {
	t := e.opts.Target
	rec := &Record{Experiment: exp, Target: string(t.Kind()), Seed: e.opts.Seed, StartedAt: t.Now()}
	plan, err := e.Plan(ctx, exp)
	if err != nil {
		return nil, err
	}
	rec.Plan = plan

	exps, err := e.expectations(exp)
	if err != nil {
		return nil, err
	}
	steady, err := e.checks("steady-state", exp.Spec.SteadyState)
	if err != nil {
		return nil, err
	}
	aborts, err := e.checks("abort", exp.Spec.AbortWhen)
	if err != nil {
		return nil, err
	}

	for _, c := range steady {
		obs, err := c.Observe(ctx)
		if err != nil {
			return e.fail(rec, fmt.Errorf("steady state %s: %w", c.Name(), err))
		}
		if !obs.Holds {
			return e.fail(rec, fmt.Errorf("steady state %s does not hold before injection; nothing was injected", c.Name()))
		}
		e.event(rec, "steady-state", c.Name(), "holds")
	}
	if err := e.warmUp(ctx, rec, exps); err != nil {
		return e.fail(rec, err)
	}
	// A detector already firing for the target cannot prove detection.
	// (An anchored probe judges the run itself, so there is nothing to
	// check before it.)
	for _, x := range exps {
		if x.anchored() {
			continue
		}
		obs, err := x.probe.Observe(ctx)
		if err == nil && obs.Holds && e.concerns(obs, plan) {
			x.verdict.Verdict = Error
			x.verdict.Detail = "already firing before injection: " + obs.Detail
			x.detected = true
		}
	}

	rec.InjectedAt = t.Now()
	anchor := probe.Anchor{Injected: rec.InjectedAt, Jobs: plan.jobs()}
	for _, x := range exps {
		x.anchor(anchor)
	}
	injected := e.inject(ctx, rec, plan)
	defer func() {
		if injected != nil {
			e.recover(ctx, rec, injected)
		}
	}()
	if rec.Err != nil {
		e.recover(ctx, rec, injected)
		injected = nil
		e.finish(rec, exps)
		return rec, rec.Err
	}

	end := rec.InjectedAt.Add(exp.Spec.Duration.Duration)
	err = e.observe(ctx, rec, plan, exps, aborts, end)
	if err != nil && ctx.Err() != nil {
		e.interrupted(exps, rec)
	}
	e.recover(ctx, rec, injected)
	injected = nil
	anchor.Recovered = rec.RecoveredAt
	for _, x := range exps {
		x.anchor(anchor)
	}
	if err == nil {
		err = e.watchClear(ctx, rec, plan, exps)
		if err != nil && ctx.Err() != nil {
			e.interrupted(exps, rec)
		}
	}
	if err != nil {
		rec.Err = err
		e.event(rec, "error", "", err.Error())
	}
	e.finish(rec, exps)
	if rec.Err != nil {
		return rec, rec.Err
	}
	return rec, nil
}

func (e *Engine) expectations(exp *v1alpha1.Experiment) ([]*expectation, error) {
	var out []*expectation
	for i, x := range exp.Spec.Expectations {
		name := x.Name
		if name == "" {
			name = x.Detector
		}
		if name == "" {
			name = fmt.Sprintf("expectation-%d", i)
		}
		spec := v1alpha1.ProbeSpec{Detector: x.Detector}
		if x.Probe != nil {
			spec = *x.Probe
		}
		p, err := e.opts.Target.Probe(name, spec)
		if err != nil {
			return nil, fmt.Errorf("spec.expectations[%d]: %w", i, err)
		}
		out = append(out, &expectation{spec: x, name: name, probe: p, verdict: Verdict{
			Name: name, Detector: spec.Detector, Within: x.Within.Seconds(), Verdict: Missed,
		}})
	}
	return out, nil
}

func (e *Engine) checks(kind string, cs []v1alpha1.Check) ([]probe.Probe, error) {
	var out []probe.Probe
	for i, c := range cs {
		p, err := e.opts.Target.Probe(c.Name, c.Probe)
		if err != nil {
			field := "steadyState"
			if kind == "abort" {
				field = "abortWhen"
			}
			return nil, fmt.Errorf("spec.%s[%d]: %w", field, i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// warmUp waits, on a target that records history only from its start,
// until it holds the history before injection that anchored probes need
// (their baseline). The twin has its whole past and needs no wait.
func (e *Engine) warmUp(ctx context.Context, rec *Record, exps []*expectation) error {
	h, ok := e.opts.Target.(interface{ HistorySince() time.Time })
	if !ok {
		return nil
	}
	var need time.Duration
	for _, x := range exps {
		if a, ok := x.probe.(probe.Anchored); ok {
			need = max(need, a.History())
		}
	}
	if need == 0 {
		return nil
	}
	// A second more than asked: the first scrape lands just after the
	// history begins, and the window must reach back past it.
	wait := h.HistorySince().Add(need + time.Second).Sub(e.opts.Target.Now())
	if wait <= 0 {
		return nil
	}
	e.event(rec, "warm-up", "", fmt.Sprintf("recording %s of the workload's metrics for its baseline before injecting", wait.Round(time.Second)))
	if err := e.opts.Target.Sleep(ctx, wait); err != nil {
		return fmt.Errorf("interrupted while recording the baseline: %w", err)
	}
	return nil
}

// inject records and injects every planned injection, stopping at the
// first failure: in plan order, or Options.Concurrency at a time, each
// recorded in the ledger just before its Inject. It returns what may have
// been applied, in plan order.
func (e *Engine) inject(ctx context.Context, rec *Record, plan *Plan) []Injection {
	recorded := make([]bool, len(plan.Injections))
	var failed bool
	e.forEach(len(plan.Injections), func(i int) bool {
		e.mu.Lock()
		stop := failed
		e.mu.Unlock()
		if stop {
			return false
		}
		err := e.injectOne(ctx, rec, plan, plan.Injections[i], func() {
			e.mu.Lock()
			recorded[i] = true
			e.mu.Unlock()
		})
		if err != nil {
			e.mu.Lock()
			if !failed {
				failed = true
				rec.Err = err
			}
			e.mu.Unlock()
			return false
		}
		return true
	})
	var done []Injection
	for i, in := range plan.Injections {
		if recorded[i] {
			done = append(done, in)
		}
	}
	return done
}

// injectOne records one injection (calling recorded once it is in the
// ledger, so it is recovered whatever happens next) and injects it.
func (e *Engine) injectOne(ctx context.Context, rec *Record, plan *Plan, in Injection, recorded func()) error {
	inj, err := e.opts.Target.Injector(in.fault, in.mech)
	if err != nil {
		return fmt.Errorf("inject %s on %s: %w", in.Fault, refKey(in.Ref), err)
	}
	entry := ledger.Entry{
		Key: in.Key, Run: plan.Experiment, Target: plan.Target, Fault: in.Fault, Mechanism: in.Mechanism,
		Params: in.Params, Ref: in.Ref, InjectedAt: e.opts.Target.Now(),
		Expires: e.opts.Target.Now().Add(rec.Experiment.Spec.Duration.Duration + e.opts.RecoveryWindow + time.Hour),
	}
	if err := e.opts.Ledger.Record(ctx, entry); err != nil {
		return fmt.Errorf("record %s before injecting: %w", in.Key, err)
	}
	recorded()
	// Whatever the injector starts that could outlive this process
	// ends by itself after the experiment's window.
	hold := fault.WithHoldUntil(ctx, e.opts.Target.Now().Add(rec.Experiment.Spec.Duration.Duration+max(e.opts.RecoveryWindow, 0)))
	if err := inj.Inject(hold, in.Key, in.Ref, in.values); err != nil {
		return fmt.Errorf("inject %s on %s: %w", in.Fault, refKey(in.Ref), err)
	}
	e.event(rec, "inject", in.Fault, refKey(in.Ref))
	return nil
}

// forEach calls fn for 0..n-1: in order, stopping when fn returns false,
// or with Options.Concurrency calls at once, starting no new call once one
// has returned false.
func (e *Engine) forEach(n int, fn func(i int) bool) {
	if e.opts.Concurrency < 2 {
		for i := range n {
			if !fn(i) {
				return
			}
		}
		return
	}
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, e.opts.Concurrency)
		mu   sync.Mutex
		stop bool
	)
	for i := range n {
		sem <- struct{}{}
		mu.Lock()
		s := stop
		mu.Unlock()
		if s {
			<-sem
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if !fn(i) {
				mu.Lock()
				stop = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// recover undoes injections in reverse order (Options.Concurrency at a
// time when set). It runs even when ctx is cancelled: an interrupt must
// not leave faults behind.
func (e *Engine) recover(ctx context.Context, rec *Record, done []Injection) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	e.forEach(len(done), func(j int) bool {
		e.recoverOne(rctx, rec, done[len(done)-1-j])
		return true
	})
	rec.RecoveredAt = e.opts.Target.Now()
}

func (e *Engine) recoverOne(rctx context.Context, rec *Record, in Injection) {
	inj, err := e.opts.Target.Injector(in.fault, in.mech)
	if err == nil {
		err = inj.Recover(rctx, in.Key)
	}
	what := ledger.Describe(in.Fault, in.Ref, in.Params)
	status := ledger.Outcome(err)
	if status == ledger.StillPending {
		err = fmt.Errorf("recover %s: %w (left in the ledger for the next start)", what, err)
		e.event(rec, "error", in.Fault, err.Error())
		e.mu.Lock()
		if rec.Err == nil {
			rec.Err = err
		}
		e.mu.Unlock()
		return
	}
	if err := e.opts.Ledger.Done(rctx, in.Key); err != nil {
		e.event(rec, "error", in.Fault, "mark recovered in ledger: "+err.Error())
	}
	if status == ledger.Gone {
		e.event(rec, "recover", in.Fault, refKey(in.Ref)+": target gone: "+err.Error())
		return
	}
	e.event(rec, "recover", in.Fault, refKey(in.Ref))
}

func (e *Engine) observe(ctx context.Context, rec *Record, plan *Plan, exps []*expectation, aborts []probe.Probe, end time.Time) error {
	t := e.opts.Target
	for {
		now := t.Now()
		for _, x := range exps {
			if err := e.judge(ctx, rec, plan, x, now); err != nil {
				return err
			}
		}
		for _, a := range aborts {
			obs, err := a.Observe(ctx)
			if err == nil && obs.Holds {
				rec.Aborted = fmt.Sprintf("%s holds: %s", a.Name(), obs.Detail)
				e.event(rec, "abort", a.Name(), obs.Detail)
				return nil
			}
		}
		if !now.Before(end) {
			return nil
		}
		step := min(e.opts.PollInterval, end.Sub(now))
		if err := t.Sleep(ctx, step); err != nil {
			return fmt.Errorf("interrupted while observing: %w", err)
		}
	}
}

// judge observes an expectation not yet decided and records its verdict
// when its probe holds for the plan's targets. It returns an error only
// when ctx is done.
func (e *Engine) judge(ctx context.Context, rec *Record, plan *Plan, x *expectation, now time.Time) error {
	if x.detected {
		return nil
	}
	obs, err := x.probe.Observe(ctx)
	e.log.Debug("observe", "expectation", x.name, "holds", obs.Holds, "detail", obs.Detail, "err", err)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		x.verdict.Verdict, x.verdict.Detail, x.detected = Error, err.Error(), true
		e.event(rec, "error", x.name, err.Error())
		return nil
	}
	if !obs.Holds || !e.concerns(obs, plan) {
		if x.anchored() {
			x.waiting = obs.Detail
		}
		return nil
	}
	at := now
	if !obs.At.IsZero() {
		at = obs.At
	}
	ttd := at.Sub(rec.InjectedAt).Seconds()
	x.detected = true
	x.verdict.TTDSeconds = &ttd
	x.verdict.Subjects = obs.Subjects
	x.verdict.Detail = obs.Detail
	x.verdict.Verdict = Pass
	switch {
	case obs.Failed:
		x.verdict.Verdict = Failed
	case ttd > x.spec.Within.Seconds():
		x.verdict.Verdict = Late
	}
	kind := "detect"
	if x.anchored() {
		v := obs.Value
		x.verdict.Value = &v
		kind = "measure"
	}
	e.event(rec, kind, x.name, obs.Detail)
	return nil
}

// watchClear polls after recovery until every detector that fired stops
// holding for the targets, or the recovery window closes; and until every
// anchored expectation is judged or its deadline has passed, whatever the
// recovery window, since those measure what happens after recovery.
func (e *Engine) watchClear(ctx context.Context, rec *Record, plan *Plan, exps []*expectation) error {
	t := e.opts.Target
	deadline := rec.RecoveredAt.Add(max(e.opts.RecoveryWindow, 0))
	for {
		pending, clearing := 0, 0
		for _, x := range exps {
			if !x.anchored() {
				continue
			}
			if err := e.judge(ctx, rec, plan, x, t.Now()); err != nil {
				return err
			}
			if !x.detected && t.Now().Before(rec.InjectedAt.Add(x.spec.Within.Duration)) {
				pending++
			}
		}
		for _, x := range exps {
			if e.opts.RecoveryWindow <= 0 || x.anchored() || x.verdict.TTDSeconds == nil || x.cleared {
				continue
			}
			obs, err := x.probe.Observe(ctx)
			if err != nil {
				return fmt.Errorf("observe %s after recovery: %w", x.name, err)
			}
			if obs.Holds && e.concerns(obs, plan) {
				clearing++
				continue
			}
			x.cleared = true
			s := t.Now().Sub(rec.RecoveredAt).Seconds()
			x.verdict.ClearedSeconds = &s
			e.event(rec, "clear", x.name, "")
		}
		if clearing == 0 && rec.TTRSeconds == nil && e.opts.RecoveryWindow > 0 {
			s := t.Now().Sub(rec.RecoveredAt).Seconds()
			rec.TTRSeconds = &s
		}
		stop := deadline
		if clearing == 0 {
			stop = t.Now()
		}
		for _, x := range exps {
			if x.anchored() && !x.detected {
				stop = later(stop, rec.InjectedAt.Add(x.spec.Within.Duration))
			}
		}
		if pending == 0 && clearing == 0 || !t.Now().Before(stop) {
			return nil
		}
		if err := t.Sleep(ctx, min(e.opts.PollInterval, stop.Sub(t.Now()))); err != nil {
			return fmt.Errorf("interrupted while verifying recovery: %w", err)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// interrupted gives every expectation still undecided whose deadline had
// not passed its verdict: the run stopped before it could be judged.
func (e *Engine) interrupted(exps []*expectation, rec *Record) {
	now := e.opts.Target.Now()
	for _, x := range exps {
		deadline := rec.InjectedAt.Add(x.spec.Within.Duration)
		if x.detected || !now.Before(deadline) {
			continue
		}
		x.detected = true
		x.verdict.Verdict = Interrupted
		x.verdict.Detail = fmt.Sprintf("interrupted %s after injection, before its %s deadline", now.Sub(rec.InjectedAt).Round(time.Second), x.spec.Within.Duration)
	}
}

func (e *Engine) finish(rec *Record, exps []*expectation) {
	for _, x := range exps {
		if !x.detected && x.waiting != "" {
			x.verdict.Detail = "not measured within the deadline: " + x.waiting
		}
		rec.Verdicts = append(rec.Verdicts, x.verdict)
	}
	rec.EndedAt = e.opts.Target.Now()
}

func (e *Engine) fail(rec *Record, err error) (*Record, error) {
	rec.Err = err
	e.event(rec, "error", "", err.Error())
	rec.EndedAt = e.opts.Target.Now()
	return rec, err
}

func (e *Engine) event(rec *Record, kind, name, detail string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.opts.Target.Now()
	ev := Event{Time: now, Kind: kind, Name: name, Detail: detail}
	if !rec.InjectedAt.IsZero() {
		ev.Offset = now.Sub(rec.InjectedAt).Seconds()
	}
	rec.Timeline = append(rec.Timeline, ev)
	// An error event is in the timeline the command prints: a warning
	// here, not an error the logger must show by default.
	level := slog.LevelInfo
	if kind == "error" {
		level = slog.LevelWarn
	}
	e.log.Log(context.Background(), level, kind, "experiment", rec.Experiment.ObjectMeta.Name, "name", name, "detail", detail, "offset_seconds", ev.Offset)
	if e.opts.OnEvent != nil {
		e.opts.OnEvent(ev)
	}
}

// jobs are the training jobs the plan touches: those it injects into and
// those with a rank on a GPU or node it injects into.
func (p *Plan) jobs() []string {
	seen := map[string]bool{}
	var out []string
	add := func(j string) {
		if j != "" && !seen[j] {
			seen[j] = true
			out = append(out, j)
		}
	}
	for _, in := range p.Injections {
		add(in.Ref.Job)
		if in.Ref.Job != "" {
			continue
		}
		for _, j := range p.inv.Jobs {
			if Matches(probe.Subject{Job: j.Name}, in.Ref, p.inv) {
				add(j.Name)
			}
		}
	}
	return out
}

// concerns reports whether an observation is about something the plan
// touched: the same GPU (by index, UUID or PCI address), the same node for a
// node-level observation, or a job with a rank on a touched GPU or node.
// Observations without any subject (an absent series) concern every plan.
func (e *Engine) concerns(obs probe.Observation, plan *Plan) bool {
	if len(obs.Subjects) == 0 {
		return true
	}
	for _, s := range obs.Subjects {
		if plan.Concerns(s) {
			return true
		}
	}
	return false
}

// Concerns reports whether a subject is about something the plan touches
// (see Matches).
func (p *Plan) Concerns(s probe.Subject) bool {
	for _, in := range p.Injections {
		if Matches(s, in.Ref, p.inv) {
			return true
		}
	}
	return false
}

// Matches reports whether an observation's subject is about the injected
// target r: the same GPU (by index, UUID or PCI address), the same node for
// a node-level subject, or a job with a rank on the GPU or node. A GPU
// subject without a node matches by UUID, or by index or bus id when the
// inventory has the one node. An empty subject matches everything: the
// observation could not say what it is about.
func Matches(s probe.Subject, r inventory.Ref, inv inventory.Inventory) bool {
	if s == (probe.Subject{}) {
		return true
	}
	if s.Job != "" && (s.GPU != "" || s.UUID != "" || s.PCI != "") && !knownJob(inv, s.Job) {
		// The job label of a series Prometheus scraped from an exporter
		// (the gpuchaos agent, dcgm-exporter) names the scrape job, not a
		// training job; the GPU it names still says what it is about.
		s.Job = ""
	}
	if s.Node != "" {
		if r.Kind == catalog.ScopeJob {
			return jobOn(inv, r.Job, s.Node, -1)
		}
		if s.Node != r.Node {
			return false
		}
		if s.GPU == "" && s.UUID == "" && s.PCI == "" || r.Kind == catalog.ScopeNode {
			return true
		}
		return sameGPU(s, r)
	}
	if s.Job == "" {
		// A GPU named without its node (a series without a Hostname
		// label, such as the agent's own event counters): a UUID is
		// unique anywhere; an index or bus id only on a one-node
		// inventory.
		switch {
		case s.UUID != "":
			return s.UUID == r.UUID
		case len(inv.Nodes) == 1 && inv.Nodes[0].Name == r.Node && r.Kind != catalog.ScopeJob:
			return r.Kind == catalog.ScopeNode || sameGPU(s, r)
		}
		return false
	}
	switch r.Kind {
	case catalog.ScopeJob, catalog.ScopeRank:
		return s.Job == r.Job
	case catalog.ScopeNode:
		return jobOn(inv, s.Job, r.Node, -1)
	default:
		return jobOn(inv, s.Job, r.Node, r.GPU)
	}
}

// sameGPU reports whether the subject names r's GPU by index, UUID or bus
// id.
func sameGPU(s probe.Subject, r inventory.Ref) bool {
	return s.GPU == strconv.Itoa(r.GPU) || s.UUID != "" && s.UUID == r.UUID || s.PCI != "" && samePCI(s.PCI, r.PCI)
}

// knownJob reports whether the inventory has a training job named job.
func knownJob(inv inventory.Inventory, job string) bool {
	for _, j := range inv.Jobs {
		if j.Name == job {
			return true
		}
	}
	return false
}

func jobOn(inv inventory.Inventory, job, node string, gpu int) bool {
	for _, j := range inv.Jobs {
		if j.Name != job {
			continue
		}
		for _, rk := range j.Ranks {
			if rk.Node == node && (gpu < 0 || rk.GPU == gpu) {
				return true
			}
		}
	}
	return false
}

// samePCI compares bus ids written as 00000000:18:00.0 (NVML, dcgm-exporter)
// or 0000:18:00 (kernel log) by their bus and device.
func samePCI(a, b string) bool { return busDev(a) == busDev(b) && busDev(a) != "" }

func busDev(p string) string {
	p = strings.ToLower(p)
	if i := strings.IndexByte(p, '.'); i >= 0 {
		p = p[:i]
	}
	parts := strings.Split(p, ":")
	if len(parts) < 2 {
		return ""
	}
	return parts[len(parts)-2] + ":" + parts[len(parts)-1]
}
