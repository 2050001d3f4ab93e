package probe_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// jobSim plays a training job the way the reference workload exports it:
// one rank page scraped every second, 10 steps a second, a checkpoint
// every 20 steps, a step rate averaged over the last 5 s, and a
// supervisor's restart counter. A scenario says, per second after
// injection, whether the job is down (killed, waiting to restart) and how
// fast it steps. The truth it records is what the probe must find.
type jobSim struct {
	src                          *fakeSource
	step, ckpt, resumed, restart *series.Series
	rate                         *series.Series
	// truth
	lastBeforeKill, resumedFrom float64
	resumeAt                    time.Time
}

type simMode struct {
	down     bool    // the process is dead
	factor   float64 // share of the normal speed while up
	fallback int     // on a restart, checkpoints to skip (a corrupt newest)
}

func simulate(until time.Duration, mode func(sec int) simMode) *jobSim {
	ls := lbl("job", "train", "rank", "0", "instance", "127.0.0.1:9001")
	js := &jobSim{
		step: ser("gpuchaos_job_step_total", ls), rate: ser("gpuchaos_job_steps_per_second", ls),
		ckpt: ser("gpuchaos_job_last_checkpoint_step", ls), resumed: ser("gpuchaos_job_resumed_from_step", ls),
		restart: ser("gpuchaos_job_restarts_total", lbl("job", "train", "instance", "127.0.0.1:9000")),
	}
	var step, resumed, restarts float64
	var ckpts []float64
	var hist []float64 // step at each second of the current lineage
	wasDown := false
	for sec := -60; sec <= int(until/time.Second); sec++ {
		t := t0.Add(time.Duration(sec) * time.Second)
		m := mode(sec)
		if m.down {
			if !wasDown {
				js.lastBeforeKill = step
				for _, s := range []*series.Series{js.step, js.rate, js.ckpt, js.resumed} {
					s.Samples = append(s.Samples, smp(t, series.StaleNaN))
				}
			}
			wasDown = true
			js.restart.Samples = append(js.restart.Samples, smp(t, restarts))
			continue
		}
		if wasDown {
			wasDown = false
			restarts++
			i := len(ckpts) - 1 - m.fallback
			resumed = 0
			if i >= 0 {
				resumed = ckpts[i]
			}
			ckpts = ckpts[:max(i+1, 0)]
			step, hist = resumed, nil
			js.resumedFrom = resumed
		} else if sec > -60 {
			next := step + 10*m.factor
			for c := math.Floor(step/20)*20 + 20; c <= next; c += 20 {
				ckpts = append(ckpts, c)
			}
			if step == resumed && next > resumed && js.resumeAt.IsZero() && restarts > 0 {
				js.resumeAt = t
			}
			step = next
		}
		hist = append(hist, step)
		rate := 0.0
		if n := min(len(hist)-1, 5); n > 0 {
			rate = (hist[len(hist)-1] - hist[len(hist)-1-n]) / float64(n)
		}
		newest := 0.0
		if len(ckpts) > 0 {
			newest = ckpts[len(ckpts)-1]
		}
		js.step.Samples = append(js.step.Samples, smp(t, step))
		js.rate.Samples = append(js.rate.Samples, smp(t, rate))
		js.ckpt.Samples = append(js.ckpt.Samples, smp(t, newest))
		js.resumed.Samples = append(js.resumed.Samples, smp(t, resumed))
		js.restart.Samples = append(js.restart.Samples, smp(t, restarts))
	}
	js.src = &fakeSource{now: t0.Add(until), series: []*series.Series{js.step, js.rate, js.ckpt, js.resumed, js.restart}}
	return js
}

// kill is down for d seconds from injection, then up.
func kill(d, fallback int) func(int) simMode {
	return func(sec int) simMode {
		return simMode{down: sec >= 0 && sec < d, factor: 1, fallback: fallback}
	}
}

// slow runs at factor for d seconds from injection (0: a hang).
func slow(d int, factor float64) func(int) simMode {
	return func(sec int) simMode {
		if sec >= 0 && sec < d {
			return simMode{factor: factor}
		}
		return simMode{factor: 1}
	}
}

func observeWorkload(t *testing.T, js *jobSim, w v1alpha1.WorkloadProbe, a probe.Anchor) probe.Observation {
	t.Helper()
	p, err := probe.FromSpec("w", v1alpha1.ProbeSpec{Workload: &w}, js.src)
	if err != nil {
		t.Fatal(err)
	}
	ap, ok := p.(probe.Anchored)
	if !ok {
		t.Fatalf("a workload probe is not Anchored")
	}
	ap.SetAnchor(a)
	obs, err := p.Observe(context.Background())
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	return obs
}

func i64(v int64) *int64 { return &v }
func f64(v float64) *float64 {
	return &v
}
func intp(v int) *int { return &v }

func TestWorkloadChecks(t *testing.T) {
	anchor := func(recovered time.Duration, within time.Duration) probe.Anchor {
		a := probe.Anchor{Injected: t0, Within: within, Jobs: []string{"train"}}
		if recovered >= 0 {
			a.Recovered = t0.Add(recovered)
		}
		return a
	}
	tests := []struct {
		name  string
		sim   *jobSim
		check v1alpha1.WorkloadProbe
		a     probe.Anchor
		// want: holds, failed, the value (NaN: from the truth, see below)
		holds, failed bool
		value         float64
		at            time.Duration // -1: not checked
		detail        string
	}{
		{name: "resumed from the newest", sim: simulate(60*time.Second, kill(5, 0)),
			check: v1alpha1.WorkloadProbe{Check: "resumed"}, a: anchor(10*time.Second, time.Minute),
			// killed at step 590 (the newest checkpoint 580), back at 5s,
			// first step made at 6s
			holds: true, value: 580, at: 6 * time.Second, detail: "resumed from step 580, its newest checkpoint"},
		{name: "resumed from an older one fails", sim: simulate(60*time.Second, kill(5, 1)),
			check: v1alpha1.WorkloadProbe{Check: "resumed"}, a: anchor(10*time.Second, time.Minute),
			holds: true, failed: true, value: 560, at: 6 * time.Second, detail: "1 checkpoint(s) older than the newest (step 580; 0 allowed)"},
		{name: "one fallback allowed", sim: simulate(60*time.Second, kill(5, 1)),
			check: v1alpha1.WorkloadProbe{Check: "resumed", MaxFallback: intp(1)}, a: anchor(10*time.Second, time.Minute),
			holds: true, value: 560, at: 6 * time.Second},
		{name: "no restart yet", sim: simulate(4*time.Second, kill(5, 0)),
			check: v1alpha1.WorkloadProbe{Check: "resumed"}, a: anchor(-1, time.Minute), at: -1, detail: "no restart seen since injection"},
		{name: "lost work within the interval", sim: simulate(60*time.Second, slowThenKill()),
			check: v1alpha1.WorkloadProbe{Check: "lost-work"}, a: anchor(20*time.Second, time.Minute),
			// at 10 steps/s, killed at 12s at step 720 (checkpoint 720) plus the 5 steps/s seconds
			holds: true, value: math.NaN(), at: -1, detail: "bound 20, the checkpoint interval"},
		{name: "lost work of a fallback is over the interval", sim: simulate(60*time.Second, kill(5, 1)),
			check: v1alpha1.WorkloadProbe{Check: "lost-work"}, a: anchor(10*time.Second, time.Minute),
			holds: true, failed: true, value: 30, at: 6 * time.Second, detail: "lost 30 steps (at step 590 when last scraped, resumed from 560)"},
		{name: "lost work with an explicit bound", sim: simulate(60*time.Second, kill(5, 1)),
			check: v1alpha1.WorkloadProbe{Check: "lost-work", MaxLostSteps: i64(40)}, a: anchor(10*time.Second, time.Minute),
			holds: true, value: 30, at: 6 * time.Second, detail: "bound 40, maxLostSteps"},
		{name: "lost work bounded by the interval the job exports", sim: withInterval(simulate(60*time.Second, kill(5, 1)), 50),
			check: v1alpha1.WorkloadProbe{Check: "lost-work"}, a: anchor(10*time.Second, time.Minute),
			holds: true, value: 30, at: 6 * time.Second, detail: "bound 50, the checkpoint interval the job exports"},
		{name: "hang is stalled once the 5s rate reaches 0", sim: simulate(30*time.Second, slow(10, 0)),
			check: v1alpha1.WorkloadProbe{Check: "stalled"}, a: anchor(10*time.Second, time.Minute),
			// the 5s rate: 8 at 0s (no step since 590), 0 at 4s
			holds: true, value: 0, at: 4 * time.Second, detail: "no steps (baseline 10 steps/s)"},
		{name: "straggler is a slowdown", sim: simulate(30*time.Second, slow(20, 0.5)),
			check: v1alpha1.WorkloadProbe{Check: "slowdown", Tolerance: f64(0.2), For: v1alpha1.Duration{Duration: 3 * time.Second}}, a: anchor(20*time.Second, time.Minute),
			// the 5s rate: 9 at 0s, 8 at 1s (the first at or under 8), held 3s: 4s
			holds: true, value: 0.5, at: 4 * time.Second, detail: "50 % of the baseline 10"},
		{name: "no slowdown at full speed", sim: simulate(30*time.Second, slow(20, 1)),
			check: v1alpha1.WorkloadProbe{Check: "slowdown"}, a: anchor(20*time.Second, time.Minute), at: -1},
		{name: "rate back after a hang", sim: simulate(40*time.Second, slow(10, 0)),
			check: v1alpha1.WorkloadProbe{Check: "rate-recovered", For: v1alpha1.Duration{Duration: 3 * time.Second}}, a: anchor(10*time.Second, time.Minute),
			// steps resume at 10s (the exported 5s rate 2 then, the last
			// dip); the counter gains 10 a second over 10s..13s: back at 13s
			holds: true, value: 1, at: 13 * time.Second, detail: "back to 100 % of the baseline 10 steps/s over 3s, 3.0s after it last fell"},
		{name: "rate back after a restart that outlasts the fault", sim: simulate(40*time.Second, kill(5, 0)),
			// recovered at 2s (nothing to undo for a kill), back at 5s,
			// the first step at 6s: the counter's window starts there
			check: v1alpha1.WorkloadProbe{Check: "rate-recovered", For: v1alpha1.Duration{Duration: 3 * time.Second}}, a: anchor(2*time.Second, time.Minute),
			holds: true, value: 1, at: 9 * time.Second, detail: "back to 100 % of the baseline 10 steps/s over 3s"},
		{name: "rate not judged before recovery", sim: simulate(40*time.Second, slow(10, 0)),
			check: v1alpha1.WorkloadProbe{Check: "rate-recovered"}, a: anchor(-1, time.Minute), at: -1, detail: "not recovered yet"},
		{name: "rate still low", sim: simulate(40*time.Second, slow(40, 0.5)),
			check: v1alpha1.WorkloadProbe{Check: "rate-recovered"}, a: anchor(30*time.Second, time.Minute), at: -1, detail: "not back within 5 %"},
		{name: "goodput of a kill", sim: simulate(60*time.Second, kill(5, 0)),
			// 590 at injection, 580 resumed at 5s, 10 steps a second from
			// 6s: 1130 at 60s, 540 steps of the 600 the baseline makes
			check: v1alpha1.WorkloadProbe{Check: "goodput", Min: f64(0.85)}, a: anchor(10*time.Second, time.Minute),
			holds: true, value: 540.0 / 600, at: time.Minute, detail: "goodput 0.900 over 1m0s (step 590 → 1130"},
		{name: "goodput too low", sim: simulate(60*time.Second, kill(5, 1)),
			check: v1alpha1.WorkloadProbe{Check: "goodput", Min: f64(0.9)}, a: anchor(10*time.Second, time.Minute),
			// resumed from 560: 20 steps fewer
			holds: true, failed: true, value: 520.0 / 600, at: time.Minute},
		{name: "goodput of a healthy job that stalls to checkpoint", sim: simulate(60*time.Second, stalls),
			// one second in five without steps, before injection and
			// after: the counter baseline (8 steps/s) counts the stalls,
			// so nothing is lost; the median of the exported 5s rates
			// would have read 10 and a goodput of 0.8
			check: v1alpha1.WorkloadProbe{Check: "goodput", Min: f64(0.95)}, a: anchor(10*time.Second, time.Minute),
			holds: true, value: 1, at: time.Minute},
		{name: "goodput before the window ends", sim: simulate(30*time.Second, kill(5, 0)),
			check: v1alpha1.WorkloadProbe{Check: "goodput", Min: f64(0.9)}, a: anchor(10*time.Second, time.Minute), at: -1, detail: "window is not over"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := observeWorkload(t, tc.sim, tc.check, tc.a)
			if obs.Holds != tc.holds || obs.Failed != tc.failed {
				t.Fatalf("holds %t failed %t (%s), want %t %t", obs.Holds, obs.Failed, obs.Detail, tc.holds, tc.failed)
			}
			if tc.detail != "" && !strings.Contains(obs.Detail, tc.detail) {
				t.Errorf("detail %q, want it to contain %q", obs.Detail, tc.detail)
			}
			if !tc.holds {
				return
			}
			want := tc.value
			if math.IsNaN(want) {
				want = tc.sim.lastBeforeKill - tc.sim.resumedFrom
			}
			if math.Abs(obs.Value-want) > 1e-9 {
				t.Errorf("value %g, want %g (%s)", obs.Value, want, obs.Detail)
			}
			if tc.at >= 0 && !obs.At.Equal(t0.Add(tc.at)) {
				t.Errorf("at %s after injection, want %s", obs.At.Sub(t0), tc.at)
			}
			if len(obs.Subjects) != 1 || obs.Subjects[0].Job != "train" {
				t.Errorf("subjects %+v, want the job train", obs.Subjects)
			}
		})
	}
}

// withInterval adds the job's exported checkpoint interval.
func withInterval(js *jobSim, steps float64) *jobSim {
	s := ser("gpuchaos_job_checkpoint_interval_steps", js.step.Labels)
	for _, x := range js.step.Samples {
		s.Samples = append(s.Samples, smp(time.UnixMilli(x.T), steps))
	}
	js.src.series = append(js.src.series, s)
	return js
}

// stalls is a job that makes no steps one second in five, as a job that
// checkpoints synchronously every few seconds does.
func stalls(sec int) simMode {
	if (sec+100)%5 == 4 {
		return simMode{factor: 0}
	}
	return simMode{factor: 1}
}

// slowThenKill runs at half speed for 2s, then is killed for 5s: the kill
// falls between checkpoints, so some steps are lost.
func slowThenKill() func(int) simMode {
	return func(sec int) simMode {
		switch {
		case sec < 0:
			return simMode{factor: 1}
		case sec < 2:
			return simMode{factor: 0.5}
		case sec < 7:
			return simMode{down: true}
		}
		return simMode{factor: 1}
	}
}

func TestWorkloadCheckErrors(t *testing.T) {
	tests := []struct {
		name  string
		sim   *jobSim
		check v1alpha1.WorkloadProbe
		a     probe.Anchor
		want  string
	}{
		{"no job", simulate(10*time.Second, kill(2, 0)), v1alpha1.WorkloadProbe{Check: "resumed"},
			probe.Anchor{Injected: t0}, "the experiment touches no training job"},
		{"no baseline", simulate(10*time.Second, slow(5, 0)), v1alpha1.WorkloadProbe{Check: "stalled", Job: "other"},
			probe.Anchor{Injected: t0}, "no step counter 30s before injection"},
		{"interval unknown", simulate(10*time.Second, kill(2, 0)), v1alpha1.WorkloadProbe{Check: "lost-work"},
			probe.Anchor{Injected: t0, Jobs: []string{"train"}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == "" {
				// The simulated job started fresh: the first checkpoint's
				// step is its interval, so lost work can be judged.
				obs := observeWorkload(t, tc.sim, tc.check, tc.a)
				if !obs.Holds || !strings.Contains(obs.Detail, "bound 20, the checkpoint interval") {
					t.Errorf("observation %+v, want a judgment against the interval 20", obs)
				}
				return
			}
			p, err := probe.FromSpec("w", v1alpha1.ProbeSpec{Workload: &tc.check}, tc.sim.src)
			if err != nil {
				t.Fatal(err)
			}
			p.(probe.Anchored).SetAnchor(tc.a)
			_, err = p.Observe(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Observe error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestWorkloadBeforeInjection(t *testing.T) {
	js := simulate(10*time.Second, kill(2, 0))
	p, err := probe.FromSpec("w", v1alpha1.ProbeSpec{Workload: &v1alpha1.WorkloadProbe{Check: "resumed"}}, js.src)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := p.Observe(context.Background())
	if err != nil || obs.Holds {
		t.Errorf("unanchored observation %+v, %v; want nothing judged", obs, err)
	}
}
