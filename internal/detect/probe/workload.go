package probe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// The series a training job exports (the reference workload, its
// supervisor and the twin use these names).
const (
	jobStepTotal      = "gpuchaos_job_step_total"
	jobStepRate       = "gpuchaos_job_steps_per_second"
	jobCheckpointStep = "gpuchaos_job_last_checkpoint_step"
	jobResumedFrom    = "gpuchaos_job_resumed_from_step"
	jobRestartsTotal  = "gpuchaos_job_restarts_total"
	jobCkptInterval   = "gpuchaos_job_checkpoint_interval_steps"
)

// Defaults of the workload checks' settings.
const (
	defaultTolerance     = 0.05
	defaultBaseline      = 30 * time.Second
	defaultRecoveredHold = 10 * time.Second
)

// errNotYet is a judgment that needs more history; notYet says which.
var errNotYet = errors.New("not yet")

func notYet(why string) error { return fmt.Errorf("%w: %s", errNotYet, why) }

// workloadProbe judges a job on its own series relative to its run. It
// keeps no state between observations beyond the anchor: every call reads
// the whole history again, so an observation missed costs nothing.
type workloadProbe struct {
	name string
	src  Source
	spec v1alpha1.WorkloadProbe

	mu sync.Mutex
	a  Anchor
}

func newWorkload(name string, spec v1alpha1.WorkloadProbe, src Source) *workloadProbe {
	return &workloadProbe{name: name, src: src, spec: spec}
}

func (p *workloadProbe) Name() string { return p.name }

func (p *workloadProbe) SetAnchor(a Anchor) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.a = a
	p.a.Jobs = slices.Clone(a.Jobs)
}

// History is the baseline window for the checks that compare with the
// rate before injection; resumed and lost-work read only what happens
// after it.
func (p *workloadProbe) History() time.Duration {
	switch p.spec.Check {
	case v1alpha1.WorkloadResumed, v1alpha1.WorkloadLostWork:
		return 0
	}
	if p.spec.Baseline.Duration > 0 {
		return p.spec.Baseline.Duration
	}
	return defaultBaseline
}

func (p *workloadProbe) anchor() Anchor {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.a
}

// Observe holds once every job has been judged; Failed says whether one
// of them is outside the check's bound.
func (p *workloadProbe) Observe(ctx context.Context) (Observation, error) {
	a := p.anchor()
	if a.Injected.IsZero() {
		return Observation{}, nil // before injection there is nothing to judge
	}
	jobs := a.Jobs
	if p.spec.Job != "" {
		jobs = []string{p.spec.Job}
	}
	if len(jobs) == 0 {
		return Observation{}, fmt.Errorf("workload check %s: the experiment touches no training job; name one in probe.workload.job", p.spec.Check)
	}
	obs := Observation{Holds: true}
	var details []string
	for _, job := range jobs {
		if err := ctx.Err(); err != nil {
			return Observation{}, err
		}
		j, err := p.judge(p.view(job), a)
		if errors.Is(err, errNotYet) {
			return Observation{Detail: job + ": " + strings.TrimPrefix(err.Error(), errNotYet.Error()+": ")}, nil
		}
		if err != nil {
			return Observation{}, fmt.Errorf("workload check %s of job %s: %w", p.spec.Check, job, err)
		}
		if len(jobs) == 1 || j.failed || !obs.Failed && j.at.After(obs.At) {
			obs.Value = j.value
		}
		obs.Failed = obs.Failed || j.failed
		if j.at.After(obs.At) {
			obs.At = j.at
		}
		obs.Subjects = append(obs.Subjects, Subject{Job: job})
		details = append(details, job+": "+j.detail)
	}
	obs.Detail = strings.Join(details, "; ")
	return obs, nil
}

// judgment is one job's measurement.
type judgment struct {
	at     time.Time
	value  float64
	failed bool
	detail string
}

// jobView is a job's series.
type jobView struct {
	job                                 string
	step, rate, ckpt, resumed, restarts []*series.Series
	interval                            []*series.Series
	resumedByKey                        map[string]*series.Series
}

// jobOf reads the job a series belongs to: the exported_job label where a
// Prometheus server renamed the exporter's own job label, else job.
func jobOf(ls series.Labels) string {
	if v := ls.Get("exported_job"); v != "" {
		return v
	}
	return ls.Get("job")
}

func (p *workloadProbe) view(job string) jobView {
	sel := func(metric string) []*series.Series {
		var out []*series.Series
		for _, s := range p.src.Select(metric) {
			if jobOf(s.Labels) == job {
				out = append(out, s)
			}
		}
		return out
	}
	v := jobView{job: job, step: sel(jobStepTotal), rate: sel(jobStepRate), ckpt: sel(jobCheckpointStep),
		resumed: sel(jobResumedFrom), restarts: sel(jobRestartsTotal), interval: sel(jobCkptInterval), resumedByKey: map[string]*series.Series{}}
	for _, s := range v.resumed {
		v.resumedByKey[s.LabelKey()] = s
	}
	return v
}

func (p *workloadProbe) judge(v jobView, a Anchor) (judgment, error) {
	now := p.src.Now()
	switch p.spec.Check {
	case v1alpha1.WorkloadResumed:
		return p.resumed(v, a)
	case v1alpha1.WorkloadLostWork:
		return p.lostWork(v, a)
	case v1alpha1.WorkloadSlowdown, v1alpha1.WorkloadStalled:
		return p.slowdown(v, a, now)
	case v1alpha1.WorkloadRateRecovered:
		return p.rateRecovered(v, a, now)
	case v1alpha1.WorkloadGoodput:
		return p.goodput(v, a, now)
	}
	return judgment{}, fmt.Errorf("unknown check %q", p.spec.Check)
}

// restart is what the job's series show of its first restart after t0.
type restart struct {
	// at is the first sign of it: the supervisor's counter grew, the step
	// went back, or the step resumed from changed.
	at int64
	// resumed is the first scrape of the new process that has made a step
	// (so it is training, not loading); from is the step it resumed from.
	resumed int64
	from    float64
	// before is the last step seen before the restart, and ckpts the
	// distinct checkpoint steps the job reported before it, ascending.
	before float64
	ckpts  []float64
	// sawNone says the history shows the job before its first checkpoint
	// (a checkpoint step of 0), so that step 0 starts the intervals.
	sawNone bool
	// interval is the job's own checkpoint interval in steps, 0 when it
	// does not export one.
	interval float64
}

// findRestart finds the job's first restart after t0 and the resumption
// that followed; errNotYet while either has not happened.
func findRestart(v jobView, t0 int64) (restart, error) {
	r := restart{at: math.MaxInt64}
	for _, s := range v.restarts {
		base, _ := lastBefore(s.Samples, t0+1)
		for _, x := range after(s.Samples, t0) {
			if !series.IsStale(x.V) && x.V > base {
				r.at = min(r.at, x.T)
				break
			}
		}
	}
	// A step going back, or a new resumed-from step, is a new process.
	for _, g := range []struct {
		series  []*series.Series
		changed func(x, prev float64) bool
	}{
		{v.step, func(x, prev float64) bool { return x < prev }},
		{v.resumed, func(x, prev float64) bool { return x != prev }},
	} {
		for _, s := range g.series {
			prev, ok := lastBefore(s.Samples, t0+1)
			for _, x := range after(s.Samples, t0) {
				if series.IsStale(x.V) {
					continue
				}
				if ok && g.changed(x.V, prev) {
					r.at = min(r.at, x.T)
					break
				}
				prev, ok = x.V, true
			}
		}
	}
	if r.at == math.MaxInt64 {
		return r, notYet("no restart seen since injection")
	}
	r.resumed = math.MaxInt64
	for _, s := range v.step {
		rs := v.resumedByKey[s.LabelKey()]
		if rs == nil {
			continue
		}
		for _, x := range after(s.Samples, r.at-1) {
			if series.IsStale(x.V) {
				continue
			}
			from, ok := lastBefore(rs.Samples, x.T+1)
			if ok && x.V > from {
				if x.T < r.resumed {
					r.resumed, r.from = x.T, from
				}
				break
			}
		}
	}
	if r.resumed == math.MaxInt64 {
		return r, notYet(fmt.Sprintf("restarted %.1fs after injection but has not made a step since", float64(r.at-t0)/1000))
	}
	seen := map[float64]bool{}
	for _, s := range v.ckpt {
		for _, x := range s.Samples {
			if x.T >= r.at {
				break
			}
			if !series.IsStale(x.V) && x.V == 0 {
				r.sawNone = true
			}
			if !series.IsStale(x.V) && x.V > 0 && !seen[x.V] {
				seen[x.V] = true
				r.ckpts = append(r.ckpts, x.V)
			}
		}
	}
	slices.Sort(r.ckpts)
	r.before = math.NaN()
	for _, s := range v.step {
		if x, ok := lastBefore(s.Samples, r.at); ok && (math.IsNaN(r.before) || x > r.before) {
			r.before = x
		}
	}
	for _, s := range v.interval {
		if x, ok := lastBefore(s.Samples, r.at); ok && x > 0 {
			r.interval = math.Max(r.interval, x)
		}
	}
	return r, nil
}

func (p *workloadProbe) resumed(v jobView, a Anchor) (judgment, error) {
	r, err := findRestart(v, a.Injected.UnixMilli())
	if err != nil {
		return judgment{}, err
	}
	allowed := 0
	if p.spec.MaxFallback != nil {
		allowed = *p.spec.MaxFallback
	}
	back := 0
	for _, c := range r.ckpts {
		if c > r.from {
			back++
		}
	}
	j := judgment{at: time.UnixMilli(r.resumed), value: r.from}
	took := time.UnixMilli(r.resumed).Sub(a.Injected).Seconds()
	switch {
	case len(r.ckpts) == 0:
		j.detail = fmt.Sprintf("resumed from step %.0f %.1fs after injection; it reported no checkpoint before the restart", r.from, took)
	case back == 0:
		j.detail = fmt.Sprintf("resumed from step %.0f, its newest checkpoint, %.1fs after injection", r.from, took)
	default:
		j.detail = fmt.Sprintf("resumed from step %.0f, %d checkpoint(s) older than the newest (step %.0f; %d allowed), %.1fs after injection",
			r.from, back, r.ckpts[len(r.ckpts)-1], allowed, took)
	}
	j.failed = back > allowed
	return j, nil
}

func (p *workloadProbe) lostWork(v jobView, a Anchor) (judgment, error) {
	r, err := findRestart(v, a.Injected.UnixMilli())
	if err != nil {
		return judgment{}, err
	}
	if math.IsNaN(r.before) {
		return judgment{}, errors.New("no step was reported before the restart")
	}
	lost := math.Max(r.before-r.from, 0)
	var bound float64
	var why string
	switch {
	case p.spec.MaxLostSteps != nil:
		bound, why = float64(*p.spec.MaxLostSteps), "maxLostSteps"
	case r.interval > 0:
		bound, why = r.interval, "the checkpoint interval the job exports"
	default:
		ckpts := r.ckpts
		if r.sawNone {
			ckpts = append([]float64{0}, ckpts...)
		}
		if len(ckpts) < 2 {
			return judgment{}, fmt.Errorf("cannot tell the checkpoint interval: the job exports no %s and reported %d checkpoint step(s) before the restart; set maxLostSteps",
				jobCkptInterval, len(r.ckpts))
		}
		for i := 1; i < len(ckpts); i++ {
			bound = math.Max(bound, ckpts[i]-ckpts[i-1])
		}
		why = "the checkpoint interval seen"
	}
	// The last step seen is the last scrape's: the job may have gone a few
	// steps further before it died, so the figure is a lower bound.
	return judgment{
		at: time.UnixMilli(r.resumed), value: lost, failed: lost > bound,
		detail: fmt.Sprintf("lost %.0f steps (at step %.0f when last scraped, resumed from %.0f); bound %.0f, %s", lost, r.before, r.from, bound, why),
	}, nil
}

// rates is a job's step rate over time: one point per scrape of any of its
// rate series, the slowest rank's rate (a synchronous job goes at its
// pace), and 0 where no rank has a fresh sample (the job is down).
type ratePoint struct {
	t int64
	v float64
}

func jobRates(v jobView, from, to int64) []ratePoint {
	var ts []int64
	gaps := []int64{}
	for _, s := range v.rate {
		var prev int64 = -1
		for _, x := range s.Samples {
			if x.T > from && x.T <= to {
				ts = append(ts, x.T)
			}
			if !series.IsStale(x.V) {
				if prev >= 0 {
					gaps = append(gaps, x.T-prev)
				}
				prev = x.T
			}
		}
	}
	slices.Sort(ts)
	ts = slices.Compact(ts)
	// A sample is fresh for a few scrape intervals; older, the rank has
	// stopped answering.
	fresh := int64(3000)
	if len(gaps) > 0 {
		slices.Sort(gaps)
		fresh = max(fresh, 3*gaps[len(gaps)/2])
	}
	out := make([]ratePoint, 0, len(ts))
	for _, t := range ts {
		rate := math.Inf(1)
		for _, s := range v.rate {
			i := sort.Search(len(s.Samples), func(i int) bool { return s.Samples[i].T > t })
			if i == 0 {
				continue
			}
			x := s.Samples[i-1]
			if series.IsStale(x.V) || x.T < t-fresh {
				continue
			}
			rate = math.Min(rate, x.V)
		}
		if math.IsInf(rate, 1) {
			rate = 0
		}
		out = append(out, ratePoint{t, rate})
	}
	return out
}

// baseline is the job's rate before injection: the steps its counter
// gained over the baseline window, over the time between the two scrapes.
// An average over the counter, not a median of the exported rates, so
// that it counts the checkpoint stalls the windows it is compared with
// also pay; a median would read a healthy job as slower than its normal.
func (p *workloadProbe) baseline(v jobView, t0 int64) (float64, error) {
	d := p.spec.Baseline.Duration
	if d <= 0 {
		d = defaultBaseline
	}
	// Strictly before injection: a scrape at that very instant may already
	// show the fault.
	s0, at0, ok0 := newestStep(v, t0-1)
	sb, atb, okb := newestStep(v, t0-1-d.Milliseconds())
	if !okb {
		// A history that starts inside the window (a target that began
		// recording just that long ago): its oldest scrape, if it spans
		// most of the window.
		sb, atb, okb = oldestStep(v, t0-1-d.Milliseconds())
		okb = okb && at0-atb >= d.Milliseconds()/2
	}
	if !ok0 || !okb || at0 <= atb {
		return 0, fmt.Errorf("no step counter %s before injection and at it to take a baseline from", d)
	}
	b := (s0 - sb) / (float64(at0-atb) / 1000)
	if b <= 0 {
		return 0, fmt.Errorf("the step counter did not grow in the %s before injection (%.0f → %.0f): no baseline to compare with", d, sb, s0)
	}
	return b, nil
}

func (p *workloadProbe) tolerance() float64 {
	if p.spec.Tolerance != nil {
		return *p.spec.Tolerance
	}
	return defaultTolerance
}

// slowdown finds the first time after injection the rate has been at or
// under the bound for the hold time: (1 - tolerance) × baseline, or 0 for
// stalled.
func (p *workloadProbe) slowdown(v jobView, a Anchor, now time.Time) (judgment, error) {
	t0 := a.Injected.UnixMilli()
	b, err := p.baseline(v, t0)
	if err != nil {
		return judgment{}, err
	}
	bound := (1 - p.tolerance()) * b
	if p.spec.Check == v1alpha1.WorkloadStalled {
		bound = 0
	}
	hold := p.spec.For.Milliseconds()
	since := int64(-1)
	for _, x := range jobRates(v, t0, now.UnixMilli()) {
		if x.v > bound {
			since = -1
			continue
		}
		if since < 0 {
			since = x.t
		}
		if x.t-since >= hold {
			what := fmt.Sprintf("%.3g steps/s, %.0f %% of the baseline %.3g", x.v, 100*x.v/b, b)
			if p.spec.Check == v1alpha1.WorkloadStalled {
				what = fmt.Sprintf("no steps (baseline %.3g steps/s)", b)
			}
			return judgment{at: time.UnixMilli(x.t), value: x.v / b,
				detail: fmt.Sprintf("%s %.1fs after injection", what, time.UnixMilli(x.t).Sub(a.Injected).Seconds())}, nil
		}
	}
	return judgment{}, notYet(fmt.Sprintf("the rate has not stayed at or under %.3g steps/s (baseline %.3g) for %s", bound, b, p.spec.For.Duration))
}

// rateRecovered judges, once the faults are recovered, when the rate came
// back: from the last time before recovery the exported rate was under
// the bound, the first time the counter's average over the hold time is
// within tolerance of the baseline. Searching from the last dip, not the
// first, keeps a short dip before the fault took hold from passing for a
// recovery; averaging over the hold time, not asking every sample, keeps
// a checkpoint stall inside it from hiding a recovery.
func (p *workloadProbe) rateRecovered(v jobView, a Anchor, now time.Time) (judgment, error) {
	if a.Recovered.IsZero() {
		return judgment{}, notYet("the faults are not recovered yet")
	}
	t0, tr := a.Injected.UnixMilli(), a.Recovered.UnixMilli()
	b, err := p.baseline(v, t0)
	if err != nil {
		return judgment{}, err
	}
	bound := (1 - p.tolerance()) * b
	hold := p.spec.For.Milliseconds()
	if p.spec.For.Duration == 0 {
		hold = defaultRecoveredHold.Milliseconds()
	}
	lastDip := int64(-1)
	for _, x := range jobRates(v, t0, now.UnixMilli()) {
		if x.t <= tr && x.v < bound {
			lastDip = x.t
		}
	}
	// A restart is a dip until the job trains again, whenever recovery
	// came; the counter's window must not span it.
	if r, err := findRestart(v, t0); err == nil {
		lastDip = max(lastDip, r.resumed)
	} else if !errors.Is(err, errNotYet) {
		return judgment{}, err
	}
	if lastDip < 0 {
		return judgment{at: a.Recovered, value: 1,
			detail: fmt.Sprintf("the rate never fell more than %.0f %% below the baseline %.3g steps/s", 100*p.tolerance(), b)}, nil
	}
	var ts []int64
	for _, s := range v.step {
		for _, x := range after(s.Samples, lastDip+hold-1) {
			if x.T <= now.UnixMilli() && !series.IsStale(x.V) {
				ts = append(ts, x.T)
			}
		}
	}
	slices.Sort(ts)
	last := math.NaN()
	for _, t := range slices.Compact(ts) {
		s1, at1, ok1 := newestStep(v, t)
		s0, at0, ok0 := newestStep(v, t-hold)
		if !ok0 || !ok1 || at0 < lastDip || at1 <= at0 {
			continue
		}
		r := (s1 - s0) / (float64(at1-at0) / 1000)
		last = r
		if r >= bound {
			return judgment{at: time.UnixMilli(t), value: r / b,
				detail: fmt.Sprintf("back to %.0f %% of the baseline %.3g steps/s over %s, %.1fs after it last fell below %.0f %% (%.1fs after injection)",
					100*r/b, b, time.Duration(hold)*time.Millisecond, float64(t-lastDip)/1000, 100*(1-p.tolerance()), time.UnixMilli(t).Sub(a.Injected).Seconds())}, nil
		}
	}
	return judgment{}, notYet(fmt.Sprintf("the rate is not back within %.0f %% of the baseline %.3g steps/s over %s (last %.3g)",
		100*p.tolerance(), b, time.Duration(hold)*time.Millisecond, last))
}

// goodput is the steps the job gained over the window [injection,
// injection + within] over what its baseline rate would have made: lost
// work, restarts, hangs and slowdowns all lower it.
func (p *workloadProbe) goodput(v jobView, a Anchor, now time.Time) (judgment, error) {
	end := a.Injected.Add(a.Within)
	if now.Before(end) || a.Within <= 0 {
		return judgment{}, notYet("the window is not over")
	}
	t0 := a.Injected.UnixMilli()
	b, err := p.baseline(v, t0)
	if err != nil {
		return judgment{}, err
	}
	s0, _, ok0 := newestStep(v, t0)
	s1, _, ok1 := newestStep(v, end.UnixMilli())
	if !ok0 || !ok1 {
		return judgment{}, fmt.Errorf("no step reported at injection or at the window's end (%t, %t)", ok0, ok1)
	}
	g := math.Max(s1-s0, 0) / (b * a.Within.Seconds())
	lowest := 0.0
	if p.spec.Min != nil {
		lowest = *p.spec.Min
	}
	return judgment{at: end, value: g, failed: g < lowest,
		detail: fmt.Sprintf("goodput %.3f over %s (step %.0f → %.0f, baseline %.3g steps/s; at least %.3g wanted)", g, a.Within, s0, s1, b, lowest)}, nil
}

// newestStep is the step of the newest scrape at or before t, and that
// scrape's time: after a restart that is the new lineage's, so work thrown
// away is not counted.
func newestStep(v jobView, t int64) (float64, int64, bool) {
	var bestT int64 = -1
	best := 0.0
	for _, s := range v.step {
		i := sort.Search(len(s.Samples), func(i int) bool { return s.Samples[i].T > t })
		for i > 0 && series.IsStale(s.Samples[i-1].V) {
			i--
		}
		if i == 0 {
			continue
		}
		x := s.Samples[i-1]
		if x.T > bestT || x.T == bestT && x.V > best {
			bestT, best = x.T, x.V
		}
	}
	return best, bestT, bestT >= 0
}

// oldestStep is the step of the oldest scrape after t, and its time.
func oldestStep(v jobView, t int64) (float64, int64, bool) {
	var bestT int64 = math.MaxInt64
	best := 0.0
	for _, s := range v.step {
		for _, x := range after(s.Samples, t) {
			if !series.IsStale(x.V) {
				if x.T < bestT {
					bestT, best = x.T, x.V
				}
				break
			}
		}
	}
	return best, bestT, bestT != math.MaxInt64
}

// lastBefore is the value of the newest non-stale sample before t.
func lastBefore(s []series.Sample, t int64) (float64, bool) {
	i := sort.Search(len(s), func(i int) bool { return s[i].T >= t })
	for i > 0 {
		i--
		if !series.IsStale(s[i].V) {
			return s[i].V, true
		}
	}
	return 0, false
}

// after returns the samples later than t.
func after(s []series.Sample, t int64) []series.Sample {
	return s[sort.Search(len(s), func(i int) bool { return s[i].T > t }):]
}
