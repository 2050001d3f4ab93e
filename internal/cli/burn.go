package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/burn"
	"github.com/gpuchaos/gpuchaos/internal/cuda"
	"github.com/gpuchaos/gpuchaos/internal/gpu"
)

func newBurnCmd() *cobra.Command {
	var (
		gpus     string
		duration time.Duration
		dtype    string
		size     int
		ceiling  float64
		seed     uint64
		f        format
	)
	cmd := &cobra.Command{
		Use:   "burn",
		Short: "Burn GPUs with matrix products, checking for silent data corruption",
		Long: `Run cuBLAS matrix products on every selected GPU at once for a fixed
duration, with inputs drawn at random on the GPU, and report the rate each
GPU reached (TFLOP/s, 2·N³ per product, timed with CUDA events).

Silent data corruption check: between batches the last product is compared
bit for bit with a reference product of the same inputs; a healthy GPU
reproduces it exactly, so every differing element is counted and reported
with its GPU, and the command exits 1.

Telemetry (temperature, power, clocks, clock-event reasons) is read through
NVML every second into the trace; with --temp-ceiling the burn stops within
2 s of a GPU reaching the ceiling. A burn always has a duration.

GPUs are numbered in PCI bus order, as nvidia-smi numbers them. Needs the
NVIDIA driver (libcuda.so.1) and cuBLAS (libcublas.so.13 or .12, found
through the loader, LD_LIBRARY_PATH, CUDA_HOME or /usr/local/cuda).`,
		Example: `  gpuchaos burn --duration 30s
  gpuchaos burn --gpus 0,1 --duration 10m --dtype tf32 --temp-ceiling 85
  gpuchaos burn --duration 60s --format json | jq '.gpus[] | {index, tflops, mismatches}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("duration") {
				return errors.New("--duration is required (at most 24h)")
			}
			if duration <= 0 || duration > burn.MaxDuration {
				return fmt.Errorf("--duration %s: must be above 0 and at most %s", duration, burn.MaxDuration)
			}
			sel, err := parseGPUList(gpus)
			if err != nil {
				return err
			}
			dt, err := burn.ParseDType(dtype)
			if err != nil {
				return fmt.Errorf("--dtype: %w", err)
			}
			if ceiling < 0 {
				return fmt.Errorf("--temp-ceiling %g: must not be negative", ceiling)
			}
			opts := burn.Options{GPUs: sel, Duration: duration, DType: dt, N: size, TempCeilingC: ceiling, Seed: seed}
			// The driver first, so a machine without a GPU hears exactly that.
			if _, err := cuda.Open(); err != nil {
				return failed(fmt.Errorf("burn: %w", err))
			}
			tel, closeTel, err := nvmlTelemetry()
			if err != nil {
				if ceiling > 0 {
					return failed(fmt.Errorf("--temp-ceiling needs NVML telemetry: %w", err))
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "gpuchaos: telemetry off: %v\n", err)
			} else {
				defer closeTel()
				opts.Telemetry = tel
			}
			res, runErr := burn.Run(cmd.Context(), opts)
			if runErr != nil && len(res.GPUs) == 0 {
				return failed(runErr)
			}
			if f == "json" {
				if err := writeJSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
			} else if err := writeBurnTable(cmd.OutOrStdout(), res); err != nil {
				return err
			}
			if runErr != nil {
				return failed(runErr)
			}
			for _, g := range res.GPUs {
				if g.Mismatches > 0 {
					return failed(fmt.Errorf("silent data corruption: %d mismatched elements in %d of %d checks on gpu %d (%s)",
						g.Mismatches, g.MismatchedChecks, g.Checks, g.Index, g.PCIBusID))
				}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&gpus, "gpus", "all", "GPUs to burn: all, or indexes such as 0,1 (PCI bus order, as nvidia-smi)")
	fl.DurationVar(&duration, "duration", 0, "how long to burn, e.g. 30s or 10m (required; at most 24h)")
	fl.StringVar(&dtype, "dtype", "bf16", "arithmetic: bf16, fp16, tf32, fp32 or fp64")
	fl.IntVar(&size, "size", burn.DefaultN, "matrix size N of the N×N×N products (multiple of 8)")
	fl.Float64Var(&ceiling, "temp-ceiling", 0, "stop when any GPU reaches this temperature in °C (0: no ceiling)")
	fl.Uint64Var(&seed, "seed", 0, "seed of the random inputs (0: from the clock)")
	addFormatFlag(cmd, &f)
	return cmd
}

// parseGPUList reads --gpus: "all" (or empty) for every GPU, else a comma
// list of indexes.
func parseGPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "all") {
		return nil, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--gpus %q: %q is not a GPU index (use all or a list such as 0,1)", s, p)
		}
		if seen[n] {
			return nil, fmt.Errorf("--gpus %q: gpu %d is listed twice", s, n)
		}
		seen[n] = true
		out = append(out, n)
	}
	return out, nil
}

// nvmlTelemetry opens NVML and adapts its samples to burn's telemetry.
func nvmlTelemetry() (burn.TelemetryFunc, func(), error) {
	src, err := gpu.OpenNVML()
	if err != nil {
		return nil, nil, err
	}
	tel := func(ctx context.Context, i int) (burn.TelemetrySample, error) {
		s, err := src.Sample(ctx, i)
		if err != nil {
			return burn.TelemetrySample{}, err
		}
		return burn.TelemetrySample{Time: s.Time, TempC: s.TempC, PowerW: s.PowerW, SMClockMHz: s.SMClockMHz,
			MemClockMHz: s.MemClockMHz, ClockEventReasons: s.ClockEventReasons, HasClockEventReasons: s.HasClockEventReasons}, nil
	}
	return tel, func() { _ = src.Close() }, nil
}

func writeBurnTable(w io.Writer, r burn.Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tPCI\tNAME\tTFLOP/S\tBATCH MIN/MED/MAX\tPRODUCTS\tCHECKS\tMISMATCHES\tERROR")
	for _, g := range r.GPUs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.1f\t%.0f/%.0f/%.0f\t%d\t%d\t%d\t%s\n", g.Index, g.PCIBusID, g.Name, g.TFLOPS,
			g.BatchTFLOPS.Min, g.BatchTFLOPS.Median, g.BatchTFLOPS.Max, g.Products, g.Checks, g.Mismatches, g.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s %d³, stopped by %s after %.1f s", r.DType, r.N, r.StopReason, r.ElapsedSeconds)
	if c := r.Crossing; c != nil {
		fmt.Fprintf(w, " (gpu %d read %.0f °C ≥ %.0f °C; stopped %.2f s after that sample)", c.GPU, c.TempC, r.TempCeilingC, c.StopLatencySeconds)
	}
	fmt.Fprintln(w)
	if !r.TelemetryEnabled {
		_, err := fmt.Fprintln(w, "telemetry: off")
		return err
	}
	maxT, maxP := math.Inf(-1), math.Inf(-1)
	for _, s := range r.Telemetry {
		if !math.IsNaN(s.TempC) {
			maxT = max(maxT, s.TempC)
		}
		if !math.IsNaN(s.PowerW) {
			maxP = max(maxP, s.PowerW)
		}
	}
	_, err := fmt.Fprintf(w, "telemetry: %d samples (%d failed), peak %.0f °C, peak %.0f W\n", len(r.Telemetry), r.TelemetryErrors, maxT, maxP)
	return err
}
