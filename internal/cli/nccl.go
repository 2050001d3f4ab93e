package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/gputools/collbench"
	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
)

func newNCCLCmd() *cobra.Command {
	var (
		ops        string
		dtype      string
		minBytes   string
		maxBytes   string
		step       int
		warmup     int
		iters      int
		gpus       string
		rank       int
		nranks     int
		rendezvous string
		gpu        int
		rvTimeout  time.Duration
		delayRank  int
		delay      time.Duration
		f          format
	)
	cmd := &cobra.Command{
		Use:   "nccl",
		Short: "Measure NCCL collective bandwidth, checking every result",
		Long: `Measure NCCL collective bandwidth the way nccl-tests does, through
libnccl.so.2: all-reduce (sum), all-gather, reduce-scatter (sum),
broadcast (root 0) and all-to-all (grouped send/receive), in bf16, fp16 or
fp32, over a sweep of sizes (default 1 MiB to 256 MiB, doubling).

Each size runs warm-up iterations, then timed iterations between CUDA
events on every rank's stream; the time is the slowest rank's mean per
iteration, algbw = size/time and busbw = algbw × 2(n−1)/n for all-reduce,
(n−1)/n for all-gather, reduce-scatter and all-to-all, 1 for broadcast
(GB/s = 10^9 B/s). Sizes are counted as nccl-tests counts them.

Every result is checked: inputs are small integers drawn on the GPU from
(rank, index), so sums are exact; before and after the timed loop every
output element is compared on the host. Any wrong element fails the
command (exit 1).

One process can drive all local GPUs (--gpus), or each rank can run in its
own process: give every process --rank, --nranks and the same
--rendezvous HOST:PORT; rank 0 listens there, hands out the NCCL id and
prints the table. NCCL is found without LD_LIBRARY_PATH (the loader, the
CUDA folders, PyTorch's nvidia/nccl/lib); GPUCHAOS_NCCL names the file.
NVLink SHARP (NVLS) is always off: NCCL_NVLS_ENABLE=0.`,
		Example: `  # one process, every GPU, all-reduce from 1 MiB to 256 MiB
  gpuchaos nccl
  gpuchaos nccl --gpus 0,1 --op all --dtype fp32 --iters 50 --format json

  # one process per rank (two shells, or two hosts)
  gpuchaos nccl --rank 0 --nranks 2 --rendezvous 127.0.0.1:29600 --gpu 0
  gpuchaos nccl --rank 1 --nranks 2 --rendezvous 127.0.0.1:29600 --gpu 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			opList, err := collbench.ParseOps(ops)
			if err != nil {
				return fmt.Errorf("--op: %w", err)
			}
			dt, err := collbench.ParseDType(dtype)
			if err != nil {
				return fmt.Errorf("--dtype: %w", err)
			}
			lo, err := parseByteSize("--min-bytes", minBytes)
			if err != nil {
				return err
			}
			hi, err := parseByteSize("--max-bytes", maxBytes)
			if err != nil {
				return err
			}
			switch {
			case hi < lo:
				return fmt.Errorf("--max-bytes %s is below --min-bytes %s", maxBytes, minBytes)
			case hi > collbench.MaxBytes:
				return fmt.Errorf("--max-bytes %s: at most 16GiB", maxBytes)
			case step < 2:
				return fmt.Errorf("--step-factor %d: must be at least 2", step)
			case warmup < 0:
				return fmt.Errorf("--warmup %d: must not be negative", warmup)
			case iters < 1:
				return fmt.Errorf("--iters %d: must be at least 1", iters)
			case rvTimeout <= 0:
				return fmt.Errorf("--rendezvous-timeout %s: must be above 0", rvTimeout)
			case delay < 0:
				return fmt.Errorf("--delay %s: must not be negative", delay)
			}
			opts := collbench.Options{Ops: opList, DType: dt, MinBytes: lo, MaxBytes: hi, StepFactor: step,
				Warmup: warmup, Iters: iters, RendezvousTimeout: rvTimeout}
			// Explicit zero warm-up must stay zero, not become the default.
			if warmup == 0 {
				opts.Warmup = -1
			}
			multi := fl.Changed("rank") || fl.Changed("nranks") || fl.Changed("rendezvous")
			if multi {
				if fl.Changed("gpus") {
					return errors.New("--gpus is for one process driving several GPUs; with --rank use --gpu")
				}
				switch {
				case !fl.Changed("nranks") || nranks < 2:
					return fmt.Errorf("--nranks %d: one process per rank needs --nranks of at least 2", nranks)
				case !fl.Changed("rank") || rank < 0 || rank >= nranks:
					return fmt.Errorf("--rank %d: must be given, from 0 to %d", rank, nranks-1)
				case rendezvous == "":
					return errors.New("--rendezvous HOST:PORT (rank 0's address) is required with --rank")
				}
				if _, port, err := net.SplitHostPort(rendezvous); err != nil || port == "" {
					return fmt.Errorf("--rendezvous %q: want HOST:PORT", rendezvous)
				}
				opts.NRanks, opts.Rank, opts.Rendezvous = nranks, rank, rendezvous
				if fl.Changed("gpu") {
					if gpu < 0 {
						return fmt.Errorf("--gpu %d: must not be negative", gpu)
					}
					opts.GPUs = []int{gpu}
				}
			} else {
				if fl.Changed("gpu") {
					return errors.New("--gpu is for one process per rank (with --rank); use --gpus")
				}
				if opts.GPUs, err = parseGPUList(gpus); err != nil {
					return err
				}
				if len(opts.GPUs) == 1 {
					return fmt.Errorf("--gpus %q: a collective needs at least 2 GPUs", gpus)
				}
			}
			if fl.Changed("delay") || fl.Changed("delay-rank") {
				if delay <= 0 || delayRank < 0 {
					return fmt.Errorf("--delay-rank %d --delay %s: both are needed, the rank from 0 and the delay above 0", delayRank, delay)
				}
				opts.Delay, opts.DelayRank = delay, delayRank
			}
			// The driver first, so a machine without a GPU hears exactly that.
			if _, err := cuda.Open(); err != nil {
				return failed(fmt.Errorf("nccl: %w", err))
			}
			errw := cmd.ErrOrStderr()
			opts.Progress = func(p collbench.Progress) {
				fmt.Fprintf(errw, "gpuchaos nccl: rank %d %s %s: %.1f µs, %d wrong\n", p.Rank, p.Op, formatBytes(p.Bytes), p.Seconds*1e6, p.Wrong)
			}
			res, runErr := collbench.Run(cmd.Context(), opts)
			if runErr != nil && len(res.Results) == 0 {
				return failed(runErr)
			}
			if multi && rank != 0 {
				fmt.Fprintf(errw, "gpuchaos nccl: rank %d done; rank 0 prints the results\n", rank)
			} else if f == "json" {
				if err := writeJSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
			} else if err := writeNCCLTable(cmd.OutOrStdout(), res); err != nil {
				return err
			}
			if runErr != nil {
				return failed(runErr)
			}
			if n := res.WrongTotal(); n > 0 {
				return failed(fmt.Errorf("%d wrong output elements: the collectives corrupted data", n))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&ops, "op", "all_reduce", "operations: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all (comma list) or all")
	fl.StringVar(&dtype, "dtype", "bf16", "element type: bf16, fp16 or fp32")
	fl.StringVar(&minBytes, "min-bytes", "1MiB", "smallest size (bytes, or with KiB, MiB, GiB)")
	fl.StringVar(&maxBytes, "max-bytes", "256MiB", "largest size; the headline figure is the largest")
	fl.IntVar(&step, "step-factor", collbench.DefaultStepFactor, "multiply the size by this from one step to the next")
	fl.IntVar(&warmup, "warmup", collbench.DefaultWarmup, "untimed iterations per size")
	fl.IntVar(&iters, "iters", collbench.DefaultIters, "timed iterations per size")
	fl.StringVar(&gpus, "gpus", "all", "one process: GPUs to use as ranks, all or indexes such as 0,1 (PCI bus order, as nvidia-smi)")
	fl.IntVar(&rank, "rank", 0, "one process per rank: this process's rank")
	fl.IntVar(&nranks, "nranks", 0, "one process per rank: the number of ranks")
	fl.StringVar(&rendezvous, "rendezvous", "", "one process per rank: HOST:PORT where rank 0 listens")
	fl.IntVar(&gpu, "gpu", 0, "one process per rank: this rank's GPU index (default: rank mod the GPU count)")
	fl.DurationVar(&rvTimeout, "rendezvous-timeout", collbench.DefaultRendezvousTimeout, "how long rank 0 waits for every rank, and a rank for rank 0")
	fl.IntVar(&delayRank, "delay-rank", -1, "straggler injection: the rank that sleeps before each timed collective")
	fl.DurationVar(&delay, "delay", 0, "straggler injection: how long that rank sleeps on the host")
	_ = fl.MarkHidden("delay-rank")
	_ = fl.MarkHidden("delay")
	addFormatFlag(cmd, &f)
	return cmd
}

// parseByteSize reads a size such as 1048576, 64KiB, 1MiB, 2GiB (or K,
// M, G, KB, MB, GB as binary units too, as nccl-tests reads them).
func parseByteSize(flag, s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := uint64(1)
	upper := strings.ToUpper(t)
	for _, u := range []struct {
		suffix string
		m      uint64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(upper, u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.m
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n == 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("%s %q: want a size above 0 such as 1048576, 64KiB or 1MiB", flag, s)
	}
	return n * mult, nil
}

// formatBytes writes a size in the largest binary unit that divides it.
func formatBytes(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func writeNCCLTable(w io.Writer, r collbench.Result) error {
	fmt.Fprintf(w, "NCCL %s (%s), CUDA driver %d.%d, %d ranks, %s, %d warm-up + %d timed iterations\n",
		r.NCCLVersion, r.NCCLLibrary, r.CUDADriverVersion/1000, r.CUDADriverVersion%1000/10, r.NRanks, r.Mode, r.Warmup, r.Iters)
	for _, k := range r.Ranks {
		fmt.Fprintf(w, "  rank %d: %s gpu %d %s %s\n", k.Rank, k.Host, k.GPU, k.PCIBusID, k.Name)
	}
	if r.DelayRank != nil {
		fmt.Fprintf(w, "  straggler: rank %d sleeps %s before each timed collective\n", *r.DelayRank, time.Duration(r.DelaySeconds*float64(time.Second)))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OP\tSIZE (B)\tCOUNT\tTYPE\tTIME (µs)\tALGBW (GB/s)\tBUSBW (GB/s)\tWRONG\t")
	for _, s := range r.Results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.1f\t%.2f\t%.2f\t%d\t\n", s.Op, s.Bytes, s.Count, s.DType, s.TimeUS, s.AlgBW, s.BusBW, s.Wrong)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	return nil
}
