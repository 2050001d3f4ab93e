package twin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

func TestCheckWarmup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		d    time.Duration
		want string // "" means accepted
	}{
		{"zero", 0, ""},
		{"default", 20 * time.Minute, ""},
		{"at the limit", MaxWarmup, ""},
		{"negative", -5 * time.Minute, "--warmup: must not be negative, got -5m0s"},
		{"over the limit", MaxWarmup + time.Nanosecond, "--warmup: at most 24h0m0s, got 24h0m0.000000001s"},
		{"far past the limit", 100000 * time.Hour, "--warmup: at most 24h0m0s, got 100000h0m0s"}, // such a warm-up once held 5 GB
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckWarmup("--warmup", tc.d)
			if tc.want == "" {
				if err != nil {
					t.Errorf("CheckWarmup(%s): %v, want nil", tc.d, err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("CheckWarmup(%s): %v, want %q", tc.d, err, tc.want)
			}
		})
	}
}

// TestSpecLimits: every field whose size drives memory or run time is
// refused past its limit, in one line naming the field and the limit.
func TestSpecLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"too many nodes", "nodes: {count: 100000}\n", []string{"nodes.count", "outside 1..4096"}},
		{"nodes times GPUs over the limit", "nodes: {count: 513}\n", []string{"nodes.count", "4104 GPUs", "limit of 4096"}},
		{"GPUs per node", "nodes: {gpusPerNode: 73}\n", []string{"nodes.gpusPerNode", "1..72"}},
		{"listed node's GPUs", "nodes: {list: [{name: a, gpus: 100}]}\n", []string{"nodes.list[0].gpus", "1..72"}},
		{"listed nodes add up over the limit", "nodes: {gpusPerNode: 72, list: [" + strings.Repeat("{},", 56) + "{}]}\n",
			[]string{"nodes.list[56].gpus", "4104 GPUs", "limit of 4096"}},
		{"rate of one class", "failureRates: {faulty-gpu: 1000}\n", []string{"failureRates.faulty-gpu", "1000 per GPU-hour", "limit of 1"}},
		{"rate 1e30", "failureRates: {faulty-gpu: 1e30}\n", []string{"failureRates.faulty-gpu", "limit of 1"}},
		{"rates together", "failureRates: {faulty-gpu: 0.6, hbm3: 0.6}\n", []string{"failureRates:", "1.2 per GPU-hour in all", "limit of 1"}},
		{"NaN rate", "failureRates: {hbm3: .nan}\n", []string{"failureRates.hbm3", "NaN"}},
		{"infinite rate", "failureRates: {hbm3: .inf}\n", []string{"failureRates.hbm3", "+Inf"}},
		{"negative rate", "failureRates: {gsp: -1e-6}\n", []string{"failureRates.gsp", "non-negative"}},
		{"NaN ambient", "ambientCelsius: .nan\n", []string{"ambientCelsius", "-20..60"}},
		{"infinite storage", "storage: {bandwidthGBps: .inf}\n", []string{"storage.bandwidthGBps", "finite"}},
		{"infinite network", "network: {nodeBandwidthGBps: .inf}\n", []string{"network.nodeBandwidthGBps", "finite"}},
		{"infinite gradient", "jobs: [{name: a, ranks: 2, gradientBytes: .inf}]\n", []string{"jobs[0].gradientBytes", "finite"}},
		{"infinite checkpoint", "jobs: [{name: a, ranks: 2, checkpointGB: .inf}]\n", []string{"jobs[0].checkpointGB", "finite"}},
		{"NaN MFU", "jobs: [{name: a, ranks: 2, flopsPerStep: 1e15, mfu: .nan}]\n", []string{"jobs[0].mfu"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseClusterSpec([]byte(tc.yaml), "big.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "big.yaml: ") || strings.Contains(msg, "\n") {
				t.Errorf("error %q should be one line starting with the file", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
	t.Run("at the limits", func(t *testing.T) {
		t.Parallel()
		s, err := ParseClusterSpec([]byte("nodes: {count: 512}\nfailureRates: {faulty-gpu: 0.5, hbm3: 0.5}\n"), "max.yaml")
		if err != nil {
			t.Fatalf("a spec at the limits was refused: %v", err)
		}
		if n := len(s.Nodes.List); n != 512 {
			t.Errorf("%d nodes, want 512", n)
		}
	})
}

func TestLoadClusterSpecSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	data := []byte("name: big\n" + strings.Repeat("#", MaxClusterSpecBytes))
	if err := os.WriteFile(big, data, 0o600); err != nil {
		t.Fatal(err)
	}
	paths := []string{big}
	// A device never ends; reading must stop at the limit.
	if _, err := os.Stat("/dev/zero"); err == nil {
		paths = append(paths, "/dev/zero")
	}
	for _, p := range paths {
		_, err := LoadClusterSpec(p)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "limit of 1024 KiB") {
			t.Errorf("LoadClusterSpec(%s): %v, want the file named and the limit", p, err)
		}
	}
	ok := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(ok, []byte("name: small\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadClusterSpec(ok); err != nil {
		t.Errorf("a small spec: %v", err)
	}
}

func TestScrapeIntervalLimit(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{time.Nanosecond, 999 * time.Millisecond, -time.Second} {
		if _, err := New(Options{ScrapeInterval: d}); err == nil || !strings.Contains(err.Error(), "shorter than 1s") {
			t.Errorf("ScrapeInterval %s: %v, want it refused", d, err)
		}
	}
}

// oldest returns the time of the oldest sample of any series that has more
// than one, and the most samples one series keeps.
func oldest(tw *Twin) (time.Time, int) {
	var first time.Time
	most := 0
	for _, s := range tw.Series() {
		if len(s.Samples) < 2 {
			continue
		}
		if t := s.Samples[0].Time(); first.IsZero() || t.Before(first) {
			first = t
		}
		most = max(most, len(s.Samples))
	}
	return first, most
}

// TestSleepKeepsRetention: a long Sleep keeps only the retention behind the
// clock (plus one trim period), except from the retention before the first
// Apply on; background failures do not pin.
func TestSleepKeepsRetention(t *testing.T) {
	t.Parallel()
	const scrape = 30 * time.Second
	busy := Default()
	for k := range busy.FailureRates {
		busy.FailureRates[k] *= 20000 // several failures an hour
	}
	tests := []struct {
		name      string
		opts      Options
		applyAt   time.Duration // 0: never
		sleep     time.Duration
		retention time.Duration // what should be kept; negative: everything
	}{
		{"default retention over six hours", Options{}, 0, 6 * time.Hour, DefaultRetention},
		{"ten minutes over two hours", Options{Retention: 10 * time.Minute}, 0, 2 * time.Hour, 10 * time.Minute},
		{"negative keeps everything", Options{Retention: -1}, 0, 3 * time.Hour, -1},
		{"background failures do not pin", Options{Spec: busy, BackgroundFailures: true, Retention: 20 * time.Minute}, 0, 4 * time.Hour, 20 * time.Minute},
		{"applied fault pins", Options{Retention: 20 * time.Minute}, 2 * time.Hour, 5 * time.Hour, 20 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t, tc.opts)
			start := tw.Now()
			if tc.applyAt > 0 {
				sleep(t, tw, tc.applyAt)
				apply(t, tw, "heat", gpuRef(tw, "gpu-node-0", 1), catalog.Effect{Kind: catalog.EffectXID, Code: 13})
			}
			sleep(t, tw, tc.sleep-tc.applyAt)
			first, most := oldest(tw)
			period := max(tc.retention/trimFraction, scrape)
			switch {
			case tc.retention < 0:
				if !first.Equal(start) || most != int(tc.sleep/scrape)+1 {
					t.Errorf("oldest sample at %s, %d samples in a series; want everything: %s, %d",
						first, most, start, int(tc.sleep/scrape)+1)
				}
			case tc.applyAt > 0:
				// Kept from the retention before the Apply, however long
				// the experiment has run since.
				lo, hi := start.Add(tc.applyAt-tc.retention-period), start.Add(tc.applyAt-tc.retention)
				if first.Before(lo) || first.After(hi) {
					t.Errorf("oldest sample at %s, want from %s to %s (retention before the Apply)", first, lo, hi)
				}
			default:
				lo, hi := tw.Now().Add(-tc.retention-period), tw.Now().Add(-tc.retention)
				if first.Before(lo) || first.After(hi) {
					t.Errorf("oldest sample at %s, want from %s to %s", first, lo, hi)
				}
				if limit := int((tc.retention+period)/scrape) + 1; most > limit {
					t.Errorf("a series keeps %d samples, want at most %d", most, limit)
				}
				if logs := tw.Logs(); len(logs) > 0 && logs[0].Time.Before(lo) {
					t.Errorf("oldest log line at %s, want none before %s", logs[0].Time, lo)
				}
			}
		})
	}
}

// TestSleepTrimLeavesReadSlices: samples read before a trimming Sleep still
// read the same after it; the twin copies what it keeps instead of
// shifting it under the reader.
func TestSleepTrimLeavesReadSlices(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{Spec: oneNode(), Retention: 5 * time.Minute})
	sleep(t, tw, 10*time.Minute)
	se := tw.Select("DCGM_FI_DEV_GPU_TEMP")[0]
	read := se.Samples
	want := slices.Clone(read)
	sleep(t, tw, 10*time.Minute)
	if !slices.EqualFunc(read, want, sameSample) {
		t.Error("a sample slice read before Sleep changed under the reader")
	}
	if se.Samples[0].T <= want[0].T {
		t.Errorf("the series was not trimmed: oldest sample still %s", se.Samples[0].Time())
	}
}

// TestLogLinesBounded: the kernel log keeps at most MaxLogLines, oldest
// first out, whatever writes to it.
func TestLogLinesBounded(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{Spec: oneNode()})
	n := tw.nodes[0]
	for i := range MaxLogLines + 100 {
		tw.log(n, 6, "line "+string(rune('a'+i%26)))
	}
	logs := tw.Logs()
	if len(logs) > MaxLogLines || len(logs) < MaxLogLines*7/8 {
		t.Fatalf("%d lines kept, want at most %d and no fewer than %d", len(logs), MaxLogLines, MaxLogLines*7/8)
	}
	if last := logs[len(logs)-1].Text; last != "line "+string(rune('a'+(MaxLogLines+99)%26)) {
		t.Errorf("newest line %q: the newest must stay", last)
	}
}

// TestSleepCancelledKeepsBound: Sleep stays cancellable while it trims.
func TestSleepCancelledKeepsBound(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{Retention: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := tw.Sleep(ctx, MaxWarmup); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sleep: %v", err)
	}
	if _, most := oldest(tw); most > int((time.Minute+30*time.Second)/(30*time.Second))+1 {
		t.Errorf("a series keeps %d samples with a one-minute retention", most)
	}
}
