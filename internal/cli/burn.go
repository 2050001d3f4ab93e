package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/gputools/burn"
	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu/nvmlgpu"
)

func newBurnCmd() *cobra.Command {
	var (
		gpus     string
		duration time.Duration
		dtype    string
		size     int
		ceiling  float64
		seed     uint64
		duty     float64
		readyFD  int
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

With --duty below 1 each GPU idles after every batch of products for as
long as the batch took times 1/duty − 1, so it burns that share of the wall
time and utilisation counters (DCGM_FI_DEV_GPU_UTIL) read about the duty;
while a batch runs it still uses every SM. TFLOP/s is the rate while
burning, idle time excluded.

GPUs are numbered in PCI bus order, as nvidia-smi numbers them. Needs the
NVIDIA driver (libcuda.so.1) and cuBLAS (libcublas.so.13 or .12, found
through the loader, LD_LIBRARY_PATH, CUDA_HOME or /usr/local/cuda).`,
		Example: `  gpuchaos burn --duration 30s
  gpuchaos burn --gpus 0,1 --duration 10m --dtype tf32 --temp-ceiling 85
  gpuchaos burn --gpus 0 --duration 5m --duty 0.5 --temp-ceiling 85
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
			if !(duty > 0 && duty <= 1) {
				return fmt.Errorf("--duty %g: must be above 0 and at most 1", duty)
			}
			ready, err := openReadyPipe(readyFD)
			if err != nil {
				return err
			}
			defer ready.close()
			opts := burn.Options{GPUs: sel, Duration: duration, DType: dt, N: size, TempCeilingC: ceiling, Seed: seed, Duty: duty}
			// The driver first, so a machine without a GPU hears exactly that.
			drv, err := cuda.Open()
			if err != nil {
				return failed(fmt.Errorf("burn: %w", err))
			}
			if ready != nil {
				want := len(sel)
				if want == 0 {
					if want, err = drv.DeviceCount(); err != nil {
						return failed(fmt.Errorf("burn: count GPUs: %w", err))
					}
				}
				opts.Progress = readyAfterFirstBatches(want, func() { ready.signal(cmd.ErrOrStderr()) })
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
	fl.Float64Var(&duty, "duty", 1, "share of the wall time each GPU burns, above 0 and at most 1 (1: continuously)")
	addReadyFDFlag(cmd, &readyFD)
	addFormatFlag(cmd, &f)
	return cmd
}

// readyAfterFirstBatches returns a burn progress callback that calls
// ready once, when n distinct GPUs have each finished a batch: only then
// is every selected GPU really burning.
func readyAfterFirstBatches(n int, ready func()) func(burn.Progress) {
	var (
		mu   sync.Mutex
		seen = map[int]bool{}
		done bool
	)
	return func(p burn.Progress) {
		mu.Lock()
		seen[p.GPU] = true
		fire := !done && len(seen) >= n
		done = done || fire
		mu.Unlock()
		if fire {
			ready()
		}
	}
}

// readyPipe is the write end of a pipe a parent process passed with the
// hidden --ready-fd flag (gpuchaos starts burns and exhaustions as child
// processes for the engine's faults). The command writes "ready\n" to it
// and closes it once the resource is really taken; when the command fails
// first, the pipe is closed unwritten and the parent reads end of file.
// A nil *readyPipe (no flag) does nothing.
type readyPipe struct {
	once sync.Once
	f    *os.File
}

// addReadyFDFlag adds the hidden --ready-fd flag; -1, its default, is off.
func addReadyFDFlag(cmd *cobra.Command, fd *int) {
	cmd.Flags().IntVar(fd, "ready-fd", -1, "inherited file descriptor to write ready to once the resource is taken")
	_ = cmd.Flags().MarkHidden("ready-fd")
}

// openReadyPipe adopts the descriptor of --ready-fd; -1 gives nil.
func openReadyPipe(fd int) (*readyPipe, error) {
	if fd == -1 {
		return nil, nil
	}
	if fd < 3 {
		return nil, fmt.Errorf("--ready-fd %d: must be 3 or more (0 to 2 are stdin, stdout and stderr)", fd)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil, fmt.Errorf("--ready-fd %d: not an open file descriptor: %w", fd, err)
	}
	// Nothing this command starts should hold the pipe open after it.
	unix.CloseOnExec(fd)
	return &readyPipe{f: os.NewFile(uintptr(fd), "ready-fd")}, nil
}

// signal writes the ready line and closes the pipe, once. A parent that
// has gone away is not an error of the command: it is reported on w, and
// the command runs on to its own duration.
func (r *readyPipe) signal(w io.Writer) {
	if r == nil {
		return
	}
	r.once.Do(func() {
		_, err := io.WriteString(r.f, "ready\n")
		err = errors.Join(err, r.f.Close())
		if err != nil {
			fmt.Fprintf(w, "gpuchaos: --ready-fd: %v\n", err)
		}
	})
}

// close closes the pipe unwritten, unless signal already ran.
func (r *readyPipe) close() {
	if r == nil {
		return
	}
	r.once.Do(func() { _ = r.f.Close() })
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
	src, err := nvmlgpu.Open()
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
	fmt.Fprintf(w, "%s %d³", r.DType, r.N)
	if r.Duty > 0 && r.Duty < 1 {
		fmt.Fprintf(w, " at duty %g", r.Duty)
	}
	fmt.Fprintf(w, ", stopped by %s after %.1f s", r.StopReason, r.ElapsedSeconds)
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
