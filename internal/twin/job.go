package twin

import (
	"fmt"
	"math"
	"time"
)

// jobState is where a job is in its life.
type jobState uint8

const (
	jobRunning    jobState = iota // stepping
	jobStalled                    // paused for a checkpoint (sync write or async snapshot)
	jobHung                       // a collective never completes; the watchdog is counting
	jobRestarting                 // crashed; paying the restart cost
	jobBlocked                    // crashed and cannot restart: a rank's GPU or node is unusable
)

func (s jobState) String() string {
	return [...]string{"running", "checkpointing", "hung", "restarting", "blocked"}[s]
}

// checkpoint is one completed checkpoint. runSec is the job's cumulative
// step time when it was taken, so a restart knows how much work it loses.
type checkpoint struct {
	step    int64
	at      time.Duration
	runSec  float64
	corrupt bool
}

// pendingWrite is a checkpoint being written.
type pendingWrite struct {
	gen    uint64
	step   int64
	runSec float64
	dur    float64 // seconds at current bandwidth
	sync   bool
	hung   bool // storage partitioned: the write makes no progress
}

// jobMods are the job-scope effects.
type jobMods struct {
	collIntra, collInter float64 // collective bandwidth factors
	collHang             bool
	hangTimeout          float64
	ckptFill             bool
	ckptSlow             float64
	ckptPartition        bool
}

func (m *jobMods) reset() { *m = jobMods{collIntra: 1, collInter: 1, ckptSlow: 1} }

// job is one data-parallel training job. The twin schedules one event per
// step for the whole job, not per rank: a synchronous step ends when the
// slowest rank and the all-reduce are done, so per-rank events would add
// nothing but cost.
type job struct {
	idx   int
	spec  JobSpec
	pid   int // the rank-0 process id; rank r is pid+r
	ranks []*gpu
	nodes []*node
	// multiDomain is true when the ranks span NVLink domains, so the
	// all-reduce crosses the network.
	multiDomain bool
	mods        jobMods

	state    jobState
	gen      uint64 // bumped on crash, hang and resume; stale events are dropped
	wgen     uint64
	write    *pendingWrite
	killShot int // armed kill-writer effects

	step, computed, lostSteps int64
	restarts                  int
	exits                     int  // crashes: the pods' containers exited and restarted
	relaunching               bool // down for a clean relaunch, not a crash
	resumedFrom               int64
	lastCrash                 string
	ckpts                     []checkpoint
	ckptFailures              int
	lastCkptAttempt           time.Duration

	runSec      float64 // cumulative step time of the current lineage
	lostWorkSec float64 // step time thrown away by restarts
	downSec     float64 // time down (restarting, blocked, hung) before now
	downSince   time.Duration
	hangSince   time.Duration
	stepStart   time.Duration
	stepDur     float64
	lastStepDur float64

	baseCompute []float64 // per rank, median GPU at full clock
	rankCompute []float64 // last step's compute per rank
	baseline    float64   // healthy step time at creation

	// rateHist are the computed steps at recent scrapes, for stepRate.
	rateHist []rateMark
	series   jobSeries
}

// rateMark is the computed steps at one scrape.
type rateMark struct {
	at       time.Duration
	computed int64
}

// processAlive reports whether the job's processes hold their GPUs.
func (j *job) processAlive() bool { return j.state <= jobHung }

func (t *Twin) initJob(j *job) error {
	j.mods.reset()
	j.baseCompute = make([]float64, len(j.ranks))
	j.rankCompute = make([]float64, len(j.ranks))
	seen := map[*node]bool{}
	domains := map[string]bool{}
	for r, g := range j.ranks {
		if j.spec.FLOPsPerStep > 0 {
			j.baseCompute[r] = j.spec.FLOPsPerStep / (g.model.PeakBF16TFLOPs * 1e12 * j.spec.MFU)
		} else {
			j.baseCompute[r] = j.spec.StepCompute.Seconds()
		}
		if !seen[g.node] {
			seen[g.node] = true
			j.nodes = append(j.nodes, g.node)
		}
		domains[g.node.domain] = true
	}
	j.multiDomain = len(domains) > 1
	maxC := 0.0
	for r, g := range j.ranks {
		maxC = math.Max(maxC, j.baseCompute[r]*g.variability)
	}
	j.baseline = maxC + t.allReduceSeconds(j)
	if j.baseline < 1e-3 {
		return fmt.Errorf("step time %gs is below 1ms (flopsPerStep too small)", j.baseline)
	}
	j.ckpts = []checkpoint{{step: 0}}
	return nil
}

// allReduceSeconds is a ring all-reduce of the job's gradients: every rank
// sends and receives 2(n−1)/n of the bytes over the bottleneck link, plus a
// latency per ring hop.
func (t *Twin) allReduceSeconds(j *job) float64 {
	n := float64(len(j.ranks))
	if n < 2 {
		return 0
	}
	eff := t.spec.Network.CollectiveEfficiency
	intra := math.Inf(1)
	for _, g := range j.ranks {
		bw := g.model.NVLinkGBps / 2 // one direction of the quoted bidirectional figure
		if g.mods.nvlinkDown {
			bw *= g.mods.nvlinkFallback
		}
		intra = math.Min(intra, bw)
	}
	bw := intra * eff * j.mods.collIntra
	lat := 0.0
	if j.multiDomain {
		inter, delay := math.Inf(1), 0.0
		for _, nd := range j.nodes {
			share := t.spec.Network.NodeBandwidthGBps * nd.mods.netFactor / float64(len(nd.gpus))
			inter = math.Min(inter, share)
			delay = math.Max(delay, nd.mods.netDelay)
		}
		bw = math.Min(bw, inter*eff*j.mods.collInter)
		lat = t.spec.Network.Latency.Seconds() + delay
	}
	bw = math.Max(bw, 1e-6) // a factor of zero is a hang, not a division by zero
	return j.spec.GradientBytes*2*(n-1)/n/(bw*1e9) + 2*(n-1)*lat
}

// hangTimeout returns whether a collective of the job can never complete
// now and, if so, after how long the watchdog fires.
func (t *Twin) hangCondition(j *job) (bool, time.Duration) {
	hung, timeout := false, 0.0
	pick := func(v float64) {
		hung = true
		if v > 0 && (timeout == 0 || v < timeout) {
			timeout = v
		}
	}
	if j.mods.collHang {
		pick(j.mods.hangTimeout)
	}
	for _, g := range j.ranks {
		if g.mods.rankHung {
			pick(g.mods.hangTimeout)
		}
	}
	if j.multiDomain {
		for _, nd := range j.nodes {
			if nd.mods.partitioned {
				pick(0)
			}
		}
	}
	d := j.spec.WatchdogTimeout
	if timeout > 0 {
		d = time.Duration(timeout * float64(time.Second))
	}
	return hung, d
}

// oom reports whether the job's working set no longer fits on some rank.
func (t *Twin) oom(j *job) bool {
	need := j.spec.MemoryGiB * 1024
	for _, g := range j.ranks {
		if need > g.model.MemoryMiB-reservedMiB-g.mods.vramFrac*g.model.MemoryMiB {
			return true
		}
	}
	return false
}

// startStep begins the job's next step, or hangs or crashes it when a fault
// says so.
func (t *Twin) startStep(j *job) {
	if hung, d := t.hangCondition(j); hung {
		t.enterHang(j, d)
		return
	}
	if t.oom(j) {
		t.crashRank(j, "CUDA out of memory")
		return
	}
	maxC := 0.0
	for r, g := range j.ranks {
		c := j.baseCompute[r] * g.computeSlowdown()
		j.rankCompute[r] = c
		maxC = math.Max(maxC, c)
	}
	ar := t.allReduceSeconds(j)
	dur := maxC + ar
	j.stepStart, j.stepDur = t.now, dur
	t.setActivity(j, dur, ar)
	t.schedule(time.Duration(dur*float64(time.Second)), evStep, j.idx, j.gen, "")
}

// setActivity sets what each rank's GPU does during a step of dur seconds
// with ar seconds of all-reduce. A rank's GPU computes only for its own
// nominal compute time; time lost to CPU starvation, input pipelines or
// waiting for the slowest rank is idle time, which is why a silent
// slowdown shows only as lower utilisation.
func (t *Twin) setActivity(j *job, dur, ar float64) {
	n := float64(len(j.ranks))
	ringBytes := 0.0
	if n > 1 {
		ringBytes = j.spec.GradientBytes * 2 * (n - 1) / n
	}
	for r, g := range j.ranks {
		clock := g.smClock / g.model.MaxSMClockMHz
		if clock <= 0 || g.act == 0 {
			clock = g.limitClock(0.9, g.model.MaxSMClockMHz) / g.model.MaxSMClockMHz
		}
		nominal := math.Min(j.baseCompute[r]*g.variability/clock, dur-ar)
		cf, af := nominal/dur, ar/dur
		g.busy = math.Min(1, cf+af)
		g.act = math.Min(1, 0.98*cf+0.9*af)
		g.tensor = 0.5 * cf
		g.dram = 0.35*cf + 0.2*af
		g.copyUtil = 100 * g.dram
		g.pcieRx, g.pcieTx = 2e8*cf, 5e7*cf // input batches in, metrics and logs out
		if g.mods.nvlinkDown {
			// NCCL falls back to PCIe and host memory for the ring.
			g.nvlinkMBps = 0
			g.pcieRx += ringBytes / dur
			g.pcieTx += ringBytes / dur
		} else {
			g.nvlinkMBps = ringBytes / dur / 1e6
		}
		t.addPCIeLoad(g)
	}
}

// addPCIeLoad adds a copy storm on top of the workload's own traffic.
func (t *Twin) addPCIeLoad(g *gpu) {
	if b := g.mods.pcieBps; b > 0 {
		g.pcieRx += b
		g.copyUtil = math.Min(100, g.copyUtil+100*b/64e9) // PCIe Gen5 x16 ≈ 64 GB/s
	}
}

// setIdle marks the job's GPUs as idle (process gone or waiting on I/O).
func (t *Twin) setIdle(j *job) {
	for _, g := range j.ranks {
		g.act, g.busy, g.tensor, g.dram, g.copyUtil, g.nvlinkMBps = 0, 0, 0, 0, 0, 0
		g.pcieRx, g.pcieTx = 0, 0
		t.addPCIeLoad(g)
	}
}

func (t *Twin) stepDone(j *job) {
	j.step++
	j.computed++
	j.runSec += j.stepDur
	j.lastStepDur = j.stepDur
	if j.write == nil && t.now-j.lastCkptAttempt >= j.spec.CheckpointInterval {
		t.beginCheckpoint(j)
		return
	}
	t.startStep(j)
}

// beginCheckpoint starts a checkpoint of the current step.
func (t *Twin) beginCheckpoint(j *job) {
	j.lastCkptAttempt = t.now
	if j.mods.ckptFill {
		// A full volume fails the write at once (ENOSPC); training goes on.
		j.ckptFailures++
		t.startStep(j)
		return
	}
	j.wgen++
	w := &pendingWrite{
		gen: j.wgen, step: j.step, runSec: j.runSec,
		dur:  j.spec.CheckpointGB / (t.spec.Storage.BandwidthGBps * j.mods.ckptSlow),
		sync: j.spec.CheckpointMode == CheckpointSync,
		hung: j.mods.ckptPartition,
	}
	j.write = w
	if j.killShot > 0 {
		j.killShot--
		t.schedule(secs(w.dur/2), evWriteKill, j.idx, w.gen, "")
	}
	if !w.hung {
		t.schedule(secs(w.dur), evWriteDone, j.idx, w.gen, "")
	}
	j.state = jobStalled
	t.setIdle(j)
	if !w.sync {
		t.schedule(j.spec.AsyncStall, evStallEnd, j.idx, j.gen, "")
	}
}

func (t *Twin) writeDone(j *job) {
	w := j.write
	j.write = nil
	j.ckpts = append(j.ckpts, checkpoint{step: w.step, at: t.now, runSec: w.runSec})
	if w.sync && j.state == jobStalled {
		j.state = jobRunning
		t.startStep(j)
	}
}

// enterHang stops the job's progress until the watchdog fires after d.
func (t *Twin) enterHang(j *job, d time.Duration) {
	if j.state == jobRunning {
		j.lostWorkSec += (t.now - j.stepStart).Seconds()
	}
	j.state = jobHung
	j.gen++
	j.hangSince = t.now
	for _, g := range j.ranks {
		// NCCL kernels spin waiting for peers: busy, little power.
		g.busy, g.act, g.tensor, g.dram, g.copyUtil, g.nvlinkMBps = 1, 0.25, 0, 0.02, 2, 0
		g.pcieRx, g.pcieTx = 0, 0
		t.addPCIeLoad(g)
	}
	t.schedule(d, evWatchdog, j.idx, j.gen, "")
}

// crash kills all of the job's processes at once; it restarts after the
// restart cost.
func (t *Twin) crash(j *job, reason string) { t.crashAfter(j, reason, 0) }

// crashRank kills one rank of the job: the others are stopped after the
// launcher's grace, then the job restarts after the restart cost.
func (t *Twin) crashRank(j *job, reason string) { t.crashAfter(j, reason, j.spec.StopGrace) }

func (t *Twin) crashAfter(j *job, reason string, grace time.Duration) {
	switch j.state {
	case jobRestarting, jobBlocked:
		return // already down
	case jobHung:
		j.downSince = j.hangSince
	case jobRunning:
		j.lostWorkSec += (t.now - j.stepStart).Seconds()
		j.downSince = t.now
	default:
		j.downSince = t.now
	}
	j.lastCrash = reason
	// Every worker container of the job exits with it; the kubelet
	// starts it again (kube_pod_container_status_restarts_total).
	j.exits++
	j.state = jobRestarting
	j.gen++
	j.write = nil // a partial checkpoint is discarded
	t.setIdle(j)
	t.schedule(grace+j.spec.RestartCost, evRestart, j.idx, j.gen, "")
}

// Relaunch stops the named job cleanly and launches it again after down,
// as happens in a healthy fleet every day: a resubmission, a new run, a
// deliberate restart to change a setting. The processes exit and free
// their HBM, and the new ones allocate it again and resume from the step
// the job stopped at; only the step in flight is redone. It is not a
// crash: the restart counter, the last crash and the checkpoints stay as
// they were. A job that is not running (down, blocked or hung) is left
// alone; an unknown job is an error wrapping ErrUnknownTarget.
func (t *Twin) Relaunch(name string, down time.Duration) error {
	j, ok := t.byJob[name]
	if !ok {
		return fmt.Errorf("relaunch job %q: %w", name, ErrUnknownTarget)
	}
	switch j.state {
	case jobRunning:
		j.lostWorkSec += (t.now - j.stepStart).Seconds()
	case jobStalled:
	default:
		return nil
	}
	j.downSince = t.now
	j.relaunching = true
	j.state = jobRestarting
	j.gen++
	j.write = nil
	t.setIdle(j)
	t.schedule(down, evRestart, j.idx, j.gen, "")
	return nil
}

// usable reports whether every rank of the job has a GPU and node to run on.
func (t *Twin) usable(j *job) bool {
	for _, g := range j.ranks {
		if !g.usable() || g.node.mods.drained || g.node.mods.pluginKilled {
			return false
		}
	}
	return true
}

// tryRestart restarts a crashed job from its newest readable checkpoint,
// or parks it as blocked while a rank has nowhere to run. Replacing the
// node (a scheduler moving the rank elsewhere) is out of scope: the job
// waits for the fault to be reverted, as a fixed-placement job would.
func (t *Twin) tryRestart(j *job) {
	if !t.usable(j) {
		j.state = jobBlocked
		return
	}
	if j.relaunching {
		// A clean relaunch resumes where the job stopped: it lost only
		// the step in flight, and is no restart of the job.
		j.relaunching = false
		j.downSec += (t.now - j.downSince).Seconds()
		t.resume(j, false)
		return
	}
	c := j.ckpts[0]
	for i := len(j.ckpts) - 1; i >= 0; i-- {
		if !j.ckpts[i].corrupt {
			c = j.ckpts[i]
			break
		}
	}
	j.lostSteps += j.step - c.step
	j.lostWorkSec += j.runSec - c.runSec
	j.step, j.runSec, j.resumedFrom = c.step, c.runSec, c.step
	j.downSec += (t.now - j.downSince).Seconds()
	t.resume(j, true)
}

// resume starts the job stepping; counted says whether it is a restart.
func (t *Twin) resume(j *job, counted bool) {
	if counted {
		j.restarts++
	}
	j.state = jobRunning
	j.gen++
	j.lastCkptAttempt = t.now
	t.startStep(j)
}

// reconcile moves jobs whose blocking condition is gone: blocked jobs
// restart (after the restart cost), hung jobs resume, hung writes restart.
func (t *Twin) reconcile() {
	for _, j := range t.jobs {
		switch j.state {
		case jobBlocked:
			if t.usable(j) {
				j.state = jobRestarting
				j.gen++
				t.schedule(j.spec.RestartCost, evRestart, j.idx, j.gen, "")
			}
		case jobHung:
			if hung, _ := t.hangCondition(j); !hung {
				j.downSec += (t.now - j.hangSince).Seconds()
				j.state = jobRunning
				j.gen++
				t.startStep(j)
			}
		case jobRunning:
			if hung, d := t.hangCondition(j); hung {
				t.enterHang(j, d)
			}
		}
		if w := j.write; w != nil && w.hung && !j.mods.ckptPartition {
			w.hung = false
			t.schedule(secs(w.dur), evWriteDone, j.idx, w.gen, "")
		}
	}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// JobStatus is a training job's progress and accounting, as its own logs and
// a goodput dashboard would show them.
type JobStatus struct {
	Name string `json:"name"`
	// State is running, checkpointing, hung, restarting or blocked.
	State string `json:"state"`
	// Running is true while the job's processes are up (running,
	// checkpointing or hung); gpuchaos_job_up exports it.
	Running bool `json:"running"`
	// Step is the global training step; a restart sets it back to the
	// checkpoint it resumes from.
	Step int64 `json:"step"`
	// GoodSteps are steps whose work survived (Step, since every job
	// starts at step 0); StepsComputed counts every step ever finished,
	// LostSteps those thrown away by restarts.
	GoodSteps     int64 `json:"good_steps"`
	StepsComputed int64 `json:"steps_computed"`
	LostSteps     int64 `json:"lost_steps"`
	Restarts      int   `json:"restarts"`
	// LastCrash is why the job last went down ("" if never).
	LastCrash          string    `json:"last_crash,omitempty"`
	LastCheckpointStep int64     `json:"last_checkpoint_step"`
	LastCheckpointTime time.Time `json:"last_checkpoint_time"`
	CheckpointFailures int       `json:"checkpoint_failures"`
	ResumedFromStep    int64     `json:"resumed_from_step"`
	// LastStepSeconds is the last finished step's duration;
	// BaselineStepSeconds the healthy step time at creation.
	LastStepSeconds     float64 `json:"last_step_seconds"`
	BaselineStepSeconds float64 `json:"baseline_step_seconds"`
	// LostGPUSeconds is recomputed work plus time down, times ranks.
	LostGPUSeconds float64 `json:"lost_gpu_seconds"`
	// ProductiveSeconds is GoodSteps at the baseline step time: the time
	// the surviving work would have taken on the healthy cluster.
	ProductiveSeconds float64 `json:"productive_seconds"`
	// WallSeconds is the time since the twin started.
	WallSeconds float64 `json:"wall_seconds"`
	// Goodput is ProductiveSeconds / WallSeconds.
	Goodput float64 `json:"goodput"`
}

// Job returns a job's status, or false if there is no such job.
func (t *Twin) Job(name string) (JobStatus, bool) {
	j, ok := t.byJob[name]
	if !ok {
		return JobStatus{}, false
	}
	return t.status(j), true
}

func (t *Twin) status(j *job) JobStatus {
	last := j.ckpts[len(j.ckpts)-1]
	down := j.downSec
	switch j.state {
	case jobRestarting, jobBlocked:
		down += (t.now - j.downSince).Seconds()
	case jobHung:
		down += (t.now - j.hangSince).Seconds()
	}
	wall := t.now.Seconds()
	s := JobStatus{
		Name: j.spec.Name, State: j.state.String(), Running: j.processAlive(),
		Step: j.step, GoodSteps: j.step, StepsComputed: j.computed, LostSteps: j.lostSteps,
		Restarts: j.restarts, LastCrash: j.lastCrash,
		LastCheckpointStep: last.step, LastCheckpointTime: t.start.Add(last.at),
		CheckpointFailures: j.ckptFailures, ResumedFromStep: j.resumedFrom,
		LastStepSeconds: j.lastStepDur, BaselineStepSeconds: j.baseline,
		LostGPUSeconds:    (j.lostWorkSec + down) * float64(len(j.ranks)),
		ProductiveSeconds: float64(j.step) * j.baseline,
		WallSeconds:       wall,
	}
	if wall > 0 {
		s.Goodput = s.ProductiveSeconds / wall
	}
	return s
}
