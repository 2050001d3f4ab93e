package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/gputools/exhaust"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
)

func newExhaustCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "exhaust",
		Short: "Take a GPU's memory or PCIe bandwidth away from its workloads",
		Long: `Exhaust a shared GPU resource for a fixed duration, as a noisy neighbour
would: 'vram' holds a fraction of the free device memory, 'pcie' floods the
host↔device link with copies from pinned memory and reports the bandwidth.

GPUs are numbered in PCI bus order, as nvidia-smi numbers them. Needs the
NVIDIA driver (libcuda.so.1). Every exhaustion has a duration.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newExhaustVRAMCmd(), newExhaustPCIeCmd())
	return cmd
}

// checkExhaustDuration enforces the required, bounded --duration.
func checkExhaustDuration(cmd *cobra.Command, d time.Duration) error {
	if !cmd.Flags().Changed("duration") {
		return fmt.Errorf("--duration is required (at most %s)", exhaust.MaxDuration)
	}
	if d <= 0 || d > exhaust.MaxDuration {
		return fmt.Errorf("--duration %s: must be above 0 and at most %s", d, exhaust.MaxDuration)
	}
	return nil
}

// openExhaustDriver fails the run with one line when there is no GPU driver, so
// that a machine without a GPU hears exactly that.
func openExhaustDriver(what string) error {
	if _, err := cuda.Open(); err != nil {
		return failed(fmt.Errorf("%s: %w", what, err))
	}
	return nil
}

// vramReport is the JSON of exhaust vram.
type vramReport struct {
	exhaust.HoldInfo
	HeldSeconds float64 `json:"held_seconds"`
	StopReason  string  `json:"stop_reason"`
}

func newExhaustVRAMCmd() *cobra.Command {
	var (
		gpuIdx   int
		fraction float64
		duration time.Duration
		readyFD  int
		f        format
	)
	cmd := &cobra.Command{
		Use:   "vram",
		Short: "Hold a fraction of a GPU's free memory for a duration",
		Long: `Allocate --fraction of the GPU's free device memory (as cuMemGetInfo
reports it) in 1 GiB chunks, write every byte so it is really backed, hold
it for --duration (or until interrupted) and free it.`,
		Example: `  gpuchaos exhaust vram --gpu 0 --fraction 0.9 --duration 30s`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkExhaustDuration(cmd, duration); err != nil {
				return err
			}
			if gpuIdx < 0 {
				return fmt.Errorf("--gpu %d: must not be negative", gpuIdx)
			}
			if !(fraction > 0 && fraction <= exhaust.MaxFraction) {
				return fmt.Errorf("--fraction %g: must be above 0 and at most %g", fraction, exhaust.MaxFraction)
			}
			ready, err := openReadyPipe(readyFD)
			if err != nil {
				return err
			}
			defer ready.close()
			if err := openExhaustDriver("exhaust vram"); err != nil {
				return err
			}
			ctx := cmd.Context()
			h, err := exhaust.HoldVRAM(ctx, gpuIdx, fraction)
			if err != nil {
				return failed(err)
			}
			ready.signal(cmd.ErrOrStderr())
			info := h.Info()
			if f == "table" {
				fmt.Fprintf(cmd.OutOrStdout(), "gpu %d (%s): holding %s in %d chunks (%.0f%% of %s free; free now %s of %s)\n",
					info.GPU, info.PCIBusID, exhaustGiB(info.HeldBytes), info.Chunks, 100*info.Fraction,
					exhaustGiB(info.FreeBefore), exhaustGiB(info.FreeAfter), exhaustGiB(info.TotalBytes))
			}
			t0 := time.Now()
			timer := time.NewTimer(duration)
			defer timer.Stop()
			reason := "duration"
			select {
			case <-timer.C:
			case <-ctx.Done():
				reason = "interrupted"
			case <-h.Done():
				reason = "released"
			}
			relErr := h.Release()
			rep := vramReport{HoldInfo: info, HeldSeconds: time.Since(t0).Seconds(), StopReason: reason}
			if f == "json" {
				if err := writeJSON(cmd.OutOrStdout(), rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "released %s after %.1f s (%s)\n", exhaustGiB(info.HeldBytes), rep.HeldSeconds, reason)
			}
			if relErr != nil {
				return failed(fmt.Errorf("exhaust vram: free memory: %w", relErr))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&gpuIdx, "gpu", 0, "GPU index (PCI bus order, as nvidia-smi)")
	fl.Float64Var(&fraction, "fraction", 0.9, fmt.Sprintf("share of the free memory to hold, above 0 and at most %g", exhaust.MaxFraction))
	fl.DurationVar(&duration, "duration", 0, "how long to hold, e.g. 30s (required; at most 24h)")
	addReadyFDFlag(cmd, &readyFD)
	addFormatFlag(cmd, &f)
	return cmd
}

func newExhaustPCIeCmd() *cobra.Command {
	var (
		gpuIdx    int
		duration  time.Duration
		direction string
		sizeMiB   uint64
		rate      string
		readyFD   int
		f         format
	)
	cmd := &cobra.Command{
		Use:   "pcie",
		Short: "Flood a GPU's PCIe link with host↔device copies and measure it",
		Long: `Copy --size-mib MiB at a time between pinned host memory and the GPU for
--duration, host to device (h2d), device to host (d2h) or both at once on
two streams, and report the GB/s each direction reached, timed with CUDA
events.

--rate caps the bytes moved per second, both directions together: each
copy may start only once the bytes queued so far fit the rate since the
start, so the cap holds on average over any few copies while each copy
runs at link speed. Without --size-mib a paced copy holds a hundredth of a
second of the rate (1 to 256 MiB). The report gives each direction's speed
while copying and the average over the run.`,
		Example: `  gpuchaos exhaust pcie --gpu 0 --duration 10s
  gpuchaos exhaust pcie --gpu 0 --duration 5m --rate 25G
  gpuchaos exhaust pcie --gpu 1 --duration 1m --direction h2d --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkExhaustDuration(cmd, duration); err != nil {
				return err
			}
			dir, err := exhaust.ParseDirection(direction)
			if err != nil {
				return fmt.Errorf("--direction: %w", err)
			}
			if gpuIdx < 0 {
				return fmt.Errorf("--gpu %d: must not be negative", gpuIdx)
			}
			if sizeMiB < exhaust.MinStormBytes>>20 || sizeMiB > exhaust.MaxStormBytes>>20 {
				return fmt.Errorf("--size-mib %d: must be between %d and %d", sizeMiB, exhaust.MinStormBytes>>20, exhaust.MaxStormBytes>>20)
			}
			bps, err := parseRate(rate)
			if err != nil {
				return err
			}
			ready, err := openReadyPipe(readyFD)
			if err != nil {
				return err
			}
			defer ready.close()
			if err := openExhaustDriver("exhaust pcie"); err != nil {
				return err
			}
			opts := exhaust.Options{GPU: gpuIdx, Duration: duration, Direction: dir, Rate: bps,
				Started: func() { ready.signal(cmd.ErrOrStderr()) }}
			if cmd.Flags().Changed("size-mib") || bps == 0 {
				opts.Bytes = sizeMiB << 20
			}
			res, runErr := exhaust.PCIeStorm(cmd.Context(), opts)
			if runErr != nil && res.H2D == nil && res.D2H == nil {
				return failed(runErr)
			}
			if f == "json" {
				err = writeJSON(cmd.OutOrStdout(), res)
			} else {
				err = writeStorm(cmd.OutOrStdout(), res)
			}
			if err != nil {
				return err
			}
			if runErr != nil && !errors.Is(runErr, cmd.Context().Err()) {
				return failed(runErr)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&gpuIdx, "gpu", 0, "GPU index (PCI bus order, as nvidia-smi)")
	fl.DurationVar(&duration, "duration", 0, "how long to copy, e.g. 10s (required; at most 24h)")
	fl.StringVar(&direction, "direction", string(exhaust.Both), "h2d, d2h or both (at once)")
	fl.Uint64Var(&sizeMiB, "size-mib", exhaust.DefaultStormBytes>>20, "size of one copy in MiB (with --rate: a hundredth of a second of the rate)")
	fl.StringVar(&rate, "rate", "0", "cap on bytes per second, both directions together, such as 25G or 512M (0: as fast as the link allows)")
	addReadyFDFlag(cmd, &readyFD)
	addFormatFlag(cmd, &f)
	return cmd
}

// parseRate reads --rate: a byte count per second in the catalogue's
// notation (25G is 25·10⁹, 512Mi is 512·2²⁰), 0 for no cap.
func parseRate(s string) (uint64, error) {
	n, err := catalog.ParseBytes(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--rate %q: not a byte rate such as 25G or 512M", s)
	}
	if n > exhaust.MaxRate {
		return 0, fmt.Errorf("--rate %q: must be at most %d bytes/s", s, uint64(exhaust.MaxRate))
	}
	return uint64(n), nil
}

func writeStorm(w io.Writer, r exhaust.StormResult) error {
	fmt.Fprintf(w, "gpu %d (%s): %s copies of %d MiB for %.1f s, %.2f GB/s on average", r.GPU, r.PCIBusID, r.Direction, r.CopyBytes>>20, r.ElapsedSeconds, r.AverageGBps)
	if r.RateLimit > 0 {
		fmt.Fprintf(w, " (capped at %.2f GB/s)", float64(r.RateLimit)/1e9)
	}
	fmt.Fprintln(w)
	for _, d := range []struct {
		name string
		r    *exhaust.Rate
	}{{"h2d", r.H2D}, {"d2h", r.D2H}} {
		if d.r == nil {
			continue
		}
		if _, err := fmt.Fprintf(w, "%s: %.2f GB/s while copying (%d copies, %s in %.2f s of GPU time)\n",
			d.name, d.r.GBps, d.r.Copies, exhaustGiB(d.r.Bytes), d.r.GPUSeconds); err != nil {
			return err
		}
	}
	return nil
}

// exhaustGiB formats bytes in GiB with one decimal.
func exhaustGiB(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }
