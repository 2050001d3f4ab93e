package collbench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
	"github.com/gpuchaos/gpuchaos/internal/node/nccl"
)

//go:embed kernels.ptx
var kernelsPTX []byte

// Defaults and limits of Options.
const (
	DefaultMinBytes          = 1 << 20
	DefaultMaxBytes          = 256 << 20
	DefaultStepFactor        = 2
	DefaultWarmup            = 5
	DefaultIters             = 20
	DefaultRendezvousTimeout = 60 * time.Second
	// MaxBytes bounds a size: a rank holds two buffers of it on its GPU
	// and one in host memory for the checks.
	MaxBytes = 16 << 30
)

// Options configure a benchmark. The zero value of each field means its
// documented default.
type Options struct {
	// Ops are the operations, each swept over every size (default
	// all-reduce).
	Ops []Op
	// DType is the element type (default bf16).
	DType DType
	// MinBytes, MaxBytes and StepFactor give the sizes: MinBytes,
	// ·StepFactor, … up to MaxBytes (defaults 1 MiB, 256 MiB, 2).
	MinBytes, MaxBytes uint64
	StepFactor         int
	// Warmup and Iters are the untimed and timed iterations per size
	// (defaults 5 and 20; a negative Warmup means none).
	Warmup, Iters int

	// GPUs are GPU indexes in PCI bus order (nvidia-smi's). In one-process
	// mode every listed GPU is a rank (nil: every GPU). With NRanks set,
	// at most one: this rank's GPU (nil: rank mod the GPU count).
	GPUs []int

	// NRanks, when above 0, selects one process per rank: this process is
	// rank Rank of NRanks, and rank 0 serves the rendezvous at Rendezvous
	// (HOST:PORT) that the others join.
	NRanks, Rank int
	Rendezvous   string
	// RendezvousTimeout bounds the wait for every rank to arrive, and for
	// the reports at the end (default 60 s).
	RendezvousTimeout time.Duration

	// Delay, when above 0, makes rank DelayRank sleep that long on the
	// host before it issues each timed collective: a straggler that a
	// tracer sees enter late.
	Delay     time.Duration
	DelayRank int

	// Library lists NCCL files to try (nil: nccl.Candidates of this
	// environment).
	Library []string
	// Progress, if set, is called after each operation and size with this
	// process's first rank's measurement, from that rank's goroutine.
	Progress func(Progress)
}

// Progress is one rank's measurement of one operation at one size.
type Progress struct {
	Rank    int
	Op      Op
	Bytes   uint64
	Seconds float64
	Wrong   uint64
}

// MultiProcess reports whether the options select one process per rank.
func (o Options) MultiProcess() bool { return o.NRanks > 0 }

func (o Options) withDefaults() (Options, error) {
	if len(o.Ops) == 0 {
		o.Ops = []Op{AllReduce}
	}
	for _, op := range o.Ops {
		if BusFactor(op, 2) == 0 {
			return o, fmt.Errorf("unknown operation %q", op)
		}
	}
	if o.DType == "" {
		o.DType = BF16
	}
	if _, err := ParseDType(string(o.DType)); err != nil {
		return o, err
	}
	if o.MinBytes == 0 {
		o.MinBytes = DefaultMinBytes
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = max(DefaultMaxBytes, o.MinBytes)
	}
	if o.StepFactor == 0 {
		o.StepFactor = DefaultStepFactor
	}
	switch {
	case o.Warmup == 0:
		o.Warmup = DefaultWarmup
	case o.Warmup < 0:
		o.Warmup = 0
	}
	if o.Iters == 0 {
		o.Iters = DefaultIters
	}
	if o.RendezvousTimeout == 0 {
		o.RendezvousTimeout = DefaultRendezvousTimeout
	}
	switch {
	case o.MaxBytes < o.MinBytes:
		return o, fmt.Errorf("max bytes %d is below min bytes %d", o.MaxBytes, o.MinBytes)
	case o.MaxBytes > MaxBytes:
		return o, fmt.Errorf("max bytes %d is over the %d-byte limit", o.MaxBytes, uint64(MaxBytes))
	case o.StepFactor < 2:
		return o, fmt.Errorf("step factor %d: must be at least 2", o.StepFactor)
	case o.Iters < 1:
		return o, fmt.Errorf("timed iterations %d: must be at least 1", o.Iters)
	case o.Delay < 0:
		return o, fmt.Errorf("delay %s: must not be negative", o.Delay)
	case o.RendezvousTimeout < 0:
		return o, fmt.Errorf("rendezvous timeout %s: must be above 0", o.RendezvousTimeout)
	}
	if o.MultiProcess() {
		switch {
		case o.NRanks < 2:
			return o, fmt.Errorf("nranks %d: one process per rank needs at least 2", o.NRanks)
		case o.Rank < 0 || o.Rank >= o.NRanks:
			return o, fmt.Errorf("rank %d is out of range: 0 to %d", o.Rank, o.NRanks-1)
		case o.Rendezvous == "":
			return o, errors.New("one process per rank needs a rendezvous address (HOST:PORT of rank 0)")
		case len(o.GPUs) > 1:
			return o, fmt.Errorf("one process per rank drives one GPU, not %d", len(o.GPUs))
		}
	}
	return o, nil
}

// Result is what a benchmark measured, as rank 0 (or the one process)
// reports it.
type Result struct {
	NCCLVersion       string       `json:"nccl_version"`
	NCCLVersionCode   int          `json:"nccl_version_code"`
	NCCLLibrary       string       `json:"nccl_library"`
	CUDADriverVersion int          `json:"cuda_driver_version"`
	Mode              string       `json:"mode"`
	NRanks            int          `json:"nranks"`
	DType             DType        `json:"dtype"`
	Warmup            int          `json:"warmup"`
	Iters             int          `json:"iters"`
	DelayRank         *int         `json:"delay_rank,omitempty"`
	DelaySeconds      float64      `json:"delay_seconds,omitempty"`
	Ranks             []RankInfo   `json:"ranks"`
	Results           []SizeResult `json:"results"`
	// Errors are the ranks' errors, "rank N: …", if any failed.
	Errors []string `json:"errors,omitempty"`
}

// SizeResult is one operation at one size, over all ranks.
type SizeResult struct {
	Op    Op     `json:"op"`
	Bytes uint64 `json:"bytes"`
	Count uint64 `json:"count"`
	DType DType  `json:"dtype"`
	// TimeUS is the time of one iteration, the slowest rank's (µs).
	TimeUS float64 `json:"time_us"`
	// AlgBW and BusBW are in GB/s (10^9 B/s), from TimeUS.
	AlgBW float64 `json:"algbw_gbps"`
	BusBW float64 `json:"busbw_gbps"`
	// Wrong is the number of wrong output elements over all ranks and
	// both checks.
	Wrong      uint64    `json:"wrong"`
	RankTimeUS []float64 `json:"rank_time_us"`
	RankWrong  []uint64  `json:"rank_wrong"`
}

// WrongTotal is the number of wrong elements over the whole result.
func (r Result) WrongTotal() uint64 {
	var n uint64
	for _, s := range r.Results {
		n += s.Wrong
	}
	return n
}

// Modes of Result.Mode.
const (
	ModeSingleProcess = "single-process"
	ModeMultiProcess  = "multi-process"
)

// gpuInfo is a GPU in PCI bus order.
type gpuInfo = cuda.BusDevice

// Run benchmarks the collectives and returns rank 0's view: every rank's
// timings, the slowest rank's time per size, bandwidths and wrong-element
// counts. In one-process mode it drives every selected GPU, one goroutine
// locked to its OS thread per GPU. In multi-process mode it runs this
// process's rank; only rank 0's Result has every rank's timings (another
// rank's has its own alone, so that its wrong elements still count). A wrong element does
// not make an error: the caller checks Result.WrongTotal.
func Run(ctx context.Context, opts Options) (Result, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Result{}, fmt.Errorf("nccl benchmark options: %w", err)
	}
	// Before NCCL reads its environment at the first communicator.
	if err := nccl.DisableNVLS(); err != nil {
		return Result{}, err
	}
	drv, err := cuda.Open()
	if err != nil {
		return Result{}, fmt.Errorf("nccl benchmark: %w", err)
	}
	cands := o.Library
	if cands == nil {
		cands = nccl.Candidates(os.Getenv, filepath.Glob)
	}
	lib, err := nccl.Open(cands)
	if err != nil {
		return Result{}, fmt.Errorf("nccl benchmark: %w", err)
	}
	res := Result{NCCLLibrary: lib.Path, DType: o.DType, Warmup: o.Warmup, Iters: o.Iters}
	if res.NCCLVersionCode, err = lib.Version(); err != nil {
		return Result{}, err
	}
	res.NCCLVersion = nccl.VersionString(res.NCCLVersionCode)
	if res.CUDADriverVersion, err = drv.Version(); err != nil {
		return Result{}, err
	}
	if o.Delay > 0 {
		r := o.DelayRank
		res.DelayRank, res.DelaySeconds = &r, o.Delay.Seconds()
	}
	all, err := drv.DevicesByBus()
	if err != nil {
		return Result{}, fmt.Errorf("nccl benchmark: %w", err)
	}
	if o.MultiProcess() {
		return runMulti(ctx, o, lib, all, res)
	}
	return runSingle(ctx, o, lib, all, res)
}

func runSingle(ctx context.Context, o Options, lib *nccl.Library, all []gpuInfo, res Result) (Result, error) {
	gpus, err := cuda.Pick(all, o.GPUs)
	if err != nil {
		return Result{}, fmt.Errorf("nccl benchmark: %w", err)
	}
	n := len(gpus)
	res.Mode, res.NRanks = ModeSingleProcess, n
	host, _ := os.Hostname()
	for r, g := range gpus {
		res.Ranks = append(res.Ranks, rankInfo(r, host, g))
	}
	if err := checkSizes(o, n); err != nil {
		return Result{}, err
	}
	id, err := lib.GetUniqueID()
	if err != nil {
		return Result{}, fmt.Errorf("nccl benchmark: %w", err)
	}
	// A failed rank leaves the others waiting in collectives that cannot
	// complete: cancelling the shared context makes their watchdogs abort.
	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	reports := make([]RankReport, n)
	var wg sync.WaitGroup
	for r, g := range gpus {
		wg.Go(func() {
			w := &worker{o: o, lib: lib, gpu: g, rank: r, nranks: n, id: id, progress: r == 0}
			reports[r] = w.run(bctx)
			if reports[r].Error != "" {
				cancel(fmt.Errorf("rank %d failed", r))
			}
		})
	}
	wg.Wait()
	return assemble(res, o, n, reports)
}

func runMulti(ctx context.Context, o Options, lib *nccl.Library, all []gpuInfo, res Result) (Result, error) {
	want := o.GPUs
	if len(want) == 0 {
		want = []int{o.Rank % len(all)}
	}
	gpus, err := cuda.Pick(all, want)
	if err != nil {
		return Result{}, fmt.Errorf("nccl benchmark: %w", err)
	}
	g := gpus[0]
	res.Mode, res.NRanks = ModeMultiProcess, o.NRanks
	host, _ := os.Hostname()
	me := rankInfo(o.Rank, host, g)
	if err := checkSizes(o, o.NRanks); err != nil {
		return Result{}, err
	}
	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &worker{o: o, lib: lib, gpu: g, rank: o.Rank, nranks: o.NRanks, progress: true}

	if o.Rank != 0 {
		cl, id, err := Join(ctx, o.Rendezvous, o.NRanks, o.Rank, me, o.RendezvousTimeout)
		if err != nil {
			return Result{}, err
		}
		defer func() { _ = cl.Close() }()
		cl.Watch(func(err error) { cancel(err) })
		w.id = id
		rep := w.run(bctx)
		if err := cl.SendReport(ctx, rep); err != nil {
			return Result{}, err
		}
		res.Ranks = []RankInfo{me}
		return assemble(res, o, o.NRanks, onlyRank(o.NRanks, o.Rank, rep))
	}

	srv, err := Listen(o.Rendezvous, o.NRanks, o.RendezvousTimeout)
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = srv.Close() }()
	id, err := lib.GetUniqueID()
	if err != nil {
		return Result{}, fmt.Errorf("nccl benchmark: %w", err)
	}
	infos, err := srv.Admit(ctx, id)
	if err != nil {
		return Result{}, err
	}
	infos[0] = me
	res.Ranks = infos
	w.id = id

	gctx, stopGather := context.WithCancelCause(ctx)
	defer stopGather(nil)
	var (
		reports   []RankReport
		gatherErr error
		gwg       sync.WaitGroup
	)
	gwg.Go(func() {
		reports, gatherErr = srv.Gather(gctx, func(rank int, err error) {
			cancel(fmt.Errorf("rank %d failed: %w", rank, err))
		})
	})
	rep := w.run(bctx)
	if rep.Error != "" {
		srv.Abort("rank 0 failed: " + rep.Error)
	}
	// The others finish with rank 0; allow the timeout for stragglers.
	grace := time.AfterFunc(o.RendezvousTimeout, func() {
		stopGather(fmt.Errorf("no report within %s of rank 0's end", o.RendezvousTimeout))
	})
	gwg.Wait()
	grace.Stop()
	reports[0] = rep
	out, err := assemble(res, o, o.NRanks, reports)
	return out, errors.Join(err, gatherErr)
}

func onlyRank(n, rank int, rep RankReport) []RankReport {
	out := make([]RankReport, n)
	out[rank] = rep
	return out
}

func rankInfo(rank int, host string, g gpuInfo) RankInfo {
	return RankInfo{Rank: rank, Host: host, GPU: g.Index, CUDAOrdinal: g.Device.Ordinal, Name: g.Name, PCIBusID: g.PCI}
}

// checkSizes refuses a sweep whose smallest size gives a rank no element.
func checkSizes(o Options, n int) error {
	if Amplitude(o.DType, n) < 1 {
		return fmt.Errorf("%d ranks are too many for an exact %s sum check", n, o.DType)
	}
	for _, op := range o.Ops {
		if s := ShapeOf(op, n, o.DType, o.MinBytes); s.Count == 0 {
			return fmt.Errorf("min bytes %d is too small for %s over %d ranks of %s", o.MinBytes, op, n, o.DType)
		}
	}
	return nil
}

// assemble turns the ranks' reports into the table: per size, the slowest
// rank's time and the sum of wrong elements.
func assemble(res Result, o Options, n int, reports []RankReport) (Result, error) {
	var errs []error
	for r, rep := range reports {
		if rep.Error != "" {
			res.Errors = append(res.Errors, fmt.Sprintf("rank %d: %s", r, rep.Error))
			errs = append(errs, fmt.Errorf("rank %d: %s", r, rep.Error))
		}
	}
	for _, op := range o.Ops {
		for _, size := range Sizes(o.MinBytes, o.MaxBytes, o.StepFactor) {
			shape := ShapeOf(op, n, o.DType, size)
			sr := SizeResult{Op: op, Bytes: shape.Bytes, Count: shape.Count, DType: o.DType,
				RankTimeUS: make([]float64, n), RankWrong: make([]uint64, n)}
			seen := 0
			var slowest float64
			for r, rep := range reports {
				for _, m := range rep.Results {
					if m.Op == op && m.Bytes == shape.Bytes {
						sr.RankTimeUS[r] = m.Seconds * 1e6
						sr.RankWrong[r] = m.Wrong
						sr.Wrong += m.Wrong
						slowest = max(slowest, m.Seconds)
						seen++
					}
				}
			}
			if seen == 0 {
				continue
			}
			sr.TimeUS = slowest * 1e6
			sr.AlgBW, sr.BusBW = Bandwidths(op, n, shape.Bytes, slowest)
			res.Results = append(res.Results, sr)
		}
	}
	return res, errors.Join(errs...)
}

// worker runs one rank on its GPU.
type worker struct {
	o        Options
	lib      *nccl.Library
	gpu      gpuInfo
	rank     int
	nranks   int
	id       nccl.UniqueID
	progress bool
}

// bufs is what a rank holds.
type bufs struct {
	c          *cuda.Context
	comm       *nccl.Comm
	send, recv cuda.DevicePtr
	stream     cuda.Stream
	start, end cuda.Event
	fill       cuda.Function
	grid       cuda.Dim3
	host       []byte
}

var block = cuda.Dim3{X: 256, Y: 1, Z: 1}

// run sets the rank up, sweeps, and releases everything on every path. A
// failure is in the report's Error; the communicator is aborted then, and
// destroyed otherwise.
func (w *worker) run(ctx context.Context) (rep RankReport) {
	rep.Rank = w.rank
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cleanup []func() error
	var err error
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			if cerr := cleanup[i](); cerr != nil && err == nil {
				err = fmt.Errorf("release: %w", cerr)
			}
		}
		if err != nil {
			rep.Error = fmt.Sprintf("gpu %d (%s): %v", w.gpu.Index, w.gpu.PCI, err)
		}
	}()
	b, err := w.setup(&cleanup)
	if err != nil {
		return rep
	}
	comm, err := w.lib.InitRank(w.nranks, w.id, w.rank)
	if err != nil {
		err = fmt.Errorf("create the communicator: %w", err)
		return rep
	}
	b.comm = comm
	// The watchdog aborts the communicator when ctx ends (Ctrl-C, or
	// another rank failed) or NCCL reports an asynchronous error, which
	// frees this thread from a wait on the GPU that would never end.
	done := make(chan struct{})
	var wg sync.WaitGroup
	var asyncErr error
	wg.Go(func() { asyncErr = watchdog(ctx, done, comm) })
	stopWatch := sync.OnceFunc(func() { close(done); wg.Wait() })
	cleanup = append(cleanup, func() error {
		stopWatch()
		if err != nil || asyncErr != nil || ctx.Err() != nil {
			return comm.Abort()
		}
		return comm.Destroy()
	})
	rep.Results, err = w.sweep(ctx, b)
	stopWatch()
	if asyncErr != nil {
		err = errors.Join(err, asyncErr)
	}
	return rep
}

// watchdog polls the communicator until done is closed. It aborts the
// communicator, and returns why, when ctx ends first or NCCL reports an
// asynchronous error.
func watchdog(ctx context.Context, done <-chan struct{}, comm *nccl.Comm) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			_ = comm.Abort()
			return fmt.Errorf("aborted: %w", context.Cause(ctx))
		case <-t.C:
			if err := comm.AsyncError(); err != nil {
				_ = comm.Abort()
				return err
			}
		}
	}
}

func (w *worker) setup(cleanup *[]func() error) (*bufs, error) {
	c, err := w.gpu.Device.RetainPrimaryContext()
	if err != nil {
		return nil, err
	}
	*cleanup = append(*cleanup, c.Release)
	b := &bufs{c: c}
	var maxBuf uint64
	for _, op := range w.o.Ops {
		s := ShapeOf(op, w.nranks, w.o.DType, w.o.MaxBytes)
		maxBuf = max(maxBuf, s.SendBytes, s.RecvBytes)
	}
	free, _, err := c.MemInfo()
	if err != nil {
		return nil, err
	}
	if need := 2*maxBuf + 512<<20; need > free {
		return nil, fmt.Errorf("two %d MiB buffers and NCCL's own need about %d MiB of device memory, %d MiB free", maxBuf>>20, need>>20, free>>20)
	}
	mod, err := c.LoadModule(kernelsPTX)
	if err != nil {
		return nil, fmt.Errorf("load kernels: %w", err)
	}
	*cleanup = append(*cleanup, mod.Unload)
	name := map[DType]string{BF16: "gpuchaos_nccl_fill_bf16", FP16: "gpuchaos_nccl_fill_f16", FP32: "gpuchaos_nccl_fill_f32"}[w.o.DType]
	if b.fill, err = mod.Function(name); err != nil {
		return nil, err
	}
	for _, p := range []*cuda.DevicePtr{&b.send, &b.recv} {
		if *p, err = c.Alloc(maxBuf); err != nil {
			return nil, err
		}
		ptr := *p
		*cleanup = append(*cleanup, func() error { return c.Free(ptr) })
	}
	if b.stream, err = c.NewStream(); err != nil {
		return nil, err
	}
	*cleanup = append(*cleanup, b.stream.Destroy)
	for _, e := range []*cuda.Event{&b.start, &b.end} {
		if *e, err = c.NewEvent(); err != nil {
			return nil, err
		}
		*cleanup = append(*cleanup, e.Destroy)
	}
	sms, err := c.Device().Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	b.grid = cuda.Dim3{X: uint32(max(1, sms*4)), Y: 1, Z: 1}
	b.host = make([]byte, maxBuf)
	return b, nil
}

// issue enqueues one operation of the shape on the rank's stream.
func (w *worker) issue(b *bufs, op Op, s Shape) error {
	t := w.o.DType.ncclType()
	st := b.stream.Handle()
	send, recv := uintptr(b.send), uintptr(b.recv)
	switch op {
	case AllReduce:
		return b.comm.AllReduce(send, recv, s.Count, t, nccl.Sum, st)
	case AllGather:
		return b.comm.AllGather(send, recv, s.Block, t, st)
	case ReduceScatter:
		return b.comm.ReduceScatter(send, recv, s.Block, t, nccl.Sum, st)
	case Broadcast:
		return b.comm.Broadcast(send, recv, s.Count, t, 0, st)
	case AllToAll:
		// Block j of the send buffer goes to rank j; block i of the
		// receive buffer comes from rank i. One group, so that every
		// pair's send and receive are matched together.
		if err := w.lib.GroupStart(); err != nil {
			return err
		}
		blockBytes := uintptr(s.Block * w.o.DType.Size())
		var err error
		for peer := range w.nranks {
			off := uintptr(peer) * blockBytes
			if err = b.comm.Send(send+off, s.Block, t, peer, st); err != nil {
				break
			}
			if err = b.comm.Recv(recv+off, s.Block, t, peer, st); err != nil {
				break
			}
		}
		// The group is closed even after a failure, or this thread's
		// NCCL state stays inside it.
		return errors.Join(err, w.lib.GroupEnd())
	}
	return fmt.Errorf("unknown operation %q", op)
}

// sweep measures every operation at every size.
func (w *worker) sweep(ctx context.Context, b *bufs) ([]RankResult, error) {
	amp := Amplitude(w.o.DType, w.nranks)
	var out []RankResult
	for _, op := range w.o.Ops {
		for _, size := range Sizes(w.o.MinBytes, w.o.MaxBytes, w.o.StepFactor) {
			if err := ctx.Err(); err != nil {
				return out, fmt.Errorf("stopped: %w", context.Cause(ctx))
			}
			s := ShapeOf(op, w.nranks, w.o.DType, size)
			m, err := w.measure(b, op, s, amp)
			if err != nil {
				return out, fmt.Errorf("%s of %d bytes: %w", op, s.Bytes, err)
			}
			out = append(out, m)
			if w.progress && w.o.Progress != nil {
				w.o.Progress(Progress{Rank: w.rank, Op: op, Bytes: s.Bytes, Seconds: m.Seconds, Wrong: m.Wrong})
			}
		}
	}
	return out, nil
}

// measure checks, warms up, times and checks again one operation at one
// size.
func (w *worker) measure(b *bufs, op Op, s Shape, amp int) (RankResult, error) {
	es := w.o.DType.Size()
	res := RankResult{Op: op, Bytes: s.Bytes}
	// Check before: pattern in, sentinel (0xFF bytes, a NaN in every
	// type) in the output, so an element NCCL never wrote is wrong.
	if err := b.fill.Launch(b.grid, block, 0, b.stream, b.send, s.SendBytes/es, uint64(w.rank), uint64(amp)); err != nil {
		return res, err
	}
	if err := b.c.MemsetAsync(b.recv, 0xFF, s.RecvBytes, b.stream); err != nil {
		return res, err
	}
	if err := w.issue(b, op, s); err != nil {
		return res, err
	}
	wrong, err := w.check(b, op, s, amp)
	if err != nil {
		return res, fmt.Errorf("check before timing: %w", err)
	}
	res.Wrong += wrong
	for range w.o.Warmup {
		if err := w.issue(b, op, s); err != nil {
			return res, err
		}
	}
	if err := b.stream.Synchronize(); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	if err := b.start.Record(b.stream); err != nil {
		return res, err
	}
	straggle := w.o.Delay > 0 && w.o.DelayRank == w.rank
	for range w.o.Iters {
		if straggle {
			time.Sleep(w.o.Delay)
		}
		if err := w.issue(b, op, s); err != nil {
			return res, err
		}
	}
	if err := b.end.Record(b.stream); err != nil {
		return res, err
	}
	if err := b.end.Synchronize(); err != nil {
		return res, fmt.Errorf("timed iterations: %w", err)
	}
	ms, err := cuda.ElapsedMillis(b.start, b.end)
	if err != nil {
		return res, err
	}
	res.Seconds = float64(ms) / 1e3 / float64(w.o.Iters)
	// Check after: the inputs are unchanged (every operation is out of
	// place), so the output of the last timed iteration must be exact.
	wrong, err = w.check(b, op, s, amp)
	if err != nil {
		return res, fmt.Errorf("check after timing: %w", err)
	}
	res.Wrong += wrong
	return res, nil
}

// check waits for the stream, copies the output back and counts wrong
// elements.
func (w *worker) check(b *bufs, op Op, s Shape, amp int) (uint64, error) {
	if err := b.stream.Synchronize(); err != nil {
		return 0, err
	}
	out := b.host[:s.RecvBytes]
	if err := b.c.CopyFromDevice(out, b.recv); err != nil {
		return 0, err
	}
	return countWrong(op, w.o.DType, w.nranks, w.rank, s.Block, s.RecvBytes/w.o.DType.Size(), amp, out), nil
}
