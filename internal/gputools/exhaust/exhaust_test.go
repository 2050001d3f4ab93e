package exhaust

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
)

func TestParseDirection(t *testing.T) {
	tests := []struct {
		name, in string
		want     Direction
		wantErr  bool
	}{
		{name: "h2d", in: "h2d", want: HostToDevice},
		{name: "d2h upper case and spaces", in: " D2H ", want: DeviceToHost},
		{name: "both", in: "both", want: Both},
		{name: "empty", in: "", wantErr: true},
		{name: "unknown", in: "up", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDirection(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseDirection(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseDirection(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzParseDirection(f *testing.F) {
	for _, s := range []string{"h2d", "D2H", "both", "", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDirection(s)
		if err != nil {
			if d != "" {
				t.Fatalf("ParseDirection(%q) = %q with error %v", s, d, err)
			}
			return
		}
		if d.h2d() == false && d.d2h() == false {
			t.Fatalf("ParseDirection(%q) = %q, which copies nothing", s, d)
		}
		if again, err := ParseDirection(string(d)); err != nil || again != d {
			t.Fatalf("ParseDirection(%q) does not round-trip: %q, %v", d, again, err)
		}
	})
}

func TestOptionsWithDefaults(t *testing.T) {
	tests := []struct {
		name    string
		in      Options
		want    Options
		wantErr string
	}{
		{name: "defaults", in: Options{Duration: time.Second},
			want: Options{Duration: time.Second, Bytes: DefaultStormBytes, Direction: Both}},
		{name: "kept", in: Options{GPU: 1, Bytes: MinStormBytes, Duration: time.Minute, Direction: DeviceToHost},
			want: Options{GPU: 1, Bytes: MinStormBytes, Duration: time.Minute, Direction: DeviceToHost}},
		{name: "no duration", in: Options{}, wantErr: "duration"},
		{name: "too long", in: Options{Duration: MaxDuration + time.Second}, wantErr: "duration"},
		{name: "negative gpu", in: Options{GPU: -1, Duration: time.Second}, wantErr: "gpu -1"},
		{name: "copy too small", in: Options{Bytes: MinStormBytes - 1, Duration: time.Second}, wantErr: "copy size"},
		{name: "copy too large", in: Options{Bytes: MaxStormBytes + 1, Duration: time.Second}, wantErr: "copy size"},
		{name: "bad direction", in: Options{Duration: time.Second, Direction: "sideways"}, wantErr: "direction"},
		{name: "rate sizes the copies to a hundredth of a second", in: Options{Duration: time.Second, Rate: 1e9},
			want: Options{Duration: time.Second, Bytes: 9 << 20, Direction: Both, Rate: 1e9}},
		{name: "slow rate copies the smallest size", in: Options{Duration: time.Second, Rate: 1e6},
			want: Options{Duration: time.Second, Bytes: MinStormBytes, Direction: Both, Rate: 1e6}},
		{name: "fast rate copies the default size", in: Options{Duration: time.Second, Rate: 100e9},
			want: Options{Duration: time.Second, Bytes: DefaultStormBytes, Direction: Both, Rate: 100e9}},
		{name: "rate keeps an explicit copy size", in: Options{Duration: time.Second, Rate: 1e6, Bytes: 64 << 20},
			want: Options{Duration: time.Second, Bytes: 64 << 20, Direction: Both, Rate: 1e6}},
		{name: "rate at the cap", in: Options{Duration: time.Second, Rate: MaxRate},
			want: Options{Duration: time.Second, Bytes: DefaultStormBytes, Direction: Both, Rate: MaxRate}},
		{name: "rate over the cap", in: Options{Duration: time.Second, Rate: MaxRate + 1}, wantErr: "rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.withDefaults()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestIssueAt(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		issued uint64
		rate   uint64
		want   time.Duration // after t0
	}{
		{name: "unpaced is never held back", issued: 1 << 40, rate: 0, want: 0},
		{name: "nothing queued", issued: 0, rate: 25e9, want: 0},
		{name: "one second's worth", issued: 25e9, rate: 25e9, want: time.Second},
		{name: "a fraction of a second", issued: 250e6, rate: 25e9, want: 10 * time.Millisecond},
		{name: "slow rate", issued: 3 << 20, rate: 1e6, want: 3145728 * time.Microsecond},
		{name: "a day at the top rate without overflow", issued: 86400 * MaxRate, rate: MaxRate, want: 24 * time.Hour},
		{name: "whole and part", issued: 3*7e9 + 7e9/2, rate: 7e9, want: 3500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := issueAt(t0, tt.issued, tt.rate).Sub(t0)
			if d := got - tt.want; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("issueAt(t0, %d, %d) = t0+%s, want t0+%s", tt.issued, tt.rate, got, tt.want)
			}
		})
	}
}

// TestPacedScheduleKeepsTheRate plays a storm's loop against the schedule
// with copies that take no time: whenever a round is queued, the bytes
// queued so far, the round's included, never exceed the rate times the
// elapsed time, and over the whole run the average is the rate to within
// one round.
func TestPacedScheduleKeepsTheRate(t *testing.T) {
	t0 := time.Unix(0, 0)
	const rate, copyBytes, lanes = 2e9, 20 << 20, 2
	var issued uint64
	now := t0
	end := t0.Add(10 * time.Second)
	const round = lanes * copyBytes
	for {
		at := issueAt(t0, issued+round, rate) // as PCIeStorm asks
		if at.After(now) {
			now = at
		}
		if !now.Before(end) {
			break
		}
		issued += round
		if limit := rate * now.Sub(t0).Seconds(); float64(issued) > limit+1 {
			t.Fatalf("at t0+%s %d bytes were queued, over the rate's %.0f", now.Sub(t0), issued, limit)
		}
	}
	avg := float64(issued) / end.Sub(t0).Seconds()
	if avg > rate || rate-avg > round/10 {
		t.Errorf("average %.6g bytes/s over 10 s, want at most %g and within one round of it", avg, float64(rate))
	}
}

func TestCheckFraction(t *testing.T) {
	for _, f := range []float64{0.01, 0.5, 0.9, MaxFraction} {
		if err := checkFraction(f); err != nil {
			t.Errorf("checkFraction(%g) = %v, want nil", f, err)
		}
	}
	for _, f := range []float64{0, -0.1, 0.995, 1, 2, math.NaN(), math.Inf(1)} {
		if err := checkFraction(f); err == nil {
			t.Errorf("checkFraction(%g) = nil, want an error", f)
		}
	}
}

func TestChunkSizes(t *testing.T) {
	tests := []struct {
		name string
		n    uint64
		want []uint64
	}{
		{name: "zero", n: 0, want: nil},
		{name: "under one chunk", n: 5 << 20, want: []uint64{5 << 20}},
		{name: "exactly two", n: 2 * ChunkBytes, want: []uint64{ChunkBytes, ChunkBytes}},
		{name: "with remainder", n: 2*ChunkBytes + 2<<20, want: []uint64{ChunkBytes, ChunkBytes, 2 << 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := chunkSizes(tt.n)
			if len(got) != len(tt.want) {
				t.Fatalf("chunkSizes(%d) = %v, want %v", tt.n, got, tt.want)
			}
			var sum uint64
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("chunkSizes(%d) = %v, want %v", tt.n, got, tt.want)
				}
				sum += got[i]
			}
			if sum != tt.n {
				t.Errorf("chunks sum to %d, want %d", sum, tt.n)
			}
		})
	}
}

func TestHoldBytes(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name     string
		free     uint64
		fraction float64
		want     uint64
	}{
		{name: "ninety percent of 140 GiB", free: 140 * gib, fraction: 0.9, want: 126 * gib},
		{name: "rounded down to 2 MiB", free: 3<<20 + 1, fraction: 0.99, want: 2 << 20},
		{name: "below granularity", free: 1 << 20, fraction: 0.5, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := holdBytes(tt.free, tt.fraction); got != tt.want {
				t.Errorf("holdBytes(%d, %g) = %d, want %d", tt.free, tt.fraction, got, tt.want)
			}
		})
	}
}

// hasGPU reports whether a CUDA driver with at least one GPU is here.
func hasGPU(t *testing.T) bool {
	t.Helper()
	d, err := cuda.Open()
	if err != nil {
		return false
	}
	n, err := d.DeviceCount()
	return err == nil && n > 0
}

func TestBadInputFailsBeforeTheDriver(t *testing.T) {
	ctx := context.Background()
	if _, err := HoldVRAM(ctx, 0, 1.5); err == nil || !strings.Contains(err.Error(), "fraction") {
		t.Errorf("HoldVRAM(fraction 1.5) error = %v, want a fraction error", err)
	}
	if _, err := HoldVRAM(ctx, -1, 0.5); err == nil || !strings.Contains(err.Error(), "gpu -1") {
		t.Errorf("HoldVRAM(gpu -1) error = %v, want a gpu error", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := HoldVRAM(cancelled, 0, 0.5); !errors.Is(err, context.Canceled) {
		t.Errorf("HoldVRAM(cancelled ctx) error = %v, want context.Canceled", err)
	}
	if _, err := PCIeStorm(ctx, Options{}); err == nil || !strings.Contains(err.Error(), "duration") {
		t.Errorf("PCIeStorm(no duration) error = %v, want a duration error", err)
	}
}

func TestNoDriver(t *testing.T) {
	if _, err := cuda.Open(); err == nil {
		t.Skip("a CUDA driver is present")
	}
	ctx := context.Background()
	if _, err := HoldVRAM(ctx, 0, 0.5); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("HoldVRAM error = %v, want it to wrap cuda.ErrNoDriver", err)
	}
	if _, err := PCIeStorm(ctx, Options{Duration: time.Second}); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("PCIeStorm error = %v, want it to wrap cuda.ErrNoDriver", err)
	}
}

func TestOnGPU(t *testing.T) {
	if !hasGPU(t) {
		t.Skip("no GPU")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := HoldVRAM(ctx, 1<<20, 0.1); err == nil || !strings.Contains(err.Error(), "GPUs") {
		t.Errorf("HoldVRAM(gpu 1<<20) error = %v, want a no-such-GPU error", err)
	}
	h, err := HoldVRAM(ctx, 0, 0.25)
	if err != nil {
		t.Fatal(err)
	}
	info := h.Info()
	if info.HeldBytes == 0 || info.FreeAfter+info.HeldBytes > info.FreeBefore+64<<20 {
		t.Errorf("hold info %+v: free memory did not drop by what was held", info)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Errorf("second Release = %v", err)
	}
	// A hold ends with its context, too.
	hctx, hcancel := context.WithCancel(ctx)
	h2, err := HoldVRAM(hctx, 0, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	hcancel()
	select {
	case <-h2.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("hold outlived its context by 10 s")
	}
	res, err := PCIeStorm(ctx, Options{Duration: 500 * time.Millisecond, Bytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.H2D == nil || res.D2H == nil || res.H2D.GBps <= 0 || res.D2H.GBps <= 0 {
		t.Errorf("storm result %+v: want both directions measured", res)
	}
}
