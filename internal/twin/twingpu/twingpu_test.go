package twingpu

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

func newTwin(t *testing.T, opts twin.Options) *twin.Twin {
	t.Helper()
	tw, err := twin.New(opts)
	if err != nil {
		t.Fatalf("twin.New: %v", err)
	}
	return tw
}

// lastValue reads the newest sample of metric for one GPU straight off the
// twin's series: what the source must report.
func lastValue(t *testing.T, tw *twin.Twin, metric, node string, gpu int) (float64, bool) {
	t.Helper()
	for _, s := range tw.Select(metric) {
		if s.Labels.Get("Hostname") == node && s.Labels.Get("gpu") == strconv.Itoa(gpu) {
			v := s.Samples[len(s.Samples)-1].V
			return v, !series.IsStale(v)
		}
	}
	return 0, false
}

func TestTwinDevicesMatchInventory(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, twin.Options{Seed: 7})
	for _, node := range []string{"gpu-node-0", "gpu-node-1"} {
		t.Run(node, func(t *testing.T) {
			src, err := New(Locked(tw), node)
			if err != nil {
				t.Fatal(err)
			}
			devs, err := src.Devices(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var inv []inventory.GPU
			for _, n := range tw.Inventory().Nodes {
				if n.Name == node {
					inv = n.GPUs
				}
			}
			if len(devs) != 8 || len(inv) != 8 {
				t.Fatalf("got %d devices, inventory %d, want 8", len(devs), len(inv))
			}
			for i, d := range devs {
				g := inv[i]
				want := gpu.Device{Index: g.Index, UUID: g.UUID, PCI: g.PCI, Name: g.Model, MemoryTotalMiB: 143771, NUMANode: i / 4}
				if d != want {
					t.Errorf("device %d = %+v, want %+v", i, d, want)
				}
			}
		})
	}
}

func TestTwinSampleEqualsSeries(t *testing.T) {
	t.Parallel()
	spec := twin.Default()
	spec.Exporter.OptIn = []string{"DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
	tw := newTwin(t, twin.Options{Seed: 3, Spec: spec, ScrapeInterval: time.Second})
	if err := tw.Sleep(context.Background(), 90*time.Second); err != nil {
		t.Fatal(err)
	}
	src, err := New(Locked(tw), "gpu-node-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, gpu := range []int{0, 5} {
		s, err := src.Sample(context.Background(), gpu)
		if err != nil {
			t.Fatalf("Sample(%d): %v", gpu, err)
		}
		if !s.Time.Equal(tw.Now()) {
			t.Errorf("gpu %d: time %v, want the last scrape %v", gpu, s.Time, tw.Now())
		}
		fields := map[string]float64{
			"DCGM_FI_DEV_SM_CLOCK": s.SMClockMHz, "DCGM_FI_DEV_MEM_CLOCK": s.MemClockMHz,
			"DCGM_FI_DEV_GPU_TEMP": s.TempC, "DCGM_FI_DEV_MEMORY_TEMP": s.MemTempC,
			"DCGM_FI_DEV_POWER_USAGE": s.PowerW, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": s.EnergyMJ,
			"DCGM_FI_DEV_GPU_UTIL": s.UtilGPU, "DCGM_FI_DEV_MEM_COPY_UTIL": s.UtilMem,
			"DCGM_FI_DEV_FB_USED": s.FBUsedMiB, "DCGM_FI_DEV_FB_FREE": s.FBFreeMiB,
			"DCGM_FI_DEV_PCIE_REPLAY_COUNTER":         s.PCIeReplays,
			"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS":   s.RemappedCorrectable,
			"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": s.RemappedUncorrectable,
			"DCGM_FI_DEV_ROW_REMAP_FAILURE":           s.RemapFailure,
			"DCGM_FI_DEV_CLOCKS_EVENT_REASONS":        float64(s.ClockEventReasons),
		}
		for metric, got := range fields {
			want, ok := lastValue(t, tw, metric, "gpu-node-1", gpu)
			if !ok {
				t.Fatalf("twin has no fresh %s for gpu %d", metric, gpu)
			}
			if got != want {
				t.Errorf("gpu %d %s = %v, want %v", gpu, metric, got, want)
			}
		}
		if s.TempC < 30 || s.PowerW < 100 {
			t.Errorf("gpu %d: temp %v, power %v: the training twin should be warm and busy", gpu, s.TempC, s.PowerW)
		}
	}
}

func TestTwinSampleMissingAndLost(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, twin.Options{Seed: 1, ScrapeInterval: time.Second})
	src, err := New(Locked(tw), "gpu-node-0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := src.Sample(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Clock event reasons are off by default in dcgm-exporter and the twin.
	if s.HasClockEventReasons {
		t.Error("clock event reasons reported though the twin's exporter does not export them")
	}
	if math.IsNaN(s.TempC) {
		t.Error("temperature missing")
	}

	var ref inventory.Ref
	for _, n := range tw.Inventory().Nodes {
		if n.Name == "gpu-node-0" {
			g := n.GPUs[2]
			ref = inventory.Ref{Kind: catalog.ScopeGPU, Node: n.Name, GPU: g.Index, UUID: g.UUID, PCI: g.PCI}
		}
	}
	if err := tw.Apply("offbus", ref, []catalog.Effect{{Kind: catalog.EffectOffBus}}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Sleep(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Sample(ctx, 2); !errors.Is(err, gpu.ErrGPULost) {
		t.Errorf("Sample of a GPU off the bus: %v, want ErrGPULost", err)
	}
	if _, err := src.Sample(ctx, 3); err != nil {
		t.Errorf("a neighbour of the lost GPU: %v", err)
	}
	devs, _ := src.Devices(ctx)
	if len(devs) != 8 {
		t.Errorf("%d devices listed, want 8: a lost GPU is still in the machine", len(devs))
	}
	if err := tw.Revert("offbus"); err != nil {
		t.Fatal(err)
	}
	if err := tw.Sleep(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Sample(ctx, 2); err != nil {
		t.Errorf("Sample after the GPU is back: %v", err)
	}
}

func TestTwinSourceErrors(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, twin.Options{})
	if _, err := New(Locked(tw), "no-such-node"); !errors.Is(err, twin.ErrUnknownTarget) {
		t.Errorf("unknown node: %v, want ErrUnknownTarget", err)
	}
	if _, err := New(nil, "gpu-node-0"); err == nil {
		t.Error("nil access accepted")
	}
	src, err := New(Locked(tw), "gpu-node-0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := src.Sample(ctx, 8); !errors.Is(err, gpu.ErrNoDevice) {
		t.Errorf("index 8: %v, want ErrNoDevice", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := src.Sample(cctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := src.Sample(ctx, 0); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// The twin lists no process on a GPU it has and refuses one it lacks.
func TestTwinProcesses(t *testing.T) {
	t.Parallel()
	src, err := New(Locked(newTwin(t, twin.Options{Seed: 1, ScrapeInterval: time.Second})), "gpu-node-0")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := src.Devices(context.Background())
	if err != nil || len(devs) == 0 {
		t.Fatalf("devices: %v, %v", devs, err)
	}
	pl, ok := src.(gpu.ProcessLister)
	if !ok {
		t.Fatal("the twin source is not a ProcessLister")
	}
	ps, err := pl.Processes(context.Background(), devs[0].Index)
	if err != nil || len(ps) != 0 {
		t.Errorf("Processes = %v, %v, want none", ps, err)
	}
	if _, err := pl.Processes(context.Background(), 999); !errors.Is(err, gpu.ErrNoDevice) {
		t.Errorf("Processes(999): %v, want ErrNoDevice", err)
	}
}
