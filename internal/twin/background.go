package twin

import (
	"strconv"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// scheduleBackground draws the time to the next background failure: the
// cluster's failures form a Poisson process at the summed per-GPU-hour
// rate times the number of GPUs.
func (t *Twin) scheduleBackground() {
	rate := 0.0
	for _, c := range FailureClasses() {
		rate += t.spec.FailureRates[c]
	}
	rate *= float64(len(t.gpus)) // per hour
	if rate <= 0 {
		return
	}
	hours := t.failRNG.ExpFloat64() / rate
	if hours > 1e6 {
		return // beyond any run; also keeps the Duration from overflowing
	}
	t.schedule(time.Duration(hours*float64(time.Hour)), evBackground, 0, 0, "")
}

// backgroundFailure plays one random failure: a class drawn by rate, a GPU
// drawn uniformly, the class's typical effect, and a repair after the
// spec's repair time (or, for a network stall, just after the watchdog).
func (t *Twin) backgroundFailure() {
	defer t.scheduleBackground()
	total := 0.0
	for _, c := range FailureClasses() {
		total += t.spec.FailureRates[c]
	}
	x := t.failRNG.Float64() * total
	class := "other"
	for _, c := range FailureClasses() {
		if x < t.spec.FailureRates[c] {
			class = c
			break
		}
		x -= t.spec.FailureRates[c]
	}
	g := t.gpus[t.failRNG.IntN(len(t.gpus))]
	if g.mods.offBus {
		return // already out; a second failure on it changes nothing
	}
	ref := inventory.Ref{Kind: catalog.ScopeGPU, Node: g.node.name, GPU: g.index, UUID: g.uuid, PCI: g.pci}
	repair := t.spec.RepairTime
	var effects []catalog.Effect
	switch class {
	case "faulty-gpu":
		effects = []catalog.Effect{{Kind: catalog.EffectOffBus}}
	case "hbm3":
		effects = []catalog.Effect{{Kind: catalog.EffectECC, Code: 1}}
	case "sram":
		effects = []catalog.Effect{{Kind: catalog.EffectXID, Code: 95}}
	case "gsp":
		effects = []catalog.Effect{{Kind: catalog.EffectXID, Code: 119}}
	case "host":
		ref = inventory.Ref{Kind: catalog.ScopeNode, Node: g.node.name}
		effects = []catalog.Effect{{Kind: catalog.EffectNode, Mode: "drain"}}
	case "network":
		if g.job == nil {
			return
		}
		effects = []catalog.Effect{{Kind: catalog.EffectRank, Mode: "hang"}}
		repair = g.job.spec.WatchdogTimeout + time.Second
	default: // software, other: the process dies
		if g.job == nil {
			return
		}
		effects = []catalog.Effect{{Kind: catalog.EffectRank, Mode: "kill"}}
		repair = time.Second
	}
	t.bgCount++
	key := "background/" + strconv.Itoa(t.bgCount) + "/" + class
	if err := t.apply(key, ref, effects); err != nil {
		return // the target vanished under another fault; nothing to repair
	}
	t.schedule(max(repair, time.Second), evRepair, 0, 0, key)
}
