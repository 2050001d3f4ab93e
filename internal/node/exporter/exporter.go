package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuchaos/gpuchaos/internal/node/exposition"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/tick"
)

// DefaultInterval is how often the agent samples the GPUs.
const DefaultInterval = time.Second

// Options configure New. Zero values take the documented defaults.
type Options struct {
	// Source reads the GPUs; required. The agent does not close it.
	Source gpu.Source
	// SourceName says what Source is (nvml, twin) in gpuchaos_agent_info.
	SourceName string
	// Interval between samples; zero means DefaultInterval.
	Interval time.Duration
	// Hostname is the Hostname label; empty means os.Hostname().
	Hostname string
	// Version is the gpuchaos version in gpuchaos_agent_info.
	Version string
	// Logger receives state changes (a GPU lost or back, missed ticks);
	// nil discards them.
	Logger *slog.Logger
	// NUMAInterval, when positive and Source is a gpu.ProcessLister, adds
	// the NUMA alignment of every compute process on a GPU whose node is
	// known, judged at most this often (DefaultNUMAInterval is the
	// command's choice): gpuchaos_numa_misaligned,
	// gpuchaos_numa_remote_memory_ratio and gpuchaos_numa_remote_cpu_ratio
	// {gpu,pid,comm}. Zero means off.
	NUMAInterval time.Duration
	// numaRoot replaces numa.SysNodeDir; for tests.
	numaRoot string
}

// Agent samples GPUs and serves the exposition. Its methods are safe for
// concurrent use; Start may run once at a time.
type Agent struct {
	src      gpu.Source
	srcName  string
	interval time.Duration
	host     string
	version  string
	log      *slog.Logger
	devs     []gpu.Device
	// labels[i] is devs[i]'s dcgm-exporter label set, built once and
	// shared by every page; info is gpuchaos_agent_info's.
	labels [][]*dto.LabelPair
	info   []*dto.LabelPair
	// handler serves /metrics and /healthz.
	handler http.Handler

	mu sync.RWMutex
	// latest[i] is devs[i]'s newest sample; present[i] says whether the
	// GPU answered the last time it was asked. Guarded by mu.
	latest  []gpu.Sample
	present []bool
	// sampled is set once the first pass has run. Guarded by mu.
	sampled bool
	// xidLast[i] is the code of the newest XID of devs[i] (0: none yet),
	// as DCGM_FI_DEV_XID_ERRORS reports it. Guarded by mu.
	xidLast []float64
	// Event series. Guarded by mu.
	xids       *exposition.Vec // gpu, UUID, code
	injections *exposition.Vec // fault
	active     *exposition.Vec // fault, gpu
	burnTFLOPs *exposition.Vec // gpu, dtype
	burnErrors *exposition.Vec // gpu

	// numaEvery is Options.NUMAInterval. numaMu serialises NUMA passes
	// and guards numaLast, the time of the last one.
	numaEvery time.Duration
	numaRoot  string
	numaMu    sync.Mutex
	numaLast  time.Time
	// numa is the newest NUMA pass. Guarded by mu.
	numa numaState

	running atomic.Bool
	missed  atomic.Uint64
}

// New lists the GPUs of opts.Source and returns an agent that has not
// sampled yet; Collect or Start do.
func New(ctx context.Context, opts Options) (*Agent, error) {
	if opts.Source == nil {
		return nil, errors.New("new agent: no gpu source")
	}
	if opts.Interval < 0 {
		return nil, fmt.Errorf("new agent: interval must not be negative, got %s", opts.Interval)
	}
	a := &Agent{
		src: opts.Source, srcName: opts.SourceName, interval: opts.Interval,
		host: opts.Hostname, version: opts.Version, log: opts.Logger,
		xids: exposition.NewVec("gpu", "UUID", "code"), injections: exposition.NewVec("fault"),
		active:     exposition.NewVec("fault", "gpu"),
		burnTFLOPs: exposition.NewVec("gpu", "dtype"), burnErrors: exposition.NewVec("gpu"),
		numaEvery: opts.NUMAInterval, numaRoot: opts.numaRoot,
	}
	if a.interval == 0 {
		a.interval = DefaultInterval
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("new agent: read hostname: %w", err)
		}
		a.host = h
	}
	devs, err := a.src.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("new agent: list gpus: %w", err)
	}
	a.devs = devs
	a.labels = make([][]*dto.LabelPair, len(devs))
	for i, d := range devs {
		a.labels[i] = exposition.Labels(
			"gpu", strconv.Itoa(d.Index), "UUID", d.UUID, "pci_bus_id", d.PCI,
			"device", "nvidia"+strconv.Itoa(d.Index), "modelName", d.Name, "Hostname", a.host)
	}
	a.info = exposition.Labels("version", a.version, "source", a.srcName, "Hostname", a.host)
	a.handler = exposition.Handler(exposition.Options{Gather: a.gather, Healthy: a.Running, Logger: a.log})
	a.latest = make([]gpu.Sample, len(devs))
	a.present = make([]bool, len(devs))
	a.xidLast = make([]float64, len(devs))
	return a, nil
}

// Devices returns the GPUs the agent exports.
func (a *Agent) Devices() []gpu.Device {
	out := make([]gpu.Device, len(a.devs))
	copy(out, a.devs)
	return out
}

// Start samples every interval until ctx ends, then returns nil. The first
// pass runs at once; later ones are aligned to multiples of the interval,
// so agents on different nodes sample at the same phase. A tick missed
// because a pass overran (a slow driver) is counted, not queued. Start
// returns an error if the agent is already started.
func (a *Agent) Start(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent: already started")
	}
	defer a.running.Store(false)
	a.log.Info("agent started", "interval", a.interval, "gpus", len(a.devs), "source", a.srcName)
	a.Collect(ctx)
	tick.Run(ctx, a.interval, func(time.Time) error {
		a.Collect(ctx)
		return nil
	}, func(n uint64) {
		a.missed.Add(n)
		a.log.Warn("agent missed ticks", "missed", n)
	})
	a.log.Info("agent stopped", "missed_ticks", a.missed.Load())
	return nil
}

// Collect samples every GPU once and publishes the result. A GPU whose
// sample fails is left off the page until it answers again.
func (a *Agent) Collect(ctx context.Context) {
	samples := make([]gpu.Sample, len(a.devs))
	ok := make([]bool, len(a.devs))
	errs := make([]error, len(a.devs))
	for i, d := range a.devs {
		s, err := a.src.Sample(ctx, d.Index)
		if err != nil {
			if ctx.Err() != nil {
				return // shutting down: keep the last published pass
			}
			errs[i] = err
			continue
		}
		samples[i], ok[i] = s, true
	}
	a.mu.Lock()
	for i, d := range a.devs {
		if a.sampled && a.present[i] != ok[i] {
			if ok[i] {
				a.log.Info("gpu answers again", "gpu", d.Index, "uuid", d.UUID)
			} else {
				a.log.Warn("gpu stopped answering", "gpu", d.Index, "uuid", d.UUID, "err", errs[i])
			}
		}
	}
	a.latest, a.present, a.sampled = samples, ok, true
	a.mu.Unlock()
	a.collectNUMA(ctx)
}

// MissedTicks returns how many sampling ticks Start has missed.
func (a *Agent) MissedTicks() uint64 { return a.missed.Load() }

// Running reports whether Start is running.
func (a *Agent) Running() bool { return a.running.Load() }

// pos returns the position of the GPU with NVML index idx, or -1.
func (a *Agent) pos(idx int) int {
	for i, d := range a.devs {
		if d.Index == idx {
			return i
		}
	}
	return -1
}

// RecordXID records an XID error of GPU gpuIndex: DCGM_FI_DEV_XID_ERRORS
// shows code as the GPU's newest XID, as DCGM's field does, and
// gpuchaos_xid_events_total{gpu,UUID,code} counts it. An index the agent
// does not know is still counted, with an empty UUID, so no event is lost.
// The XID watcher calls it.
func (a *Agent) RecordXID(gpuIndex int, code int) {
	uuid := ""
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.pos(gpuIndex); p >= 0 {
		uuid = a.devs[p].UUID
		a.xidLast[p] = float64(code)
	}
	a.xids.Add(1, strconv.Itoa(gpuIndex), uuid, strconv.Itoa(code))
}

// RecordBurn records a burn result for GPU gpuIndex: its throughput in
// dtype (bf16, tf32…) becomes gpuchaos_burn_tflops{gpu,dtype}, and
// newErrors (silent-data-corruption mismatches found since the last call)
// is added to gpuchaos_burn_errors_total{gpu}. Burn calls it.
func (a *Agent) RecordBurn(gpuIndex int, dtype string, tflops float64, newErrors uint64) {
	g := strconv.Itoa(gpuIndex)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.burnTFLOPs.Set(tflops, g, dtype)
	a.burnErrors.Add(float64(newErrors), g)
}

// RecordInjection counts one injection of fault (a catalogue id such as
// hardware.xid) in gpuchaos_injections_total{fault}.
func (a *Agent) RecordInjection(fault string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.injections.Add(1, fault)
}

// SetFault marks fault as active (1) on GPU gpuIndex in
// gpuchaos_active_faults{fault,gpu}, or removes the series when active is
// false. A negative gpuIndex means the fault is not on one GPU (gpu="").
func (a *Agent) SetFault(fault string, gpuIndex int, active bool) {
	g := ""
	if gpuIndex >= 0 {
		g = strconv.Itoa(gpuIndex)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if active {
		a.active.Set(1, fault, g)
	} else {
		a.active.Delete(fault, g)
	}
}

// ServeHTTP serves /metrics (the exposition, through the exposition
// package's handler) and /healthz (200 while Start runs, 503 otherwise);
// other paths are not found.
func (a *Agent) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	a.handler.ServeHTTP(w, req)
}
