package exhaustfault

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

func TestCommands(t *testing.T) {
	t.Parallel()
	const d = 3660 * time.Second
	tests := []struct {
		name    string
		fault   string
		gpu     int
		values  catalog.Values
		want    [][]string
		wantErr string
	}{
		{name: "sm-burn", fault: "exhaustion.sm-burn", gpu: 3, values: catalog.Values{"load": 0.25, "ceiling": int64(80)},
			want: [][]string{{"burn", "--gpus", "3", "--duration", "3660s", "--duty", "0.25", "--temp-ceiling", "80", "--format", "json", "--ready-fd", "3"}}},
		{name: "sm-burn at full load", fault: "exhaustion.sm-burn", values: catalog.Values{"load": 1.0, "ceiling": int64(85)},
			want: [][]string{{"burn", "--gpus", "0", "--duration", "3660s", "--duty", "1", "--temp-ceiling", "85", "--format", "json", "--ready-fd", "3"}}},
		{name: "thermal-soak", fault: "exhaustion.thermal-soak", gpu: 1, values: catalog.Values{"ceiling": int64(87)},
			want: [][]string{{"burn", "--gpus", "1", "--duration", "3660s", "--temp-ceiling", "87", "--format", "json", "--ready-fd", "3"}}},
		{name: "vram", fault: "exhaustion.vram", gpu: 7, values: catalog.Values{"fraction": 0.9},
			want: [][]string{{"exhaust", "vram", "--gpu", "7", "--fraction", "0.9", "--duration", "3660s", "--format", "json", "--ready-fd", "3"}}},
		{name: "pcie", fault: "exhaustion.pcie", gpu: 2, values: catalog.Values{"rate": int64(25e9)},
			want: [][]string{{"exhaust", "pcie", "--gpu", "2", "--duration", "3660s", "--rate", "25000000000", "--format", "json", "--ready-fd", "3"}}},
		{name: "noisy neighbour with memory", fault: "exhaustion.noisy-neighbour", values: catalog.Values{"share": 0.5, "memory": 0.1},
			want: [][]string{
				{"burn", "--gpus", "0", "--duration", "3660s", "--duty", "0.5", "--temp-ceiling", "85", "--format", "json", "--ready-fd", "3"},
				{"exhaust", "vram", "--gpu", "0", "--fraction", "0.1", "--duration", "3660s", "--format", "json", "--ready-fd", "3"},
			}},
		{name: "noisy neighbour without memory", fault: "exhaustion.noisy-neighbour", values: catalog.Values{"share": 0.05, "memory": 0.0},
			want: [][]string{{"burn", "--gpus", "0", "--duration", "3660s", "--duty", "0.05", "--temp-ceiling", "85", "--format", "json", "--ready-fd", "3"}}},
		{name: "negative gpu", fault: "exhaustion.vram", gpu: -1, values: catalog.Values{"fraction": 0.5}, wantErr: "gpu -1"},
		{name: "missing load", fault: "exhaustion.sm-burn", values: catalog.Values{"ceiling": int64(85)}, wantErr: "load 0"},
		{name: "load over one", fault: "exhaustion.sm-burn", values: catalog.Values{"load": 1.2, "ceiling": int64(85)}, wantErr: "load 1.2"},
		{name: "missing ceiling", fault: "exhaustion.thermal-soak", values: catalog.Values{}, wantErr: "ceiling 0"},
		{name: "fraction over the hold's cap", fault: "exhaustion.vram", values: catalog.Values{"fraction": 0.995}, wantErr: "memory fraction 0.995"},
		{name: "missing rate", fault: "exhaustion.pcie", values: catalog.Values{}, wantErr: "rate 0"},
		{name: "negative memory", fault: "exhaustion.noisy-neighbour", values: catalog.Values{"share": 0.5, "memory": -0.1}, wantErr: "memory fraction -0.1"},
		{name: "not an exhaustion fault", fault: "hardware.xid", values: catalog.Values{}, wantErr: "no child-process mechanism"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := commands(tc.fault, tc.gpu, tc.values, d)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("commands = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Fatalf("commands =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestCommandsFromTheCatalogue: every fault's defaults, as the catalogue
// resolves them, make valid commands.
func TestCommandsFromTheCatalogue(t *testing.T) {
	t.Parallel()
	for _, f := range catalog.All() {
		if _, ok := mechanismOf(f.ID); !ok {
			continue
		}
		v, err := f.Resolve(nil)
		if err != nil {
			t.Fatalf("%s: %v", f.ID, err)
		}
		if _, err := commands(f.ID, 0, v, time.Hour); err != nil {
			t.Errorf("%s with its defaults: %v", f.ID, err)
		}
		name, _ := mechanismOf(f.ID)
		if f.Mechanism(name) == nil {
			t.Errorf("%s has no mechanism %s in the catalogue", f.ID, name)
		}
	}
}

func TestChildDuration(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	tests := []struct {
		name string
		ctx  context.Context
		want time.Duration
	}{
		{name: "no hold time", ctx: context.Background(), want: DefaultHold},
		{name: "hold plus the margin", ctx: fault.WithHoldUntil(context.Background(), now.Add(10*time.Minute)), want: 11 * time.Minute},
		{name: "rounded up to a second", ctx: fault.WithHoldUntil(context.Background(), now.Add(90*time.Second+time.Millisecond)), want: 151 * time.Second},
		{name: "a past hold still gets the margin", ctx: fault.WithHoldUntil(context.Background(), now.Add(-time.Hour)), want: HoldMargin},
		{name: "capped at a day", ctx: fault.WithHoldUntil(context.Background(), now.Add(48*time.Hour)), want: MaxHold},
		{name: "just under the cap is capped too", ctx: fault.WithHoldUntil(context.Background(), now.Add(MaxHold-time.Second/2)), want: MaxHold},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := childDuration(tc.ctx, now); got != tc.want {
				t.Fatalf("childDuration = %s, want %s", got, tc.want)
			}
		})
	}
}
