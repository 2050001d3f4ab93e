package collbench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestOptionsDefaultsAndLimits(t *testing.T) {
	t.Parallel()
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Ops) != 1 || o.Ops[0] != AllReduce || o.DType != BF16 || o.MinBytes != 1<<20 || o.MaxBytes != 256<<20 ||
		o.StepFactor != 2 || o.Warmup != 5 || o.Iters != 20 || o.RendezvousTimeout != time.Minute {
		t.Errorf("defaults = %+v", o)
	}
	if o, _ := (Options{Warmup: -1}).withDefaults(); o.Warmup != 0 {
		t.Errorf("Warmup -1 became %d; want none", o.Warmup)
	}
	if o, _ := (Options{MinBytes: 1 << 30}).withDefaults(); o.MaxBytes != 1<<30 {
		t.Errorf("MaxBytes defaults to %d under a 1 GiB minimum; want 1 GiB", o.MaxBytes)
	}
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"unknown op", Options{Ops: []Op{"reduce"}}, `unknown operation "reduce"`},
		{"unknown type", Options{DType: "fp8"}, "fp8"},
		{"max below min", Options{MinBytes: 8 << 20, MaxBytes: 4 << 20}, "below min bytes"},
		{"too large", Options{MaxBytes: 32 << 30}, "limit"},
		{"factor", Options{StepFactor: 1}, "step factor 1"},
		{"iters", Options{Iters: -3}, "timed iterations -3"},
		{"delay", Options{Delay: -time.Second}, "delay -1s"},
		{"one rank", Options{NRanks: 1, Rendezvous: "h:1"}, "at least 2"},
		{"rank out of range", Options{NRanks: 2, Rank: 2, Rendezvous: "h:1"}, "rank 2 is out of range"},
		{"no rendezvous", Options{NRanks: 2, Rank: 1}, "rendezvous address"},
		{"two GPUs for one rank", Options{NRanks: 2, Rendezvous: "h:1", GPUs: []int{0, 1}}, "one GPU, not 2"},
	}
	for _, tc := range tests {
		_, err := tc.o.withDefaults()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v; want %q", tc.name, err, tc.want)
		}
	}
}

// TestAssemble: the table takes the slowest rank's time per size, sums
// wrong elements, and names failed ranks.
func TestAssemble(t *testing.T) {
	t.Parallel()
	o, _ := Options{Ops: []Op{AllReduce, AllGather}, MinBytes: 1 << 20, MaxBytes: 2 << 20}.withDefaults()
	reports := []RankReport{
		{Rank: 0, Results: []RankResult{{AllReduce, 1 << 20, 10e-6, 0}, {AllReduce, 2 << 20, 20e-6, 0}, {AllGather, 1 << 20, 5e-6, 0}, {AllGather, 2 << 20, 8e-6, 0}}},
		{Rank: 1, Results: []RankResult{{AllReduce, 1 << 20, 12e-6, 3}, {AllReduce, 2 << 20, 19e-6, 0}, {AllGather, 1 << 20, 5e-6, 1}}, Error: "gpu 1: boom"},
	}
	res, err := assemble(Result{}, o, 2, reports)
	if err == nil || !strings.Contains(err.Error(), "rank 1: gpu 1: boom") || len(res.Errors) != 1 {
		t.Fatalf("assemble error = %v, %v", err, res.Errors)
	}
	if len(res.Results) != 4 {
		t.Fatalf("%d rows; want 4", len(res.Results))
	}
	ar := res.Results[0]
	if ar.Op != AllReduce || ar.Bytes != 1<<20 || math.Abs(ar.TimeUS-12) > 1e-9 || ar.Wrong != 3 || ar.RankWrong[1] != 3 {
		t.Errorf("first row = %+v; want rank 1's 12 µs and 3 wrong", ar)
	}
	if want := float64(1<<20) / 12e-6 / 1e9; math.Abs(ar.AlgBW-want) > 1e-9 || math.Abs(ar.BusBW-want) > 1e-9 {
		t.Errorf("algbw, busbw = %g, %g; want %g for both (2 ranks)", ar.AlgBW, ar.BusBW, want)
	}
	if ag := res.Results[2]; ag.Op != AllGather || math.Abs(ag.BusBW-ag.AlgBW/2) > 1e-9 {
		t.Errorf("all-gather row = %+v; busbw must be half of algbw for 2 ranks", ag)
	}
	// Rank 1 never measured the 2 MiB all-gather: the row has rank 0's
	// time, and rank 1's entry stays 0.
	if ag := res.Results[3]; math.Abs(ag.TimeUS-8) > 1e-9 || ag.RankTimeUS[1] != 0 {
		t.Errorf("partial row = %+v", ag)
	}
	if res.WrongTotal() != 4 {
		t.Errorf("WrongTotal = %d; want 4", res.WrongTotal())
	}
}

func TestCheckSizes(t *testing.T) {
	t.Parallel()
	o, _ := Options{Ops: []Op{ReduceScatter}, MinBytes: 8, DType: FP32}.withDefaults()
	if err := checkSizes(o, 4); err == nil || !strings.Contains(err.Error(), "too small for reduce_scatter over 4 ranks") {
		t.Errorf("checkSizes = %v", err)
	}
	o, _ = Options{DType: BF16}.withDefaults()
	if err := checkSizes(o, 300); err == nil || !strings.Contains(err.Error(), "too many") {
		t.Errorf("checkSizes(300 ranks of bf16) = %v", err)
	}
	if err := checkSizes(o, 8); err != nil {
		t.Error(err)
	}
}

// TestRunWithoutGPU is the CI case: Run fails cleanly naming the driver.
func TestRunWithoutGPU(t *testing.T) {
	_, err := Run(t.Context(), Options{Library: []string{"/nonexistent/libnccl.so.2"}})
	if err == nil {
		t.Skip("a GPU and NCCL answered")
	}
	if !strings.Contains(err.Error(), "libcuda.so.1") && !strings.Contains(err.Error(), "/nonexistent/libnccl.so.2") {
		t.Errorf("Run error = %v; want the missing library named", err)
	}
}
