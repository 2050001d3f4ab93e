package twin

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// stddevLast is the population standard deviation of the series' last n
// samples, as PromQL's stddev_over_time computes it.
func stddevLast(s *series.Series, n int) float64 {
	xs := s.Samples[max(len(s.Samples)-n, 0):]
	mean := 0.0
	for _, x := range xs {
		mean += x.V
	}
	mean /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x.V - mean) * (x.V - mean)
	}
	return math.Sqrt(v / float64(len(xs)))
}

// TestTelemetryNoise: a healthy twin's readings move a little, scrape
// after scrape, as a real H200's do (observation 4 of
// scripts/coverage-observations): over 15 minutes, stddev_over_time of
// power is never 0 (the "GPU is stuck" rule stays quiet) and is as large
// as on the real GPU; a capped GPU's clock
// hunts by the real readings' 15–18 MHz; temperatures and utilisation
// move; and a seed gives the same readings byte for byte.
func TestTelemetryNoise(t *testing.T) {
	t.Parallel()
	const n = 30 // 15 minutes of 30 s scrapes
	tw := newTwin(t, Options{Spec: oneNode(), Seed: 7})
	sleep(t, tw, 5*time.Minute)
	apply(t, tw, "cap", gpuRef(tw, "gpu-node-0", 1), catalog.Effect{Kind: catalog.EffectPowerCap, Factor: 0.9})
	sleep(t, tw, 16*time.Minute)
	for i := range 8 {
		g := tw.byNode["gpu-node-0"].gpus[i]
		p := stddevLast(gpuSeries(tw, "DCGM_FI_DEV_POWER_USAGE", "gpu-node-0", i), n)
		// 1.44 W at 690.9 W on the real GPU, in proportion to the draw.
		want := 1.44 * g.power / 690.9
		if p < 0.5*want || p > 2*want {
			t.Errorf("gpu %d: stddev_over_time(POWER_USAGE[15m]) = %.3f W, want about %.2f", i, p, want)
		}
		if u := stddevLast(gpuSeries(tw, "DCGM_FI_DEV_GPU_UTIL", "gpu-node-0", i), n); u == 0 {
			t.Errorf("gpu %d: GPU_UTIL never moves over 15 minutes", i)
		}
	}
	if c := stddevLast(gpuSeries(tw, "DCGM_FI_DEV_SM_CLOCK", "gpu-node-0", 1), n); c < 9 || c > 30 {
		t.Errorf("capped GPU: stddev_over_time(SM_CLOCK[15m]) = %.1f MHz, want 15–18 as on the real H200", c)
	}
	temps := 0
	for i := range 8 {
		if stddevLast(gpuSeries(tw, "DCGM_FI_DEV_GPU_TEMP", "gpu-node-0", i), n) > 0 {
			temps++
		}
	}
	if temps == 0 {
		t.Error("no GPU's GPU_TEMP moved over 15 minutes")
	}

	read := func(seed uint64) []float64 {
		tw := newTwin(t, Options{Spec: oneNode(), Seed: seed})
		sleep(t, tw, 5*time.Minute)
		var out []float64
		for _, m := range []string{"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL"} {
			for _, s := range tw.Select(m) {
				for _, x := range s.Samples {
					out = append(out, x.V)
				}
			}
		}
		return out
	}
	if a, b := read(3), read(3); !slices.Equal(a, b) {
		t.Error("the same seed gave different readings")
	}
	if a, b := read(3), read(4); slices.Equal(a, b) {
		t.Error("two seeds gave the same readings")
	}
}
