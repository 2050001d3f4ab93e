package twin

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

func sameSeries(a, b []*series.Series) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Metric != b[i].Metric || !reflect.DeepEqual(a[i].Labels, b[i].Labels) || len(a[i].Samples) != len(b[i].Samples) {
			return false
		}
		for j, x := range a[i].Samples {
			y := b[i].Samples[j]
			if x.T != y.T || math.Float64bits(x.V) != math.Float64bits(y.V) {
				return false
			}
		}
	}
	return true
}

func TestDeterminism(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) *Twin {
		tw := newTwin(t, Options{Seed: seed, BackgroundFailures: true,
			Spec: func() ClusterSpec {
				s := Default()
				for k := range s.FailureRates {
					s.FailureRates[k] *= 20000 // several failures an hour
				}
				return s
			}()})
		sleep(t, tw, 20*time.Minute)
		apply(t, tw, "xid", gpuRef(tw, "gpu-node-1", 2), catalog.Effect{Kind: catalog.EffectXID, Code: 79})
		sleep(t, tw, 10*time.Minute)
		revert(t, tw, "xid")
		sleep(t, tw, 30*time.Minute)
		return tw
	}
	a, b := run(7), run(7)
	// Compare as JSON: staleness markers are NaN, which DeepEqual never
	// finds equal to itself.
	if !sameSeries(a.Series(), b.Series()) {
		t.Error("same seed: series differ")
	}
	if !reflect.DeepEqual(a.Logs(), b.Logs()) {
		t.Error("same seed: logs differ")
	}
	if len(a.Logs()) < 1 || a.bgCount < 2 {
		t.Errorf("expected the injected XID and background failures, got %d log lines, %d failures", len(a.Logs()), a.bgCount)
	}
	c := run(8)
	va, vc := []float64{}, []float64{}
	for i := range a.gpus {
		va = append(va, a.gpus[i].variability)
		vc = append(vc, c.gpus[i].variability)
	}
	if reflect.DeepEqual(va, vc) {
		t.Error("different seeds drew the same variability")
	}
	if a.gpus[0].uuid == c.gpus[0].uuid {
		t.Error("different seeds drew the same UUIDs")
	}
}

func TestSteadyState(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{})
	sleep(t, tw, 30*time.Minute)
	for _, s := range tw.Select("DCGM_FI_DEV_GPU_TEMP") {
		if v := last(s); v < 55 || v > 72 {
			t.Errorf("%s = %g °C, want 55–72 under training load at 25 °C", s.Labels, v)
		}
	}
	for _, s := range tw.Select("DCGM_FI_DEV_POWER_USAGE") {
		if v := last(s); v < 550 || v > 700 {
			t.Errorf("%s = %g W, want 550–700", s.Labels, v)
		}
	}
	for _, s := range tw.Select("DCGM_FI_DEV_SM_CLOCK") {
		if v := last(s); v != 1980 {
			t.Errorf("%s = %g MHz, want 1980 (no throttling)", s.Labels, v)
		}
	}
	st := status(t, tw)
	if st.BaselineStepSeconds < 1.0 || st.BaselineStepSeconds > 1.5 {
		t.Errorf("baseline step %g s, want 1.0–1.5", st.BaselineStepSeconds)
	}
	rate := stepRate(t, tw, 20*time.Minute)
	if want := 1 / st.BaselineStepSeconds; math.Abs(rate-want)/want > 0.02 {
		t.Errorf("step rate %g/s, want ≈ %g/s", rate, want)
	}
	if got := jobMetric(tw, "gpuchaos_job_steps_per_second"); math.Abs(got-rate)/rate > 0.05 {
		t.Errorf("gpuchaos_job_steps_per_second = %g, want ≈ %g", got, rate)
	}
	if st.Goodput < 0.98 || st.Goodput > 1.0 {
		t.Errorf("goodput %g, want 0.98–1.0 with async checkpoints", st.Goodput)
	}
	if n := len(tw.Logs()); n != 0 {
		t.Errorf("healthy cluster wrote %d kernel log lines", n)
	}
	// Idle GPUs: a cluster with no job settles near ambient.
	idle := Default()
	idle.Jobs = []JobSpec{}
	itw := newTwin(t, Options{Spec: idle})
	sleep(t, itw, 5*time.Minute)
	for _, s := range itw.Select("DCGM_FI_DEV_GPU_TEMP") {
		if v := last(s); v < 26 || v > 40 {
			t.Errorf("idle %s = %g °C, want 26–40", s.Labels, v)
		}
	}
}

func TestCooling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		factor   float64
		throttle bool
	}{
		{"mild: first-order rise below slowdown", 1.25, false},
		{"fan failure: crosses slowdown and throttles", 2.0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t, Options{Spec: oneNode()})
			sleep(t, tw, 5*time.Minute)
			g := tw.gpus[3]
			t0, rate0 := g.temp, stepRate(t, tw, 2*time.Minute)
			apply(t, tw, "cool", gpuRef(tw, "gpu-node-0", 3), catalog.Effect{Kind: catalog.EffectCooling, Factor: tc.factor})
			var temps []float64
			for range 600 {
				sleep(t, tw, time.Second)
				temps = append(temps, g.temp)
			}
			if tc.throttle {
				if max(temps[len(temps)-1], temps[len(temps)-2]) < g.model.SlowdownCelsius-1 {
					t.Fatalf("temperature %g never reached slowdown %g", temps[len(temps)-1], g.model.SlowdownCelsius)
				}
				if g.temp > g.model.SlowdownCelsius+2 {
					t.Errorf("controller let temperature run to %g, slowdown %g", g.temp, g.model.SlowdownCelsius)
				}
				clock := last(gpuSeries(tw, "DCGM_FI_DEV_SM_CLOCK", "gpu-node-0", 3))
				if clock >= g.model.MaxSMClockMHz*0.97 {
					t.Errorf("SM clock %g MHz, want throttled below %g", clock, g.model.MaxSMClockMHz)
				}
				if g.reasons&reasonSWThermal == 0 {
					t.Errorf("clock event reasons %#x lack thermal slowdown", g.reasons)
				}
				if rate := stepRate(t, tw, 2*time.Minute); rate > rate0*0.97 {
					t.Errorf("step rate %g, want below %g: the whole job waits for the hot rank", rate, rate0)
				}
				revert(t, tw, "cool")
				sleep(t, tw, 10*time.Minute)
				if g.temp > t0+1 {
					t.Errorf("after revert temperature %g, want back near %g", g.temp, t0)
				}
				if rate := stepRate(t, tw, 2*time.Minute); math.Abs(rate-rate0)/rate0 > 0.02 {
					t.Errorf("after revert step rate %g, want ≈ %g", rate, rate0)
				}
				return
			}
			for i := 1; i < len(temps); i++ {
				if temps[i] < temps[i-1] {
					t.Fatalf("temperature not monotone at %ds: %g < %g", i, temps[i], temps[i-1])
				}
				if i >= 2 && temps[i]-temps[i-1] > temps[i-1]-temps[i-2]+1e-9 {
					t.Fatalf("temperature not concave at %ds", i)
				}
			}
			final := temps[len(temps)-1] // after 600 s ≈ 6.7 τ: within 0.2 % of equilibrium
			target := t0 + 0.632*(final-t0)
			tau := 0
			for i, v := range temps {
				if v >= target {
					tau = i + 1
					break
				}
			}
			want := tw.spec.ThermalTimeConstant.Seconds()
			if math.Abs(float64(tau)-want) > 0.05*want {
				t.Errorf("63 %% of the rise after %ds, want ≈ τ = %gs", tau, want)
			}
			if final >= g.model.SlowdownCelsius {
				t.Fatalf("mild case reached slowdown (%g)", final)
			}
		})
	}
}

func TestXID79OffBus(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{})
	sleep(t, tw, 25*time.Minute)
	ckpt := status(t, tw).LastCheckpointStep
	ref := gpuRef(tw, "gpu-node-0", 3)
	temp := gpuSeries(tw, "DCGM_FI_DEV_GPU_TEMP", "gpu-node-0", 3)
	other := gpuSeries(tw, "DCGM_FI_DEV_GPU_TEMP", "gpu-node-0", 4)
	at := tw.Now()
	apply(t, tw, "xid79", ref, catalog.Effect{Kind: catalog.EffectXID, Code: 79})

	lines := tw.Logs()
	if len(lines) != 1 {
		t.Fatalf("want one kernel log line, got %v", lines)
	}
	l := lines[0]
	if want := "NVRM: Xid (PCI:0000:5d:00): 79, pid="; !strings.HasPrefix(l.Text, want) || l.Node != "gpu-node-0" || l.Priority != 3 {
		t.Errorf("log line %+v, want prefix %q on gpu-node-0 at priority 3 (err)", l, want)
	}
	if !strings.Contains(l.Text, "fallen off the bus") {
		t.Errorf("log line %q lacks the XID 79 text", l.Text)
	}
	n := len(temp.Samples)
	sleep(t, tw, 10*time.Minute) // past the restart cost
	// One staleness marker at the next scrape, as Prometheus writes when a
	// series vanishes from its target, then nothing.
	if got := temp.Samples[n:]; len(got) != 1 || !series.IsStale(got[0].V) {
		t.Errorf("GPU off the bus got samples %v after it vanished, want one staleness marker", got)
	}
	if other.Samples[len(other.Samples)-1].Time().Before(at.Add(9 * time.Minute)) {
		t.Error("the other GPUs stopped being scraped")
	}
	st := status(t, tw)
	if st.Running || st.State != "blocked" || jobMetric(tw, "gpuchaos_job_up") != 0 {
		t.Errorf("job %+v, want down and blocked while its GPU is gone", st)
	}
	if v := last(tw.Select("kube_node_status_allocatable")[0]); v != 7 {
		t.Errorf("allocatable GPUs on gpu-node-0 = %g, want 7", v)
	}
	err := tw.Apply("again", ref, []catalog.Effect{{Kind: catalog.EffectECC, Value: 1}})
	if !errors.Is(err, ErrTargetGone) {
		t.Errorf("Apply on an off-bus GPU: %v, want ErrTargetGone", err)
	}
	revert(t, tw, "xid79")
	sleep(t, tw, 5*time.Minute)
	st = status(t, tw)
	if !st.Running || st.Restarts != 1 || st.ResumedFromStep != ckpt {
		t.Errorf("after revert job %+v, want running, 1 restart, resumed from %d", st, ckpt)
	}
	perInterval := int64(tw.spec.Jobs[0].CheckpointInterval.Seconds()/st.BaselineStepSeconds) + 1
	if st.LostSteps <= 0 || st.LostSteps > perInterval {
		t.Errorf("lost %d steps, want 1..%d (one checkpoint interval)", st.LostSteps, perInterval)
	}
	if len(temp.Samples) == n {
		t.Error("GPU back after reset has no new samples")
	}
	if jobMetric(tw, "gpuchaos_job_resumed_from_step") != float64(ckpt) || jobMetric(tw, "gpuchaos_job_restarts_total") != 1 {
		t.Error("job series do not show the restart")
	}
}

func TestNVLinkDown(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{Spec: oneNode()})
	sleep(t, tw, time.Minute)
	compute := tw.spec.Jobs[0].StepCompute.Seconds()
	ar0 := status(t, tw).LastStepSeconds - compute
	apply(t, tw, "nvl", gpuRef(tw, "gpu-node-0", 0), catalog.Effect{Kind: catalog.EffectNVLink, Mode: "down", Code: 74})
	sleep(t, tw, 2*time.Minute)
	ar := status(t, tw).LastStepSeconds - compute
	if ratio := ar / ar0; math.Abs(ratio-1/0.09)/(1/0.09) > 0.02 {
		t.Errorf("all-reduce %gs → %gs (×%g), want ×%g", ar0, ar, ratio, 1/0.09)
	}
	if v := last(gpuSeries(tw, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "gpu-node-0", 0)); v != 0 {
		t.Errorf("NVLink bandwidth of the downed GPU = %g, want 0", v)
	}
	if len(tw.Logs()) != 1 || !strings.Contains(tw.Logs()[0].Text, "): 74, ") {
		t.Errorf("want one XID 74 line, got %v", tw.Logs())
	}
	revert(t, tw, "nvl")
	sleep(t, tw, time.Minute)
	if ar := status(t, tw).LastStepSeconds - compute; math.Abs(ar-ar0) > 1e-9 {
		t.Errorf("after revert all-reduce %gs, want %gs", ar, ar0)
	}
}

// The silent kind: a compute slowdown (NUMA misplacement, CPU starvation)
// slows the job and moves only utilisation and what follows from it.
func TestSilentCompute(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{})
	sleep(t, tw, 5*time.Minute)
	rate0 := stepRate(t, tw, 5*time.Minute)
	snap := func() map[string]float64 {
		m := map[string]float64{}
		for _, s := range tw.Series() {
			m[s.Metric+s.Labels.String()] = last(s)
		}
		return m
	}
	before := snap()
	apply(t, tw, "numa", rankRef(3), catalog.Effect{Kind: catalog.EffectCompute, Factor: 1.5})
	rate := stepRate(t, tw, 5*time.Minute)
	if rate > rate0*0.85 {
		t.Errorf("step rate %g → %g, want a clear drop", rate0, rate)
	}
	after := snap()
	// Utilisation falls on the slow rank's peers too (they wait); power,
	// temperature and energy follow the lower duty cycle. Nothing else may
	// move: no clock, memory, error counter or log line gives it away.
	follows := []string{"GPU_UTIL", "GR_ENGINE_ACTIVE", "PIPE_TENSOR_ACTIVE", "DRAM_ACTIVE", "MEM_COPY_UTIL",
		"PCIE_TX_BYTES", "PCIE_RX_BYTES", "NVLINK_BANDWIDTH", "POWER_USAGE", "GPU_TEMP", "MEMORY_TEMP", "TOTAL_ENERGY",
		"gpuchaos_",
		// kube-state-metrics' own list and watch counters grow with time.
		"kube_state_metrics_"}
	for k, v := range after {
		if !strings.HasPrefix(k, "DCGM_") && !strings.HasPrefix(k, "kube_") {
			continue
		}
		moved := v != before[k]
		allowed := false
		for _, f := range follows {
			allowed = allowed || strings.Contains(k, f)
		}
		if moved && !allowed {
			t.Errorf("%s moved %g → %g", k, before[k], v)
		}
	}
	util := gpuSeries(tw, "DCGM_FI_DEV_GPU_UTIL", "gpu-node-0", 3)
	if b, a := before[util.Metric+util.Labels.String()], last(util); a >= b {
		t.Errorf("GPU_UTIL of the slow rank %g → %g, want lower", b, a)
	}
	if len(tw.Logs()) != 0 {
		t.Errorf("silent fault wrote logs: %v", tw.Logs())
	}
}

func TestVRAMFillOOM(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{})
	sleep(t, tw, 5*time.Minute)
	fb := gpuSeries(tw, "DCGM_FI_DEV_FB_USED", "gpu-node-1", 5)
	used0 := last(fb)
	apply(t, tw, "vram", gpuRef(tw, "gpu-node-1", 5), catalog.Effect{Kind: catalog.EffectVRAM, Value: 0.5})
	sleep(t, tw, 30*time.Second)
	st := status(t, tw)
	if st.Running || !strings.Contains(st.LastCrash, "out of memory") {
		t.Errorf("job %+v, want crashed with out of memory", st)
	}
	if v := last(fb); v <= 0.5*143771-1 || v >= used0 {
		t.Errorf("FB_USED %g → %g: want the other tenant's half, without the dead job's working set", used0, v)
	}
	sleep(t, tw, 10*time.Minute)
	if st := status(t, tw); st.Restarts < 2 || st.Running && st.State == "running" && st.Step > st.ResumedFromStep {
		t.Errorf("job %+v: want repeated OOM crashes while the memory is held", st)
	}
	revert(t, tw, "vram")
	sleep(t, tw, 5*time.Minute)
	if st := status(t, tw); st.State != "running" || st.Step <= st.ResumedFromStep {
		t.Errorf("after revert job %+v, want training again", st)
	}
}

func TestHang(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ref     func(*Twin) inventory.Ref
		effect  catalog.Effect
		timeout time.Duration
	}{
		{"rank hang, PyTorch default watchdog", func(*Twin) inventory.Ref { return rankRef(9) },
			catalog.Effect{Kind: catalog.EffectRank, Mode: "hang"}, 10 * time.Minute},
		{"collective hang, 120s watchdog", func(*Twin) inventory.Ref { return jobRef() },
			catalog.Effect{Kind: catalog.EffectCollective, Mode: "hang", Value: 120}, 2 * time.Minute},
		{"network partition", func(*Twin) inventory.Ref { return nodeRef("gpu-node-1") },
			catalog.Effect{Kind: catalog.EffectNetwork, Mode: "partition"}, 10 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t, Options{})
			sleep(t, tw, 5*time.Minute)
			apply(t, tw, "hang", tc.ref(tw), tc.effect)
			step := status(t, tw).Step
			sleep(t, tw, tc.timeout-time.Second)
			st := status(t, tw)
			if st.Step != step || st.State != "hung" || !st.Running {
				t.Fatalf("before the watchdog: %+v, want hung at step %d, process up", st, step)
			}
			sleep(t, tw, 2*time.Second)
			if st := status(t, tw); st.State != "restarting" || !strings.Contains(st.LastCrash, "watchdog") {
				t.Fatalf("after the watchdog: %+v, want restarting after a watchdog timeout", st)
			}
			revert(t, tw, "hang")
			sleep(t, tw, 5*time.Minute)
			if st := status(t, tw); st.State != "running" || st.Restarts != 1 || st.Step <= st.ResumedFromStep {
				t.Errorf("after revert: %+v, want running after one restart", st)
			}
		})
	}
}

func TestOptInCounters(t *testing.T) {
	t.Parallel()
	optIn := OptInCounters()
	tests := []struct {
		name  string
		optIn []string
	}{
		{"default: off", nil},
		{"enabled", optIn},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := Default()
			spec.Exporter.OptIn = tc.optIn
			tw := newTwin(t, Options{Spec: spec})
			apply(t, tw, "ecc", gpuRef(tw, "gpu-node-0", 1), catalog.Effect{Kind: catalog.EffectECC, Value: 600})
			sleep(t, tw, 5*time.Minute)
			for _, m := range optIn {
				got := tw.Select(m)
				if tc.optIn == nil && len(got) != 0 {
					t.Errorf("%s exported though not opted in", m)
				}
				if tc.optIn != nil && len(got) != 16 {
					t.Errorf("%s: %d series, want 16", m, len(got))
				}
			}
			if tc.optIn != nil {
				if v := last(gpuSeries(tw, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "gpu-node-0", 1)); v < 2900 || v > 3000 {
					t.Errorf("SBE volatile count %g after 5 min at 600/min, want ≈ 3000", v)
				}
			}
			if len(tw.Logs()) != 1 || !strings.Contains(tw.Logs()[0].Text, "): 92, ") {
				t.Errorf("want one XID 92 line for a high SBE rate, got %v", tw.Logs())
			}
		})
	}
}

// TestEffects plays every effect kind of the catalogue and checks what it
// should change.
func TestEffects(t *testing.T) {
	t.Parallel()
	type check func(t *testing.T, tw *Twin, before JobStatus)
	crashed := func(t *testing.T, tw *Twin, before JobStatus) {
		if st := status(t, tw); st.Restarts != before.Restarts+1 {
			t.Errorf("job %+v, want one restart", st)
		}
	}
	slower := func(t *testing.T, tw *Twin, before JobStatus) {
		if st := status(t, tw); st.LastStepSeconds < before.LastStepSeconds*1.05 {
			t.Errorf("step %gs → %gs, want slower", before.LastStepSeconds, st.LastStepSeconds)
		}
	}
	g0 := func(tw *Twin) inventory.Ref { return gpuRef(tw, "gpu-node-0", 0) }
	tests := []struct {
		name   string
		spec   func() ClusterSpec
		ref    func(*Twin) inventory.Ref
		effect catalog.Effect
		wait   time.Duration
		check  check
	}{
		{"xid 13 restarts the app", nil, g0, catalog.Effect{Kind: catalog.EffectXID, Code: 13}, 5 * time.Minute, crashed},
		{"xid 48 needs a reset: job blocked", nil, g0, catalog.Effect{Kind: catalog.EffectXID, Code: 48}, 5 * time.Minute,
			func(t *testing.T, tw *Twin, _ JobStatus) {
				if st := status(t, tw); st.State != "blocked" {
					t.Errorf("state %s, want blocked", st.State)
				}
			}},
		{"xid 63 changes nothing but the log", nil, g0, catalog.Effect{Kind: catalog.EffectXID, Code: 63}, 5 * time.Minute,
			func(t *testing.T, tw *Twin, before JobStatus) {
				if st := status(t, tw); st.Restarts != 0 || len(tw.Logs()) != 1 {
					t.Errorf("job %+v, logs %v", st, tw.Logs())
				}
				if v := last(gpuSeries(tw, "DCGM_FI_DEV_XID_ERRORS", "gpu-node-0", 0)); v != 63 {
					t.Errorf("XID_ERRORS = %g, want 63", v)
				}
			}},
		{"off-bus", nil, g0, catalog.Effect{Kind: catalog.EffectOffBus}, 5 * time.Minute,
			func(t *testing.T, tw *Twin, _ JobStatus) {
				if !strings.Contains(tw.Logs()[0].Text, "): 79, ") || status(t, tw).State != "blocked" {
					t.Errorf("logs %v, job %+v", tw.Logs(), status(t, tw))
				}
			}},
		{"ecc double-bit error", nil, g0, catalog.Effect{Kind: catalog.EffectECC, Code: 2}, 5 * time.Minute,
			func(t *testing.T, tw *Twin, before JobStatus) {
				crashed(t, tw, before)
				if tw.gpus[0].dbeVol != 2 || !strings.Contains(tw.Logs()[0].Text, "): 48, ") {
					t.Errorf("DBE %g, logs %v", tw.gpus[0].dbeVol, tw.Logs())
				}
			}},
		{"row remap pending", nil, g0, catalog.Effect{Kind: catalog.EffectRowRemap, Mode: "pending"}, time.Minute,
			func(t *testing.T, tw *Twin, _ JobStatus) {
				if v := last(gpuSeries(tw, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "gpu-node-0", 0)); v != 1 {
					t.Errorf("correctable remapped rows %g, want 1", v)
				}
			}},
		{"row remap failure", nil, g0, catalog.Effect{Kind: catalog.EffectRowRemap, Mode: "failure"}, 5 * time.Minute,
			func(t *testing.T, tw *Twin, before JobStatus) {
				crashed(t, tw, before)
				if v := last(gpuSeries(tw, "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gpu-node-0", 0)); v != 1 {
					t.Errorf("ROW_REMAP_FAILURE %g, want 1", v)
				}
			}},
		{"power cap", func() ClusterSpec {
			s := Default()
			s.Exporter.OptIn = []string{"DCGM_FI_DEV_POWER_VIOLATION"}
			return s
		}, g0, catalog.Effect{Kind: catalog.EffectPowerCap, Factor: 0.5}, 2 * time.Minute,
			func(t *testing.T, tw *Twin, before JobStatus) {
				slower(t, tw, before)
				if p := last(gpuSeries(tw, "DCGM_FI_DEV_POWER_USAGE", "gpu-node-0", 0)); p > 351 {
					t.Errorf("power %g W over the 350 W cap", p)
				}
				if v := last(gpuSeries(tw, "DCGM_FI_DEV_POWER_VIOLATION", "gpu-node-0", 0)); v <= 0 {
					t.Errorf("POWER_VIOLATION %g, want growing", v)
				}
			}},
		{"nvlink crc errors", func() ClusterSpec {
			s := Default()
			s.Exporter.OptIn = []string{"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"}
			return s
		}, g0, catalog.Effect{Kind: catalog.EffectNVLink, Mode: "errors", Value: 60}, 2 * time.Minute,
			func(t *testing.T, tw *Twin, _ JobStatus) {
				if v := last(gpuSeries(tw, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "gpu-node-0", 0)); v < 110 || v > 120 {
					t.Errorf("CRC count %g, want ≈ 120", v)
				}
			}},
		{"sm load from a co-tenant", nil, g0, catalog.Effect{Kind: catalog.EffectSMLoad, Value: 0.5}, 2 * time.Minute,
			func(t *testing.T, tw *Twin, before JobStatus) {
				slower(t, tw, before)
				if v := last(gpuSeries(tw, "DCGM_FI_DEV_GPU_UTIL", "gpu-node-0", 0)); v != 100 {
					t.Errorf("GPU_UTIL %g, want 100", v)
				}
			}},
		{"pcie copy storm", nil, g0, catalog.Effect{Kind: catalog.EffectPCIe, Value: 20e9, Factor: 1.2}, 2 * time.Minute,
			func(t *testing.T, tw *Twin, before JobStatus) {
				slower(t, tw, before)
				if v := last(gpuSeries(tw, "DCGM_FI_PROF_PCIE_RX_BYTES", "gpu-node-0", 0)); v < 20e9 {
					t.Errorf("PCIe RX %g B/s, want ≥ 20e9", v)
				}
			}},
		{"collective bandwidth cut", nil, func(*Twin) inventory.Ref { return jobRef() },
			catalog.Effect{Kind: catalog.EffectCollective, Mode: "inter", Factor: 0.25}, 2 * time.Minute, slower},
		{"network delay and rate limit", nil, func(*Twin) inventory.Ref { return nodeRef("gpu-node-1") },
			catalog.Effect{Kind: catalog.EffectNetwork, Value: 0.005, Factor: 0.5}, 2 * time.Minute, slower},
		{"checkpoint volume full", nil, func(*Twin) inventory.Ref { return jobRef() },
			catalog.Effect{Kind: catalog.EffectCheckpoint, Mode: "fill"}, 25 * time.Minute,
			func(t *testing.T, tw *Twin, before JobStatus) {
				st := status(t, tw)
				if st.CheckpointFailures < 2 || st.LastCheckpointStep != before.LastCheckpointStep {
					t.Errorf("job %+v, want failed checkpoints and none new", st)
				}
				if jobMetric(tw, "gpuchaos_job_checkpoint_failures_total") < 2 {
					t.Error("checkpoint failures not exported")
				}
			}},
		{"checkpoint writer killed", nil, func(*Twin) inventory.Ref { return jobRef() },
			catalog.Effect{Kind: catalog.EffectCheckpoint, Mode: "kill-writer"}, 12 * time.Minute,
			func(t *testing.T, tw *Twin, before JobStatus) {
				st := status(t, tw)
				if st.Restarts != 1 || st.LastCrash != "checkpoint writer killed" || st.ResumedFromStep != before.LastCheckpointStep {
					t.Errorf("job %+v, want one restart from the previous checkpoint %d", st, before.LastCheckpointStep)
				}
			}},
		{"newest checkpoint corrupt, then a crash", nil, func(*Twin) inventory.Ref { return jobRef() },
			catalog.Effect{Kind: catalog.EffectCheckpoint, Mode: "corrupt"}, time.Minute,
			func(t *testing.T, tw *Twin, before JobStatus) {
				j := tw.byJob[demoJob]
				prev := j.ckpts[len(j.ckpts)-2].step
				apply(t, tw, "kill", rankRef(0), catalog.Effect{Kind: catalog.EffectRank, Mode: "kill"})
				sleep(t, tw, 4*time.Minute)
				if st := status(t, tw); st.ResumedFromStep != prev {
					t.Errorf("resumed from %d, want the one before the corrupt checkpoint, %d", st.ResumedFromStep, prev)
				}
			}},
		{"sync checkpoint on partitioned storage stalls the job", func() ClusterSpec {
			s := Default()
			s.Jobs[0].CheckpointMode = CheckpointSync
			return s
		}, func(*Twin) inventory.Ref { return jobRef() },
			catalog.Effect{Kind: catalog.EffectCheckpoint, Mode: "partition"}, 12 * time.Minute,
			func(t *testing.T, tw *Twin, _ JobStatus) {
				st := status(t, tw)
				sleep(t, tw, time.Minute)
				if st2 := status(t, tw); st2.Step != st.Step || st2.State != "checkpointing" {
					t.Errorf("job %+v, want stalled in a checkpoint", st2)
				}
				revert(t, tw, "e")
				sleep(t, tw, time.Minute)
				if st3 := status(t, tw); st3.Step <= st.Step {
					t.Errorf("job %+v, want stepping after the storage returns", st3)
				}
			}},
		{"slow checkpoint storage, sync", func() ClusterSpec {
			s := Default()
			s.Jobs[0].CheckpointMode = CheckpointSync
			return s
		}, func(*Twin) inventory.Ref { return jobRef() },
			catalog.Effect{Kind: catalog.EffectCheckpoint, Mode: "slow", Factor: 0.1}, 20 * time.Minute,
			func(t *testing.T, tw *Twin, before JobStatus) {
				if g := status(t, tw).Goodput; g > before.Goodput-0.01 {
					t.Errorf("goodput %g, want below %g: a 50 s stall per checkpoint", g, before.Goodput)
				}
			}},
		{"rank kill", nil, func(*Twin) inventory.Ref { return rankRef(12) },
			catalog.Effect{Kind: catalog.EffectRank, Mode: "kill"}, 5 * time.Minute, crashed},
		{"cordon", nil, func(*Twin) inventory.Ref { return nodeRef("gpu-node-1") },
			catalog.Effect{Kind: catalog.EffectNode, Mode: "cordon"}, time.Minute,
			func(t *testing.T, tw *Twin, _ JobStatus) {
				if v := last(tw.Select("kube_node_spec_unschedulable")[1]); v != 1 || status(t, tw).Restarts != 0 {
					t.Errorf("unschedulable %g, job %+v", v, status(t, tw))
				}
			}},
		{"drain", nil, func(*Twin) inventory.Ref { return nodeRef("gpu-node-1") },
			catalog.Effect{Kind: catalog.EffectNode, Mode: "drain"}, 5 * time.Minute,
			func(t *testing.T, tw *Twin, _ JobStatus) {
				if st := status(t, tw); st.State != "blocked" {
					t.Errorf("job %+v, want blocked on the drained node", st)
				}
			}},
		{"device plugin killed", nil, func(*Twin) inventory.Ref { return nodeRef("gpu-node-1") },
			catalog.Effect{Kind: catalog.EffectNode, Mode: "device-plugin-kill"}, time.Minute,
			func(t *testing.T, tw *Twin, _ JobStatus) {
				if v := last(nodeGPUAllocatable(t, tw, "gpu-node-1")); v != 0 || status(t, tw).State != "running" {
					t.Errorf("allocatable %g, job %+v: want 0, running job untouched", v, status(t, tw))
				}
			}},
		{"pod kill", nil, func(*Twin) inventory.Ref { return nodeRef("gpu-node-0") },
			catalog.Effect{Kind: catalog.EffectNode, Mode: "pod-kill"}, 5 * time.Minute, crashed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := Default()
			if tc.spec != nil {
				spec = tc.spec()
			}
			tw := newTwin(t, Options{Spec: spec})
			sleep(t, tw, 15*time.Minute)
			before := status(t, tw)
			apply(t, tw, "e", tc.ref(tw), tc.effect)
			sleep(t, tw, tc.wait)
			tc.check(t, tw, before)
			revert(t, tw, "e")
			revert(t, tw, "kill")
			sleep(t, tw, 10*time.Minute)
			if st := status(t, tw); st.State != "running" && st.State != "checkpointing" {
				t.Errorf("10 min after revert the job is %s, want running", st.State)
			}
		})
	}
}

func TestApplyRevertContract(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{})
	sleep(t, tw, 12*time.Minute)
	dbe := catalog.Effect{Kind: catalog.EffectECC, Code: 1}
	ref := gpuRef(tw, "gpu-node-1", 0)
	apply(t, tw, "k", ref, dbe)
	apply(t, tw, "k", ref, dbe)
	if got := tw.gpus[8].dbeVol; got != 1 || len(tw.Logs()) != 1 {
		t.Errorf("applied twice: DBE %g, %d log lines; want the effect once", got, len(tw.Logs()))
	}
	revert(t, tw, "k")
	revert(t, tw, "k")
	revert(t, tw, "never-applied")
	sleep(t, tw, 5*time.Minute)
	if st := status(t, tw); st.Restarts != 1 {
		t.Errorf("restarts %d, want 1", st.Restarts)
	}

	unknown := []struct {
		name string
		ref  inventory.Ref
	}{
		{"no such node", inventory.Ref{Kind: catalog.ScopeGPU, Node: "gpu-node-9", GPU: 0}},
		{"gpu index out of range", inventory.Ref{Kind: catalog.ScopeGPU, Node: "gpu-node-0", GPU: 8}},
		{"wrong UUID", inventory.Ref{Kind: catalog.ScopeGPU, Node: "gpu-node-0", GPU: 1, UUID: "GPU-nope"}},
		{"no such job", inventory.Ref{Kind: catalog.ScopeJob, Job: "nope"}},
		{"rank out of range", inventory.Ref{Kind: catalog.ScopeRank, Job: demoJob, Rank: 16}},
		{"no kind", inventory.Ref{}},
	}
	for _, tc := range unknown {
		err := tw.Apply("u-"+tc.name, tc.ref, []catalog.Effect{{Kind: catalog.EffectOffBus}})
		if !errors.Is(err, ErrUnknownTarget) {
			t.Errorf("%s: %v, want ErrUnknownTarget", tc.name, err)
		}
	}
	if err := tw.Apply("bad", ref, []catalog.Effect{{Kind: "bogus"}}); err == nil {
		t.Error("unknown effect kind accepted")
	}
}

func TestSleepCancelled(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start, now := time.Now(), tw.Now()
	if err := tw.Sleep(ctx, 24*time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a cancelled context: %v", err)
	}
	if time.Since(start) > 100*time.Millisecond || tw.Now().Sub(now) > time.Minute {
		t.Errorf("Sleep took %s and advanced %s after cancellation", time.Since(start), tw.Now().Sub(now))
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start = time.Now()
	err := tw.Sleep(ctx, 10000*time.Hour)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Errorf("Sleep with a deadline: %v after %s", err, time.Since(start))
	}
}

func TestInventory(t *testing.T) {
	t.Parallel()
	inv := newTwin(t, Options{}).Inventory()
	if len(inv.Nodes) != 2 || len(inv.Nodes[1].GPUs) != 8 || inv.Nodes[1].Name != "gpu-node-1" {
		t.Fatalf("inventory %+v", inv)
	}
	g := inv.Nodes[0].GPUs[0]
	if g.PCI != "00000000:18:00.0" || g.Model != "NVIDIA H200" || !strings.HasPrefix(g.UUID, "GPU-") || len(g.UUID) != 40 {
		t.Errorf("gpu %+v", g)
	}
	if len(inv.Jobs) != 1 || len(inv.Jobs[0].Ranks) != 16 {
		t.Fatalf("jobs %+v", inv.Jobs)
	}
	for _, r := range inv.Jobs[0].Ranks {
		if want := (inventory.Rank{Rank: r.Rank, Node: "gpu-node-" + string(rune('0'+r.Rank/8)), GPU: r.Rank % 8}); r != want {
			t.Errorf("rank %+v, want %+v", r, want)
		}
	}
}

// TestStopGrace: when one rank dies, the others wait in a collective and
// are killed only at the launcher's grace, which delays the restart; when
// the whole job goes at once (a drained node) nothing waits.
func TestStopGrace(t *testing.T) {
	tests := []struct {
		name  string
		grace time.Duration
		ref   func(*Twin) inventory.Ref
		eff   catalog.Effect
		down  time.Duration // restart cost 1m, plus the grace for one rank
	}{
		{"rank killed, no grace", 0, func(*Twin) inventory.Ref { return rankRef(3) }, catalog.Effect{Kind: catalog.EffectRank, Mode: "kill"}, time.Minute},
		{"rank killed, 30s grace", 30 * time.Second, func(*Twin) inventory.Ref { return rankRef(3) }, catalog.Effect{Kind: catalog.EffectRank, Mode: "kill"}, 90 * time.Second},
		{"node drained, 30s grace", 30 * time.Second, func(*Twin) inventory.Ref { return nodeRef("gpu-node-0") }, catalog.Effect{Kind: catalog.EffectNode, Mode: "pod-kill"}, time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := oneNode()
			spec.Nodes.NamePrefix = "gpu-node-"
			spec.Jobs[0].RestartCost = time.Minute
			spec.Jobs[0].StopGrace = tc.grace
			tw := newTwin(t, Options{Spec: spec})
			sleep(t, tw, time.Minute)
			apply(t, tw, "k", tc.ref(tw), tc.eff)
			revert(t, tw, "k")
			sleep(t, tw, tc.down-time.Second)
			if st := status(t, tw); st.Restarts != 0 {
				t.Fatalf("restarted %s after the crash, want %s", tc.down-time.Second, tc.down)
			}
			sleep(t, tw, 2*time.Second)
			if st := status(t, tw); st.Restarts != 1 || st.State != "running" {
				t.Errorf("state %s after %d restarts %s after the crash, want running after 1", st.State, st.Restarts, tc.down+time.Second)
			}
		})
	}
}

// TestRelaunch: a clean relaunch frees the job's HBM and allocates it
// again, resumes where the job stopped and is no restart (observation 9 of
// scripts/coverage-observations).
func TestRelaunch(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{Spec: oneNode()})
	sleep(t, tw, 5*time.Minute)
	fb := func() float64 { return last(gpuSeries(tw, "DCGM_FI_DEV_FB_USED", "gpu-node-0", 0)) }
	used := fb()
	before := status(t, tw)
	if err := tw.Relaunch(demoJob, time.Minute); err != nil {
		t.Fatalf("Relaunch: %v", err)
	}
	sleep(t, tw, 30*time.Second)
	if st := status(t, tw); st.Running || fb() != 0 {
		t.Errorf("during the relaunch: running %v, FB_USED %g; want down and 0", st.Running, fb())
	}
	sleep(t, tw, 2*time.Minute)
	after := status(t, tw)
	if !after.Running || fb() != used {
		t.Errorf("after the relaunch: running %v, FB_USED %g; want up and %g", after.Running, fb(), used)
	}
	if after.Restarts != before.Restarts || after.LostSteps != before.LostSteps || after.LastCrash != "" {
		t.Errorf("relaunch counted as a crash: %+v", after)
	}
	if err := tw.Relaunch("no-such-job", time.Minute); !errors.Is(err, ErrUnknownTarget) {
		t.Errorf("Relaunch(no-such-job) = %v, want ErrUnknownTarget", err)
	}
}
