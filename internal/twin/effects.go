package twin

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
)

// xidPriority is the syslog level of NVRM Xid lines: the driver prints them
// with printk(KERN_ERR …) from os_log_error, so 3 (err), as the kernel-log
// injector (internal/fault/xidfault) writes them too. Log watchers (gpud, NPD)
// match the text, not the level.
const xidPriority = 3

// application is one applied key: its resolved targets and effects. While
// it is active its effects hold; the twin's modifiers are recomputed from
// all active applications whenever one comes or goes, so overlapping
// faults combine and revert in any order.
type application struct {
	key     string
	ref     inventory.Ref
	effects []catalog.Effect
	gpus    []*gpu
	nodes   []*node
	jobs    []*job
	// xidSet records GPUs whose XID_ERRORS this application set, so that
	// Revert clears only its own value.
	xidSet map[*gpu]float64
}

// Apply plays effects on ref under key. Applying a key that is already
// applied is a no-op; after Revert the key may be applied again. Errors
// wrap ErrUnknownTarget when ref is not in the inventory and ErrTargetGone
// when its GPU has fallen off the bus; nothing is applied then.
//
// The first Apply that succeeds pins the history: from then on Sleep keeps
// every sample from the retention before it onward (Options.Retention), so
// an experiment's probes can read back to their baselines until it ends.
func (t *Twin) Apply(key string, ref inventory.Ref, effects []catalog.Effect) error {
	if err := t.apply(key, ref, effects); err != nil {
		return err
	}
	if !t.pinned {
		t.pinned, t.pin = true, t.now
	}
	return nil
}

// apply is Apply without the pin, for the twin's own background failures:
// they are part of the cluster's life, not an experiment to keep history
// for.
func (t *Twin) apply(key string, ref inventory.Ref, effects []catalog.Effect) error {
	if _, ok := t.applied[key]; ok {
		return nil
	}
	a, err := t.resolve(ref)
	if err != nil {
		return fmt.Errorf("apply %s: %w", key, err)
	}
	for i, e := range effects {
		if err := validateEffect(e); err != nil {
			return fmt.Errorf("apply %s: effect %d: %w", key, i, err)
		}
	}
	a.key, a.ref = key, ref
	a.effects = slices.Clone(effects)
	a.xidSet = map[*gpu]float64{}
	t.applied[key] = a
	t.active = append(t.active, a)
	t.recompute()
	for _, e := range a.effects {
		t.fire(a, e)
	}
	t.reconcile()
	return nil
}

// Revert undoes the key's effects going forward: temperatures relax along
// the same first-order curve, a GPU that was off the bus or awaiting a
// reset comes back as after a reset (volatile ECC counters cleared),
// blocked jobs restart. Counters are not rewound. Unknown or already
// reverted keys return nil.
func (t *Twin) Revert(key string) error {
	a, ok := t.applied[key]
	if !ok {
		return nil
	}
	delete(t.applied, key)
	t.active = slices.DeleteFunc(t.active, func(x *application) bool { return x == a })
	wasGone := map[*gpu]bool{}
	for _, g := range a.gpus {
		wasGone[g] = !g.usable()
	}
	t.recompute()
	for g, code := range a.xidSet {
		if g.xidLast == code {
			g.xidLast = 0
		}
	}
	for _, g := range a.gpus {
		if wasGone[g] && g.usable() {
			// A reset clears volatile ECC counts and the remap-pending state.
			g.sbeVol, g.dbeVol = 0, 0
			g.uncPending = false
			g.xidLast = 0
			g.xid92Logged = false
		}
	}
	t.refreshIdle()
	t.reconcile()
	return nil
}

// resolve finds the GPUs, nodes and jobs a reference touches. A GPU effect
// on a node reaches every GPU of it; on a job every rank's GPU.
func (t *Twin) resolve(ref inventory.Ref) (*application, error) {
	a := &application{}
	switch ref.Kind {
	case catalog.ScopeGPU:
		n, ok := t.byNode[ref.Node]
		if !ok || ref.GPU < 0 || ref.GPU >= len(n.gpus) {
			return nil, fmt.Errorf("gpu %d on node %q: %w", ref.GPU, ref.Node, ErrUnknownTarget)
		}
		g := n.gpus[ref.GPU]
		if (ref.UUID != "" && ref.UUID != g.uuid) || (ref.PCI != "" && ref.PCI != g.pci) {
			return nil, fmt.Errorf("gpu %d on node %q has UUID %s, PCI %s: %w", ref.GPU, ref.Node, g.uuid, g.pci, ErrUnknownTarget)
		}
		if g.mods.offBus {
			return nil, fmt.Errorf("gpu %d on node %q is off the bus: %w", ref.GPU, ref.Node, ErrTargetGone)
		}
		a.gpus, a.nodes = []*gpu{g}, []*node{n}
		if g.job != nil {
			a.jobs = []*job{g.job}
		}
	case catalog.ScopeRank:
		j, ok := t.byJob[ref.Job]
		if !ok || ref.Rank < 0 || ref.Rank >= len(j.ranks) {
			return nil, fmt.Errorf("rank %d of job %q: %w", ref.Rank, ref.Job, ErrUnknownTarget)
		}
		g := j.ranks[ref.Rank]
		if g.mods.offBus {
			return nil, fmt.Errorf("rank %d of job %q: its gpu %d on %s is off the bus: %w", ref.Rank, ref.Job, g.index, g.node.name, ErrTargetGone)
		}
		a.gpus, a.nodes, a.jobs = []*gpu{g}, []*node{g.node}, []*job{j}
	case catalog.ScopeNode:
		n, ok := t.byNode[ref.Node]
		if !ok {
			return nil, fmt.Errorf("node %q: %w", ref.Node, ErrUnknownTarget)
		}
		a.nodes = []*node{n}
		for _, g := range n.gpus {
			if !g.mods.offBus {
				a.gpus = append(a.gpus, g)
			}
			if g.job != nil && !slices.Contains(a.jobs, g.job) {
				a.jobs = append(a.jobs, g.job)
			}
		}
	case catalog.ScopeJob:
		j, ok := t.byJob[ref.Job]
		if !ok {
			return nil, fmt.Errorf("job %q: %w", ref.Job, ErrUnknownTarget)
		}
		a.jobs, a.nodes = []*job{j}, j.nodes
		for _, g := range j.ranks {
			if !g.mods.offBus {
				a.gpus = append(a.gpus, g)
			}
		}
	default:
		return nil, fmt.Errorf("target kind %q: %w", ref.Kind, ErrUnknownTarget)
	}
	return a, nil
}

func validateEffect(e catalog.Effect) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s effect: "+format, append([]any{e.Kind}, args...)...)
	}
	modes := map[catalog.EffectKind][]string{
		catalog.EffectRowRemap:   {"pending", "failure"},
		catalog.EffectNVLink:     {"down", "errors"},
		catalog.EffectCollective: {"intra", "inter", "all", "hang"},
		catalog.EffectNetwork:    {"", "partition"},
		catalog.EffectCheckpoint: {"kill-writer", "fill", "slow", "partition", "corrupt"},
		catalog.EffectPowerCap:   {"", "brake"},
		catalog.EffectCompute:    {"", "numa-memory", "numa-cpu"},
		catalog.EffectRank:       {"kill", "hang"},
		catalog.EffectNode:       {"cordon", "drain", "device-plugin-kill", "pod-kill"},
		catalog.EffectHost:       {"memory", "cpu"},
	}
	switch e.Kind {
	case catalog.EffectXID:
		if e.Code <= 0 {
			return bad("code must be positive, got %d", e.Code)
		}
	case catalog.EffectOffBus, catalog.EffectECC, catalog.EffectVRAM, catalog.EffectPCIe,
		catalog.EffectRowRemap, catalog.EffectNVLink, catalog.EffectCollective,
		catalog.EffectNetwork, catalog.EffectCheckpoint, catalog.EffectRank, catalog.EffectNode:
	case catalog.EffectHost:
		if e.Value > 1 {
			return bad("value is a share of the NUMA node's memory or CPUs, got %g", e.Value)
		}
	case catalog.EffectCooling, catalog.EffectCompute:
		if !(e.Factor > 0) {
			return bad("factor must be positive, got %g", e.Factor)
		}
	case catalog.EffectPowerCap:
		if !(e.Factor > 0 && e.Factor <= 1) {
			return bad("factor must be in (0,1], got %g", e.Factor)
		}
	case catalog.EffectSMLoad:
		if !(e.Value > 0 && e.Value <= 1) {
			return bad("value must be in (0,1], got %g", e.Value)
		}
	default:
		return fmt.Errorf("unknown effect kind %q", e.Kind)
	}
	if ms, ok := modes[e.Kind]; ok && !slices.Contains(ms, e.Mode) {
		return bad("unknown mode %q (known: %v)", e.Mode, ms)
	}
	if e.Value < 0 || e.Factor < 0 || math.IsNaN(e.Value) || math.IsNaN(e.Factor) || math.IsInf(e.Value, 0) || math.IsInf(e.Factor, 0) {
		return bad("value and factor must be finite and non-negative")
	}
	if e.Kind == catalog.EffectVRAM && e.Value > 1 {
		return bad("value is a fraction of HBM, got %g", e.Value)
	}
	if e.Kind == catalog.EffectCompute && e.Mode != "" && e.Value > 1 {
		return bad("value is a share of the rank's memory or CPUs, got %g", e.Value)
	}
	return nil
}

// recompute rebuilds every modifier from the active applications.
func (t *Twin) recompute() {
	for _, g := range t.gpus {
		g.mods.reset()
	}
	for _, n := range t.nodes {
		n.mods.reset()
	}
	for _, j := range t.jobs {
		j.mods.reset()
	}
	for _, a := range t.active {
		for _, e := range a.effects {
			t.hold(a, e)
		}
	}
}

// hold applies the lasting part of an effect to the modifiers.
func (t *Twin) hold(a *application, e catalog.Effect) {
	factor := func(f float64) float64 {
		if f > 0 {
			return f
		}
		return 1
	}
	for _, g := range a.gpus {
		m := &g.mods
		switch e.Kind {
		case catalog.EffectXID:
			switch xidAction(e.Code) {
			case xid.ActionResetGPU:
				m.resetPending = true
			case xid.ActionReboot:
				m.offBus = true
			}
		case catalog.EffectOffBus:
			m.offBus = true
		case catalog.EffectECC:
			m.sbePerMin += e.Value
		case catalog.EffectRowRemap:
			if e.Mode == "pending" {
				m.remapPending = true
			} else {
				m.remapFailure = true
			}
		case catalog.EffectCooling:
			m.thermalFactor *= e.Factor
		case catalog.EffectPowerCap:
			m.powerCap = math.Min(m.powerCap, e.Factor)
			m.powerBrake = m.powerBrake || e.Mode == "brake"
		case catalog.EffectNVLink:
			if e.Mode == "down" {
				m.nvlinkDown = true
				m.nvlinkFallback = t.spec.Network.PCIeFallbackFactor
				if e.Factor > 0 && e.Factor < 1 {
					m.nvlinkFallback = e.Factor
				}
			} else {
				m.crcPerMin += e.Value
			}
		case catalog.EffectSMLoad:
			m.smLoad = math.Min(1, m.smLoad+e.Value)
		case catalog.EffectVRAM:
			m.vramFrac = math.Min(1, m.vramFrac+e.Value)
		case catalog.EffectPCIe:
			m.pcieBps += e.Value
			m.pcieFactor *= factor(e.Factor)
		case catalog.EffectCompute:
			m.computeFactor *= e.Factor
			switch e.Mode {
			case "numa-memory":
				m.numaRemoteMem = math.Max(m.numaRemoteMem, e.Value)
			case "numa-cpu":
				m.numaRemoteCPU = math.Max(m.numaRemoteCPU, e.Value)
			}
		case catalog.EffectHost:
			if e.Mode == "memory" {
				m.hostMemHog = math.Max(m.hostMemHog, e.Value)
			} else {
				m.hostCPUHog = math.Max(m.hostCPUHog, e.Value)
			}
		case catalog.EffectRank:
			if e.Mode == "hang" && g.job != nil {
				m.rankHung = true
				m.hangTimeout = e.Value
			}
		}
	}
	for _, n := range a.nodes {
		m := &n.mods
		switch e.Kind {
		case catalog.EffectNetwork:
			if e.Mode == "partition" {
				m.partitioned = true
			} else {
				m.netDelay += e.Value
				m.netFactor *= factor(e.Factor)
			}
		case catalog.EffectNode:
			switch e.Mode {
			case "cordon":
				m.cordoned = true
			case "drain":
				m.cordoned, m.drained = true, true
			case "device-plugin-kill":
				m.pluginKilled = true
			}
		}
	}
	for _, j := range a.jobs {
		m := &j.mods
		switch e.Kind {
		case catalog.EffectCollective:
			switch e.Mode {
			case "hang":
				m.collHang = true
				m.hangTimeout = e.Value
			case "intra":
				m.collIntra *= factor(e.Factor)
			case "inter":
				m.collInter *= factor(e.Factor)
			default:
				m.collIntra *= factor(e.Factor)
				m.collInter *= factor(e.Factor)
			}
		case catalog.EffectCheckpoint:
			switch e.Mode {
			case "fill":
				m.ckptFill = true
			case "slow":
				m.ckptSlow *= factor(e.Factor)
			case "partition":
				m.ckptPartition = true
			}
		}
	}
}

// fire plays the one-time part of an effect at Apply: kernel log lines,
// counter increments, crashes.
func (t *Twin) fire(a *application, e catalog.Effect) {
	switch e.Kind {
	case catalog.EffectXID:
		for _, g := range a.gpus {
			t.xidLine(a, g, e.Code)
			switch xidAction(e.Code) {
			case xid.ActionRestartApp, xid.ActionResetGPU, xid.ActionReboot:
				t.crashOn(g, "xid "+strconv.Itoa(e.Code))
			}
		}
	case catalog.EffectOffBus:
		for _, g := range a.gpus {
			t.xidLine(a, g, 79)
			t.crashOn(g, "gpu fell off the bus")
		}
	case catalog.EffectECC:
		for _, g := range a.gpus {
			if e.Value > 100 && !g.xid92Logged {
				g.xid92Logged = true
				t.xidLine(a, g, 92)
			}
			if e.Code > 0 {
				g.dbeVol += float64(e.Code)
				g.dbeAgg += float64(e.Code)
				// Every preset (Ampere and later) remaps HBM rows: the
				// driver marks the row of each uncorrectable error for
				// remapping at the next reset, so NVML's
				// nvmlDeviceGetRemappedRows counts it among the rows
				// "remapped due to uncorrectable errors" and reports the
				// remap pending (NVIDIA, "A100 GPU Memory Error
				// Management", docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt,
				// section Row Remapping; NVML API, nvmlRemappedRowsInfo_v2_t).
				g.uncorrRemap += float64(e.Code)
				g.uncPending = true
				t.xidLine(a, g, 48)
				t.crashOn(g, "uncorrectable ECC error")
			}
		}
	case catalog.EffectRowRemap:
		for _, g := range a.gpus {
			if e.Mode == "pending" {
				g.corrRemap++
				t.xidLine(a, g, 63)
			} else {
				g.uncorrRemap++
				t.xidLine(a, g, 64)
				t.crashOn(g, "row remap failure")
			}
		}
	case catalog.EffectNVLink:
		if e.Mode == "down" {
			for _, g := range a.gpus {
				// Every link of the GPU failed and went through the
				// link-level recovery (NVML_NVLINK_ERROR_DL_RECOVERY).
				g.nvlinkRecoveries += float64(g.model.NVLinks)
				if e.Code == 74 {
					t.xidLine(a, g, 74)
				}
			}
		}
	case catalog.EffectCheckpoint:
		for _, j := range a.jobs {
			switch e.Mode {
			case "kill-writer":
				if j.write != nil {
					t.crashRank(j, "checkpoint writer killed")
				} else {
					j.killShot++
				}
			case "corrupt":
				if n := len(j.ckpts); n > 1 {
					j.ckpts[n-1].corrupt = true
				}
			}
		}
	case catalog.EffectRank:
		if e.Mode == "kill" {
			for _, g := range a.gpus {
				t.crashOn(g, "rank killed")
			}
		}
	case catalog.EffectNode:
		if e.Mode == "drain" || e.Mode == "pod-kill" {
			for _, j := range a.jobs {
				t.crash(j, "pod evicted from node")
			}
		}
		t.replacePods(a.nodes, e.Mode)
	}
	t.refreshIdle()
}

// crashOn crashes the job whose rank runs on g, if any.
func (t *Twin) crashOn(g *gpu, reason string) {
	if g.job != nil {
		t.crashRank(g.job, reason)
	}
}

// xidLine writes an NVRM Xid line for g and sets its XID_ERRORS gauge. The
// pid is the rank's process, or unknown when no process owns the GPU.
func (t *Twin) xidLine(a *application, g *gpu, code int) {
	pid, name := -1, ""
	if g.job != nil && g.job.processAlive() {
		pid, name = g.job.pid+g.rank, "python3"
	}
	t.log(g.node, xidPriority, xid.FormatLine(g.pci, code, pid, name, ""))
	g.xidLast = float64(code)
	g.xidTimes = append(g.xidTimes, t.now.Seconds())
	a.xidSet[g] = float64(code)
}

func xidAction(code int) xid.Action {
	if in, ok := xid.Lookup(code); ok {
		return in.Action
	}
	return xid.ActionNone
}

// refreshIdle brings the activity of GPUs without a stepping job in line
// with the current modifiers (a copy storm on an idle GPU shows at once).
func (t *Twin) refreshIdle() {
	for _, g := range t.gpus {
		if g.job != nil && (g.job.state == jobRunning || g.job.state == jobHung) {
			continue
		}
		g.act, g.busy, g.tensor, g.dram, g.copyUtil, g.nvlinkMBps = 0, 0, 0, 0, 0, 0
		g.pcieRx, g.pcieTx = 0, 0
		t.addPCIeLoad(g)
	}
}

// Active returns the keys applied and not yet reverted, sorted: the twin's
// own view of what is injected, which conformance tests compare with what
// injectors believe.
func (t *Twin) Active() []string {
	keys := make([]string, 0, len(t.applied))
	for k := range t.applied {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
