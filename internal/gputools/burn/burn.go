package burn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
	"github.com/gpuchaos/gpuchaos/internal/node/tick"
)

// StopReason says why a burn ended.
type StopReason string

// Why a burn ends.
const (
	StopDuration    StopReason = "duration"            // its duration passed
	StopTemperature StopReason = "temperature-ceiling" // a GPU reached the ceiling
	StopCancelled   StopReason = "cancelled"           // the caller's context ended
	StopError       StopReason = "error"               // every GPU failed
)

// Sentinel causes of the stop context.
var (
	errDurationOver = errors.New("duration over")
	errCeiling      = errors.New("temperature ceiling reached")
	errAllDone      = errors.New("every gpu finished")
)

// setupTimeout bounds module load, allocation and the first products, so
// that a hung GPU cannot keep the duration from ever starting.
const setupTimeout = 2 * time.Minute

// Result is what a burn measured.
type Result struct {
	DType           DType      `json:"dtype"`
	N               int        `json:"n"`
	Seed            uint64     `json:"seed"`
	DurationSeconds float64    `json:"duration_seconds"`
	ElapsedSeconds  float64    `json:"elapsed_seconds"`
	StopReason      StopReason `json:"stop_reason"`
	// TempCeilingC is the ceiling asked for (0: none).
	TempCeilingC float64 `json:"temp_ceiling_c"`
	// Duty is the share of wall time the GPUs burned (1: continuously).
	Duty float64 `json:"duty"`
	// Crossing is the sample that reached the ceiling, when one did.
	Crossing *Crossing   `json:"ceiling_crossing,omitempty"`
	GPUs     []GPUResult `json:"gpus"`
	// TelemetryEnabled says whether a telemetry source was given.
	TelemetryEnabled bool `json:"telemetry_enabled"`
	// Telemetry is the trace: every GPU once per sample interval.
	Telemetry []TelemetrySample `json:"telemetry"`
	// TelemetryErrors counts failed readings; LastTelemetryError is the
	// last one's text.
	TelemetryErrors    int    `json:"telemetry_errors"`
	LastTelemetryError string `json:"last_telemetry_error,omitempty"`
}

// Crossing is the telemetry sample that stopped a burn.
type Crossing struct {
	GPU   int       `json:"gpu"`
	Time  time.Time `json:"time"`
	TempC float64   `json:"temp_c"`
	// StopLatencySeconds is the time from this sample to every GPU having
	// stopped and released its memory.
	StopLatencySeconds float64 `json:"stop_latency_seconds"`
}

// GPUResult is one GPU's share of a burn.
type GPUResult struct {
	Index       int    `json:"index"`
	CUDAOrdinal int    `json:"cuda_ordinal"`
	PCIBusID    string `json:"pci_bus_id"`
	Name        string `json:"name"`
	// TFLOPS is 2·N³ per timed product over the GPU time of the timed
	// batches, measured with CUDA events around each batch of products
	// (the first batch is warm-up and not timed; the compare kernel is
	// outside the events). It is the rate while burning: the idle time of
	// a duty cycle below 1 is not in it.
	TFLOPS        float64 `json:"tflops"`
	TimedProducts uint64  `json:"timed_products"`
	GEMMSeconds   float64 `json:"gemm_seconds"`
	// Products counts every product, warm-up and reference included.
	Products uint64 `json:"products"`
	// BatchProducts is the number of products between stop checks.
	BatchProducts int `json:"batch_products"`
	// BatchTFLOPS is the spread of the timed batches' rates.
	BatchTFLOPS Spread `json:"batch_tflops"`
	// Checks counts comparisons of a product with the reference product;
	// MismatchedChecks those that differed; Mismatches the differing
	// elements summed over all checks. A healthy GPU has zero.
	Checks           uint64 `json:"checks"`
	MismatchedChecks uint64 `json:"mismatched_checks"`
	Mismatches       uint64 `json:"mismatches"`
	// CUBLASVersion is the cuBLAS library version used.
	CUBLASVersion int `json:"cublas_version"`
	// Error is why this GPU stopped early, if it did.
	Error string `json:"error,omitempty"`
}

// Spread is the minimum, median and maximum of a set of rates.
type Spread struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

func spreadOf(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return Spread{Min: s[0], Median: s[len(s)/2], Max: s[len(s)-1]}
}

// gpuInfo is a selected GPU, in PCI bus order.
type gpuInfo = cuda.BusDevice

// Run burns the selected GPUs at once for the duration, one goroutine
// locked to its OS thread per GPU, and returns what each measured. It
// stops early when ctx ends or a GPU reaches the temperature ceiling
// (within one batch of products, DefaultBatchTarget, of the sample that
// crossed it). A GPU that fails does not stop the others; its error is in
// its GPUResult and joined into the returned error, which also reports a
// GPU without a driver (wrapping cuda.ErrNoDriver) or bad options.
func Run(ctx context.Context, opts Options) (Result, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Result{}, fmt.Errorf("burn options: %w", err)
	}
	spec, _ := specOf(o.DType)
	drv, err := cuda.Open()
	if err != nil {
		return Result{}, fmt.Errorf("burn: %w", err)
	}
	blas, err := cuda.OpenBLAS(cuda.BLASCandidates(os.Getenv))
	if err != nil {
		return Result{}, fmt.Errorf("burn: %w", err)
	}
	all, err := drv.DevicesByBus()
	if err != nil {
		return Result{}, fmt.Errorf("burn: %w", err)
	}
	gpus, err := cuda.Pick(all, o.GPUs)
	if err != nil {
		return Result{}, fmt.Errorf("burn: %w", err)
	}

	start := time.Now()
	res := Result{DType: o.DType, N: o.N, Seed: o.Seed, DurationSeconds: o.Duration.Seconds(),
		TempCeilingC: o.TempCeilingC, Duty: o.Duty, TelemetryEnabled: o.Telemetry != nil}
	stopCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)

	// Telemetry and the ceiling run from the start, so a GPU already over
	// the ceiling never begins to burn.
	smp := &sampler{opts: o, gpus: gpus, stop: stop}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { smp.run(sampleCtx) })

	ready := make(chan struct{}, len(gpus))
	bg.Go(func() { startClock(stopCtx, stop, ready, len(gpus), o.Duration) })

	results := make([]GPUResult, len(gpus))
	errs := make([]error, len(gpus))
	var wg sync.WaitGroup
	for i, g := range gpus {
		seed := mix(o.Seed, uint64(g.Index))
		wg.Go(func() {
			w := &worker{opts: o, spec: spec, blas: blas, gpu: g, seed: seed, ready: ready}
			results[i], errs[i] = w.run(stopCtx)
		})
	}
	wg.Wait()
	stoppedAt := time.Now()
	cause := context.Cause(stopCtx)
	stop(errAllDone)
	stopSampling()
	bg.Wait()

	res.ElapsedSeconds = stoppedAt.Sub(start).Seconds()
	res.GPUs = results
	res.Telemetry, res.TelemetryErrors, res.LastTelemetryError, res.Crossing = smp.result()
	switch {
	case errors.Is(cause, errCeiling):
		res.StopReason = StopTemperature
		res.Crossing.StopLatencySeconds = stoppedAt.Sub(res.Crossing.Time).Seconds()
	case errors.Is(cause, errDurationOver):
		res.StopReason = StopDuration
	case ctx.Err() != nil:
		res.StopReason = StopCancelled
	default:
		res.StopReason = StopError
	}
	var joined []error
	for i, e := range errs {
		if e != nil {
			joined = append(joined, fmt.Errorf("gpu %d: %w", gpus[i].Index, e))
		}
	}
	return res, errors.Join(joined...)
}

// startClock starts the duration once every GPU is set up (or has
// failed), so every GPU burns for the whole duration; setup itself is
// bounded by setupTimeout.
func startClock(ctx context.Context, stop context.CancelCauseFunc, ready <-chan struct{}, n int, d time.Duration) {
	setup := time.NewTimer(setupTimeout)
	defer setup.Stop()
	for range n {
		select {
		case <-ready:
		case <-setup.C:
			stop(fmt.Errorf("%w: setup took over %s", errDurationOver, setupTimeout))
			return
		case <-ctx.Done():
			return
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		stop(errDurationOver)
	case <-ctx.Done():
	}
}

// sampler reads telemetry and enforces the ceiling.
type sampler struct {
	opts Options
	gpus []gpuInfo
	stop context.CancelCauseFunc

	mu       sync.Mutex
	trace    []TelemetrySample
	errCount int
	lastErr  string
	crossing *Crossing
}

func (s *sampler) run(ctx context.Context) {
	if s.opts.Telemetry == nil {
		return
	}
	t := time.NewTicker(s.opts.SampleInterval)
	defer t.Stop()
	for {
		s.sampleAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) sampleAll(ctx context.Context) {
	for _, g := range s.gpus {
		if ctx.Err() != nil {
			return
		}
		ts, err := s.opts.Telemetry(ctx, g.Index)
		s.mu.Lock()
		if err != nil {
			s.errCount++
			s.lastErr = fmt.Sprintf("gpu %d: %v", g.Index, err)
			s.mu.Unlock()
			continue
		}
		ts.GPU = g.Index
		if ts.Time.IsZero() {
			ts.Time = time.Now()
		}
		s.trace = append(s.trace, ts)
		crossed := s.opts.TempCeilingC > 0 && ts.TempC >= s.opts.TempCeilingC && s.crossing == nil
		if crossed {
			s.crossing = &Crossing{GPU: g.Index, Time: ts.Time, TempC: ts.TempC}
		}
		s.mu.Unlock()
		if crossed {
			s.stop(errCeiling)
		}
	}
}

func (s *sampler) result() ([]TelemetrySample, int, string, *Crossing) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trace, s.errCount, s.lastErr, s.crossing
}

// worker burns one GPU.
type worker struct {
	opts  Options
	spec  dtypeSpec
	blas  *cuda.BLAS
	gpu   gpuInfo
	seed  uint64
	ready chan<- struct{}

	signalled bool
}

func (w *worker) signalReady() {
	if !w.signalled {
		w.signalled = true
		w.ready <- struct{}{}
	}
}

// run sets the GPU up and burns until ctx ends. Everything it allocates
// is released before it returns, on every path.
func (w *worker) run(ctx context.Context) (res GPUResult, err error) {
	res = GPUResult{Index: w.gpu.Index, CUDAOrdinal: w.gpu.Device.Ordinal, PCIBusID: w.gpu.PCI, Name: w.gpu.Name}
	defer w.signalReady()
	defer func() {
		if err != nil {
			res.Error = err.Error()
		}
	}()
	// The CUDA context is current per OS thread: keep this goroutine on
	// one thread from retain to release.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	var cleanup []func() error
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			if cerr := cleanup[i](); cerr != nil && err == nil {
				err = fmt.Errorf("release: %w", cerr)
			}
		}
	}()
	c, err := w.gpu.Device.RetainPrimaryContext()
	if err != nil {
		return res, err
	}
	cleanup = append(cleanup, c.Release)
	b, err := w.setup(c, &cleanup)
	if err != nil {
		return res, err
	}
	ver, err := b.handle.Version()
	if err != nil {
		return res, err
	}
	res.CUBLASVersion = ver
	return res, w.loop(ctx, b, &res)
}

// idle waits for d or until ctx ends, whichever comes first.
func idle(ctx context.Context, d time.Duration) { _ = tick.Sleep(ctx, d) }

// buffers is what a burn holds on its GPU.
type buffers struct {
	c                *cuda.Context
	a, b, out, ref   cuda.DevicePtr
	counter          cuda.DevicePtr
	elems            uint64
	stream           cuda.Stream
	handle           *cuda.Handle
	fill, compare    cuda.Function
	grid             cuda.Dim3
	start, end, done cuda.Event
}

func (w *worker) setup(c *cuda.Context, cleanup *[]func() error) (*buffers, error) {
	n := uint64(w.opts.N)
	bf := &buffers{c: c, elems: n * n}
	bytes := bf.elems * w.spec.elemBytes
	free, _, err := c.MemInfo()
	if err != nil {
		return nil, err
	}
	if need := 4*bytes + 1<<20; need > free {
		return nil, fmt.Errorf("%d×%d %s needs %d MiB of device memory, %d MiB free", n, n, w.opts.DType, need>>20, free>>20)
	}
	mod, err := c.LoadModule(kernelsPTX)
	if err != nil {
		return nil, fmt.Errorf("load kernels: %w", err)
	}
	*cleanup = append(*cleanup, mod.Unload)
	if bf.fill, err = mod.Function(w.spec.fill); err != nil {
		return nil, err
	}
	if bf.compare, err = mod.Function(w.spec.compare); err != nil {
		return nil, err
	}
	for _, p := range []*cuda.DevicePtr{&bf.a, &bf.b, &bf.out, &bf.ref} {
		if *p, err = c.Alloc(bytes); err != nil {
			return nil, err
		}
		ptr := *p
		*cleanup = append(*cleanup, func() error { return c.Free(ptr) })
	}
	if bf.counter, err = c.Alloc(8); err != nil {
		return nil, err
	}
	*cleanup = append(*cleanup, func() error { return c.Free(bf.counter) })
	if bf.stream, err = c.NewStream(); err != nil {
		return nil, err
	}
	*cleanup = append(*cleanup, bf.stream.Destroy)
	for _, e := range []*cuda.Event{&bf.start, &bf.end, &bf.done} {
		if *e, err = c.NewEvent(); err != nil {
			return nil, err
		}
		*cleanup = append(*cleanup, e.Destroy)
	}
	if bf.handle, err = w.blas.NewHandle(); err != nil {
		return nil, err
	}
	*cleanup = append(*cleanup, bf.handle.Destroy)
	// One handle on one stream for every product, reference included:
	// with the same shapes, types and compute type cuBLAS picks the same
	// kernel each time, and with atomics off it reduces in a fixed order,
	// so a healthy GPU reproduces the reference bit for bit.
	if err := bf.handle.SetStream(bf.stream); err != nil {
		return nil, err
	}
	sms, err := c.Device().Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	blocks := min((bf.elems+255)/256, uint64(sms)*8)
	bf.grid = cuda.Dim3{X: uint32(blocks), Y: 1, Z: 1}
	if err := w.fillInputs(bf); err != nil {
		return nil, err
	}
	return bf, nil
}

var block = cuda.Dim3{X: 256, Y: 1, Z: 1}

// fillInputs draws A and B on the GPU and checks the first elements
// against the same hash computed here, so a PTX or launch mistake shows
// as an error rather than as a burn on wrong data.
func (w *worker) fillInputs(bf *buffers) error {
	for k, p := range []cuda.DevicePtr{bf.a, bf.b} {
		seed := mix(w.seed, uint64(k+1))
		if err := bf.fill.Launch(bf.grid, block, 0, bf.stream, p, bf.elems, seed); err != nil {
			return err
		}
		if err := bf.stream.Synchronize(); err != nil {
			return fmt.Errorf("fill inputs: %w", err)
		}
		const probe = 64
		got := make([]byte, probe*w.spec.elemBytes)
		if err := bf.c.CopyFromDevice(got, p); err != nil {
			return err
		}
		for i := range uint64(probe) {
			want := expectedBits(w.opts.DType, seed, i)
			have := readElem(got, i, w.spec.elemBytes)
			if have != want {
				return fmt.Errorf("fill kernel %s wrote %#x at element %d, want %#x", w.spec.fill, have, i, want)
			}
		}
	}
	return bf.c.MemsetAsync(bf.counter, 0, 8, bf.stream)
}

func readElem(b []byte, i, size uint64) uint64 {
	switch size {
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[i*2:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[i*4:]))
	}
	return binary.LittleEndian.Uint64(b[i*8:])
}

// gemm issues one product into dst.
func (w *worker) gemm(bf *buffers, dst cuda.DevicePtr) error {
	n := w.opts.N
	return bf.handle.GemmEx(cuda.Gemm{
		TransA: cuda.OpN, TransB: cuda.OpN, M: n, N: n, K: n, Alpha: 1, Beta: 0,
		A: bf.a, AType: w.spec.data, LDA: n, B: bf.b, BType: w.spec.data, LDB: n,
		C: dst, CType: w.spec.data, LDC: n, Compute: w.spec.compute, Algo: cuda.GemmAlgoDefault,
	})
}

// batch times k products into out with events, then compares out with
// the reference; it returns the GPU time of the products and the
// mismatch counter after the compare.
func (w *worker) batch(bf *buffers, k int) (ms float64, counter uint64, err error) {
	if err := bf.start.Record(bf.stream); err != nil {
		return 0, 0, err
	}
	for range k {
		if err := w.gemm(bf, bf.out); err != nil {
			return 0, 0, err
		}
	}
	if err := bf.end.Record(bf.stream); err != nil {
		return 0, 0, err
	}
	if err := bf.compare.Launch(bf.grid, block, 0, bf.stream, bf.out, bf.ref, bf.elems, bf.counter); err != nil {
		return 0, 0, err
	}
	if err := bf.done.Record(bf.stream); err != nil {
		return 0, 0, err
	}
	if err := bf.done.Synchronize(); err != nil {
		return 0, 0, fmt.Errorf("products: %w", err)
	}
	t, err := cuda.ElapsedMillis(bf.start, bf.end)
	if err != nil {
		return 0, 0, err
	}
	var c [8]byte
	if err := bf.c.CopyFromDevice(c[:], bf.counter); err != nil {
		return 0, 0, err
	}
	return float64(t), binary.LittleEndian.Uint64(c[:]), nil
}

func (w *worker) loop(ctx context.Context, bf *buffers, res *GPUResult) error {
	// The reference product, then one timed product (checked against it)
	// to size the batches.
	if err := w.gemm(bf, bf.ref); err != nil {
		return err
	}
	ms, counter, err := w.batch(bf, 1)
	if err != nil {
		return err
	}
	res.Products, res.Checks, res.Mismatches = 2, 1, counter
	if counter > 0 {
		res.MismatchedChecks++
	}
	per := time.Duration(ms * float64(time.Millisecond))
	if w.opts.TempCeilingC > 0 && per > MaxProductTime {
		return fmt.Errorf("one %d³ %s product takes %s, too long to stop within 2 s of a temperature ceiling: use a smaller size", w.opts.N, w.opts.DType, per)
	}
	k := max(1, int(w.opts.BatchTarget/max(per, time.Microsecond)))
	res.BatchProducts = k
	w.signalReady()

	began := time.Now()
	fl := flops(w.opts.N)
	var rates []float64
	for i := 0; ctx.Err() == nil; i++ {
		batchStart := time.Now()
		ms, c, err := w.batch(bf, k)
		if err != nil {
			return err
		}
		busy := time.Since(batchStart)
		res.Products += uint64(k)
		res.Checks++
		if c > counter {
			res.MismatchedChecks++
			res.Mismatches = c
			counter = c
		}
		rate := fl * float64(k) / (ms / 1e3) / 1e12
		if i > 0 { // the first batch warms the clocks up
			res.TimedProducts += uint64(k)
			res.GEMMSeconds += ms / 1e3
			rates = append(rates, rate)
		}
		if w.opts.Progress != nil {
			w.opts.Progress(Progress{GPU: w.gpu.Index, Elapsed: time.Since(began), Products: res.Products, BatchTFLOPS: rate, Mismatches: res.Mismatches})
		}
		// The idle is measured against the batch's wall time, compare
		// kernel and synchronisation included, because a utilisation
		// counter sees those as busy too. It ends early on stop, so a
		// duty cycle never delays the ceiling or the duration.
		idle(ctx, idleAfter(busy, w.opts.Duty))
	}
	if res.GEMMSeconds > 0 {
		res.TFLOPS = fl * float64(res.TimedProducts) / res.GEMMSeconds / 1e12
	}
	res.BatchTFLOPS = spreadOf(rates)
	return nil
}
