package twin

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// seriesStore holds every series, by key (metric plus sorted labels), by
// metric name and in creation order. Series are created once, when the
// twin is built, so a scrape only appends samples.
type seriesStore struct {
	all      []*series.Series
	byKey    map[string]*series.Series
	byMetric map[string][]*series.Series
	// gpuMetrics are the enabled per-GPU metrics, in export order.
	gpuMetrics []gpuMetric
	// nodeDialect are the declared exporters' series about themselves.
	nodeDialect []nodeDialectSeries
	// cluster are the Kubernetes, host and scrape-target series.
	cluster clusterSeries
}

type nodeSeries struct {
	unschedulable, allocatable, ready *series.Series
}

type jobSeries struct {
	step, rate, up, restarts, ckptStep, ckptTime, ckptFail, resumed, goodput *series.Series
	ckptInterval                                                             *series.Series
	rankStep                                                                 []*series.Series
	// numa are the gpuchaos agent's NUMA alignment series of each rank's
	// process, by rank.
	numa []numaSeries
}

// numaSeries are the three series the gpuchaos agent exports for one GPU
// process (internal/node/exporter/numa.go): misaligned, remote memory and remote
// CPU ratios.
type numaSeries struct {
	misaligned, remoteMemory, remoteCPU *series.Series
}

// maxRemoteMemoryRatio is internal/node/numa's MaxRemoteMemoryRatio, the share
// of remote memory above which the agent calls a process misaligned (a
// test holds the two equal; the twin does not link the real-node package).
const maxRemoteMemoryRatio = 0.5

// gpuMetric is one dcgm-exporter field and how to read it off a GPU in the
// exporter's unit.
type gpuMetric struct {
	name  string
	value func(g *gpu) float64
}

// allGPUMetrics lists every per-GPU field the twin can export with its
// value in dcgm-exporter's unit (MHz, °C, W, mJ, MiB, %, ratios 0–1 for
// DCGM_FI_PROF_*, bytes/s for PCIe, ns for violation counters: DCGM's
// dcgm_fields.h defines them in ns, and dcgm-exporter #589 (merged
// 2025-11) corrected its "(in us)" help text to match what it exports).
// DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL is exported as the current NVLink
// throughput in MB/s, the way the field reads on a live GPU, so a link that
// goes down shows as zero.
func allGPUMetrics() []gpuMetric {
	return []gpuMetric{
		{"DCGM_FI_DEV_SM_CLOCK", func(g *gpu) float64 { return g.readSMClock() }},
		{"DCGM_FI_DEV_MEM_CLOCK", func(g *gpu) float64 { return g.model.MemClockMHz }},
		{"DCGM_FI_DEV_GPU_TEMP", func(g *gpu) float64 { return readTemp(g.temp, g.noise.temp) }},
		{"DCGM_FI_DEV_MEMORY_TEMP", func(g *gpu) float64 { return readTemp(g.memTemp, g.noise.memTemp) }},
		{"DCGM_FI_DEV_POWER_USAGE", func(g *gpu) float64 { return g.readPower() }},
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", func(g *gpu) float64 { return math.Floor(g.energyJ * 1000) }},
		{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", func(g *gpu) float64 { return g.pcieReplay }},
		{"DCGM_FI_DEV_GPU_UTIL", func(g *gpu) float64 { return g.readUtil() }},
		{"DCGM_FI_DEV_MEM_COPY_UTIL", func(g *gpu) float64 { return math.Round(g.copyUtil) }},
		{"DCGM_FI_DEV_XID_ERRORS", func(g *gpu) float64 { return g.xidLast }},
		{"DCGM_FI_DEV_FB_FREE", func(g *gpu) float64 {
			return math.Floor(g.model.MemoryMiB - reservedMiB - g.fbUsedMiB())
		}},
		{"DCGM_FI_DEV_FB_USED", func(g *gpu) float64 { return math.Ceil(g.fbUsedMiB()) }},
		// What the driver holds back: used, free and reserved add up to
		// the board's memory, as NVML's memory info v2 reports them.
		{"DCGM_FI_DEV_FB_RESERVED", func(*gpu) float64 { return reservedMiB }},
		// A training job uses neither the video encoders nor decoders.
		{"DCGM_FI_DEV_ENC_UTIL", func(*gpu) float64 { return 0 }},
		{"DCGM_FI_DEV_DEC_UTIL", func(*gpu) float64 { return 0 }},
		// The twin's GPUs are bare metal, not vGPUs: no licence to hold.
		{"DCGM_FI_DEV_VGPU_LICENSE_STATUS", func(*gpu) float64 { return 0 }},
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", func(g *gpu) float64 { return math.Round(g.nvlinkMBps) }},
		{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", func(g *gpu) float64 { return g.corrRemap }},
		{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", func(g *gpu) float64 { return g.uncorrRemap }},
		{"DCGM_FI_DEV_ROW_REMAP_FAILURE", func(g *gpu) float64 { return b2f(g.mods.remapFailure) }},
		{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", func(g *gpu) float64 { return round4(math.Min(1, 0.97*g.busy+g.mods.smLoad)) }},
		{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", func(g *gpu) float64 { return round4(math.Min(1, g.tensor+0.5*g.mods.smLoad)) }},
		{"DCGM_FI_PROF_DRAM_ACTIVE", func(g *gpu) float64 { return round4(math.Min(1, g.dram+0.3*g.mods.smLoad)) }},
		{"DCGM_FI_PROF_PCIE_TX_BYTES", func(g *gpu) float64 { return math.Round(g.pcieTx) }},
		{"DCGM_FI_PROF_PCIE_RX_BYTES", func(g *gpu) float64 { return math.Round(g.pcieRx) }},
		{"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", func(g *gpu) float64 { return math.Floor(g.sbeVol) }},
		{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", func(g *gpu) float64 { return g.dbeVol }},
		{"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", func(g *gpu) float64 { return math.Floor(g.sbeAgg) }},
		{"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", func(g *gpu) float64 { return g.dbeAgg }},
		{"DCGM_FI_DEV_POWER_VIOLATION", func(g *gpu) float64 { return math.Round(g.powerViolNs) }},
		{"DCGM_FI_DEV_THERMAL_VIOLATION", func(g *gpu) float64 { return math.Round(g.thermalViolNs) }},
		{"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", func(g *gpu) float64 { return math.Floor(g.crcFlits) }},
		{"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", func(g *gpu) float64 { return float64(g.reasons) }},
		// The field's name before DCGM 3.3; many deployed counters files
		// still list it, and it reads the same bits.
		{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", func(g *gpu) float64 { return float64(g.reasons) }},
		// Violation counters the twin has no cause for stay at zero: it
		// models no sync boost, board limit or reliability policy.
		{"DCGM_FI_DEV_SYNC_BOOST_VIOLATION", func(*gpu) float64 { return 0 }},
		{"DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", func(*gpu) float64 { return 0 }},
		{"DCGM_FI_DEV_LOW_UTIL_VIOLATION", func(g *gpu) float64 { return math.Round(g.lowUtilViolNs) }},
		{"DCGM_FI_DEV_RELIABILITY_VIOLATION", func(*gpu) float64 { return 0 }},
		{"DCGM_EXP_CLOCK_EVENTS_COUNT", func(g *gpu) float64 { return float64(bits.OnesCount64(g.reasons &^ reasonGPUIdle)) }},
		{"DCGM_EXP_XID_ERRORS_COUNT", func(g *gpu) float64 { return float64(g.recentXIDs()) }},
		{"DCGM_EXP_GPU_HEALTH_STATUS", func(g *gpu) float64 { return g.health() }},
		{"DCGM_EXP_P2P_STATUS", func(g *gpu) float64 { return g.p2pStatus() }},
		// NVML's memory info v2 splits the framebuffer into used, free
		// and reserved; the total is their sum, the board's size.
		{"DCGM_FI_DEV_FB_TOTAL", func(g *gpu) float64 { return g.model.MemoryMiB }},
		// Hopper and later remap rows instead of retiring pages, so the
		// page-retirement fields stay zero on every preset the twin has.
		{"DCGM_FI_DEV_RETIRED_SBE", func(*gpu) float64 { return 0 }},
		{"DCGM_FI_DEV_RETIRED_DBE", func(*gpu) float64 { return 0 }},
		{"DCGM_FI_DEV_RETIRED_PENDING", func(*gpu) float64 { return 0 }},
		{"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", func(g *gpu) float64 { return math.Floor(g.crcData) }},
		// The link layer retries every flit whose CRC failed: one replay
		// per CRC error.
		{"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", func(g *gpu) float64 { return math.Floor(g.crcFlits) }},
		{"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", func(g *gpu) float64 { return g.nvlinkRecoveries }},
		// Link 0's share of the GPU's NVLink traffic, in the same unit as
		// DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL.
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_L0", func(g *gpu) float64 {
			return math.Round(g.nvlinkMBps / float64(max(g.model.NVLinks, 1)))
		}},
		{"DCGM_FI_DEV_ROW_REMAP_PENDING", func(g *gpu) float64 { return b2f(g.mods.remapPending || g.uncPending) }},
		// Profiling ratios of a bf16 training step: the SMs are as busy as
		// the graphics engine, about half their warp slots are resident,
		// and the non-tensor pipes see a little fp32 and fp16 work (loss,
		// optimizer, norms) and no fp64. Modelling choices, not measured.
		{"DCGM_FI_PROF_SM_ACTIVE", func(g *gpu) float64 { return round4(math.Min(1, 0.95*g.busy+g.mods.smLoad)) }},
		{"DCGM_FI_PROF_SM_OCCUPANCY", func(g *gpu) float64 { return round4(math.Min(1, 0.5*g.busy+0.5*g.mods.smLoad)) }},
		{"DCGM_FI_PROF_PIPE_FP64_ACTIVE", func(*gpu) float64 { return 0 }},
		{"DCGM_FI_PROF_PIPE_FP32_ACTIVE", func(g *gpu) float64 { return round4(math.Min(1, 0.05*g.busy+0.5*g.mods.smLoad)) }},
		{"DCGM_FI_PROF_PIPE_FP16_ACTIVE", func(g *gpu) float64 { return round4(0.1 * g.busy) }},
	}
}

// xidCountWindow is how far back DCGM_EXP_XID_ERRORS_COUNT counts:
// dcgm-exporter's --xid-count-window-size, five minutes by default.
const xidCountWindow = 5 * time.Minute

// recentXIDs counts the GPU's XIDs within xidCountWindow (the scrape
// drops older ones). dcgm-exporter splits the count by an xid label; the
// twin exports the GPU's total.
func (g *gpu) recentXIDs() int {
	return len(g.xidTimes)
}

// DCGM health results (dcgmHealthWatchResults_t): pass, warn, fail.
const (
	healthPass = 0
	healthWarn = 10
	healthFail = 20
)

// health is DCGM_EXP_GPU_HEALTH_STATUS: fail when the GPU needs a reset
// or its row remapping failed, warn while correctable errors arrive, a
// row remap is pending, its NVLinks err or are down, or it throttles for
// heat; pass otherwise.
func (g *gpu) health() float64 {
	m := &g.mods
	switch {
	case m.resetPending || m.remapFailure:
		return healthFail
	case m.sbePerMin > 0 || m.remapPending || m.crcPerMin > 0 || m.nvlinkDown || g.reasons&(reasonHWThermal|reasonSWThermal) != 0:
		return healthWarn
	}
	return healthPass
}

// p2pStatus is DCGM_EXP_P2P_STATUS as nvmlGpuP2PStatus_t: 0 (OK) while
// the NVLinks are up, 6 (NVML_P2P_STATUS_UNKNOWN) while they are down.
func (g *gpu) p2pStatus() float64 {
	if g.mods.nvlinkDown {
		return 6
	}
	return 0
}

// util is GPU_UTIL as a fraction: a co-tenant's kernels keep it at 100 %.
func (g *gpu) util() float64 {
	if g.mods.smLoad > 0 {
		return 1
	}
	return math.Min(1, g.busy)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// init creates every series the twin will ever export.
func (s *seriesStore) init(t *Twin) {
	s.byKey = map[string]*series.Series{}
	s.byMetric = map[string][]*series.Series{}
	enabled := map[string]bool{}
	for _, c := range t.spec.Exporter.Counters {
		enabled[c] = true
	}
	for _, c := range t.spec.Exporter.OptIn {
		enabled[c] = true
	}
	for _, m := range allGPUMetrics() {
		if enabled[m.name] {
			s.gpuMetrics = append(s.gpuMetrics, m)
		}
	}
	for _, g := range t.gpus {
		ls := labels("gpu", strconv.Itoa(g.index), "UUID", g.uuid, "pci_bus_id", g.pci,
			"device", deviceName(g.index), "modelName", g.model.ModelName, "Hostname", g.node.name)
		g.series = make([]*series.Series, len(s.gpuMetrics))
		for i, m := range s.gpuMetrics {
			g.series[i] = s.add(m.name, ls)
		}
	}
	s.initDialects(t)
	// Nodes, pods, DaemonSets, hosts and scrape targets (cluster_series.go,
	// host_series.go).
	s.cluster.init(t, s)
	for _, j := range t.jobs {
		jl := labels("job", j.spec.Name)
		j.series = jobSeries{
			step:     s.add("gpuchaos_job_step_total", jl),
			rate:     s.add("gpuchaos_job_steps_per_second", jl),
			up:       s.add("gpuchaos_job_up", jl),
			restarts: s.add("gpuchaos_job_restarts_total", jl),
			ckptStep: s.add("gpuchaos_job_last_checkpoint_step", jl),
			ckptTime: s.add("gpuchaos_job_last_checkpoint_timestamp_seconds", jl),
			ckptFail: s.add("gpuchaos_job_checkpoint_failures_total", jl),
			resumed:  s.add("gpuchaos_job_resumed_from_step", jl),
			goodput:  s.add("gpuchaos_job_goodput_ratio", jl),
			// The interval in steps at the healthy step time, as a job
			// that checkpoints every N steps exports it.
			ckptInterval: s.add("gpuchaos_job_checkpoint_interval_steps", jl),
		}
		for r, g := range j.ranks {
			j.series.rankStep = append(j.series.rankStep, s.add("gpuchaos_rank_step_seconds",
				labels("job", j.spec.Name, "rank", strconv.Itoa(r), "Hostname", g.node.name, "gpu", strconv.Itoa(g.index))))
			// The agent labels a process by gpu, pid and comm; Hostname is
			// added as dcgm-exporter's series carry it, so that an alert
			// names its node.
			nl := labels("gpu", strconv.Itoa(g.index), "pid", strconv.Itoa(j.pid+r), "comm", "python3", "Hostname", g.node.name)
			j.series.numa = append(j.series.numa, numaSeries{
				misaligned:   s.add("gpuchaos_numa_misaligned", nl),
				remoteMemory: s.add("gpuchaos_numa_remote_memory_ratio", nl),
				remoteCPU:    s.add("gpuchaos_numa_remote_cpu_ratio", nl),
			})
		}
	}
}

// labels builds sorted labels from name, value pairs.
func labels(kv ...string) series.Labels {
	ls := make(series.Labels, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		ls = append(ls, series.Label{Name: kv[i], Value: kv[i+1]})
	}
	slices.SortFunc(ls, func(a, b series.Label) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return ls
}

func (s *seriesStore) add(metric string, ls series.Labels) *series.Series {
	key := metric + ls.String()
	if se, ok := s.byKey[key]; ok {
		return se
	}
	se := series.New(metric, ls)
	s.byKey[key] = se
	s.byMetric[metric] = append(s.byMetric[metric], se)
	s.all = append(s.all, se)
	return se
}

// doScrape samples every series at the current time.
func (t *Twin) doScrape() {
	ts := t.Now().UnixMilli()
	for _, g := range t.gpus {
		old := (t.now - xidCountWindow).Seconds()
		g.xidTimes = slices.DeleteFunc(g.xidTimes, func(at float64) bool { return at <= old })
		if g.mods.offBus {
			// A GPU off the bus is gone from NVML and DCGM: dcgm-exporter
			// stops exposing its series and the scraper marks them stale.
			for i := range t.store.gpuMetrics {
				g.series[i].MarkStale(ts)
			}
			g.staleDialects(ts)
			continue
		}
		g.noise.draw(t.noiseRNG)
		for i, m := range t.store.gpuMetrics {
			g.series[i].Append(ts, m.value(g))
		}
		g.scrapeDialects(ts)
	}
	t.scrapeNodeDialects(ts)
	for _, j := range t.jobs {
		st := t.status(j)
		js := &j.series
		js.step.Append(ts, float64(j.step))
		js.rate.Append(ts, j.stepRate(t.now, t.scrape))
		js.up.Append(ts, b2f(st.Running))
		js.restarts.Append(ts, float64(j.restarts))
		js.ckptStep.Append(ts, float64(st.LastCheckpointStep))
		js.ckptTime.Append(ts, float64(st.LastCheckpointTime.UnixMilli())/1000)
		js.ckptFail.Append(ts, float64(j.ckptFailures))
		js.resumed.Append(ts, float64(j.resumedFrom))
		js.goodput.Append(ts, st.Goodput)
		if j.baseline > 0 {
			js.ckptInterval.Append(ts, math.Round(j.spec.CheckpointInterval.Seconds()/j.baseline))
		}
		for r, se := range js.rankStep {
			if j.processAlive() {
				se.Append(ts, j.rankCompute[r])
			} else {
				// A rank that is down exports no timing: stale.
				se.MarkStale(ts)
			}
		}
		for r, ns := range js.numa {
			if !j.processAlive() || r >= len(j.ranks) || j.ranks[r].mods.offBus {
				// The agent judges only live processes on GPUs it sees.
				ns.misaligned.MarkStale(ts)
				ns.remoteMemory.MarkStale(ts)
				ns.remoteCPU.MarkStale(ts)
				continue
			}
			m := &j.ranks[r].mods
			ns.misaligned.Append(ts, b2f(m.numaRemoteCPU > 0 || m.numaRemoteMem > maxRemoteMemoryRatio))
			ns.remoteMemory.Append(ts, m.numaRemoteMem)
			ns.remoteCPU.Append(ts, m.numaRemoteCPU)
		}
	}
	t.scrapeCluster(ts)
}

// rateWindow is the least span the exported step rate is averaged over:
// the reference workload's (train.py: steps in the last 5 s). A shorter
// span would read every sync checkpoint as a dip that a real job's page
// does not show.
const rateWindow = 5 * time.Second

// stepRate is the job's steps per second over the last max(rateWindow,
// scrape) before now, from the computed steps kept at each scrape.
func (j *job) stepRate(now, scrape time.Duration) float64 {
	window := max(rateWindow, scrape)
	j.rateHist = append(j.rateHist, rateMark{now, j.computed})
	i := 0
	for i < len(j.rateHist)-1 && j.rateHist[i+1].at <= now-window {
		i++
	}
	j.rateHist = j.rateHist[i:]
	first := j.rateHist[0]
	if first.at == now {
		// The first scrape: the rate since the twin started.
		if now <= 0 {
			return 0
		}
		return float64(j.computed) / now.Seconds()
	}
	return float64(j.computed-first.computed) / (now - first.at).Seconds()
}
