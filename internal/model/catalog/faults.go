package catalog

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/model/xid"
)

// faults is the catalogue. It is built by a function rather than by init()
// in the family files, so that the order in which Go initialises files can
// never change the catalogue, and nothing writes to it afterwards.
var faults = buildCatalogue()

// buildCatalogue assembles the family files into one catalogue sorted by family order
// (Families) then id, and completes every fault with what all faults share:
// the twin mechanism, what an XID fault's code decides (completeXID), a
// check that rejects non-finite numbers, and empty rather than nil lists
// (parameters, a mechanism's targets and planned targets) so that JSON
// readers always see arrays.
func buildCatalogue() []*Fault {
	var all []*Fault
	for _, family := range [][]*Fault{
		hardwareFaults(), exhaustionFaults(), ncclFaults(), networkFaults(),
		ebpfFaults(), checkpointFaults(), numaFaults(), workloadFaults(),
	} {
		all = append(all, family...)
	}
	rank := make(map[Family]int)
	for i, f := range Families() {
		rank[f] = i
	}
	slices.SortStableFunc(all, func(a, b *Fault) int {
		return cmp.Or(cmp.Compare(rank[a.Family], rank[b.Family]), cmp.Compare(a.ID, b.ID))
	})
	for _, f := range all {
		if f.Params == nil {
			f.Params = []Param{}
		}
		completeXID(f)
		f.Mechanisms = append(f.Mechanisms, twinMechanism(f))
		for i := range f.Mechanisms {
			m := &f.Mechanisms[i]
			if m.Targets == nil {
				m.Targets = []string{}
			}
			if m.Planned == nil {
				m.Planned = []string{}
			}
		}
		f.Check = finiteFirst(f.Params, f.Check)
	}
	return all
}

// Mechanism returns the fault's mechanism of that name, or nil.
func (f *Fault) Mechanism(name string) *Mechanism {
	for i := range f.Mechanisms {
		if f.Mechanisms[i].Name == name {
			return &f.Mechanisms[i]
		}
	}
	return nil
}

// MechanismTwin is the name of the mechanism every fault has that plays its
// signature on the digital twin.
const MechanismTwin = "twin"

// MechanismKernelLog is the name of the mechanism that writes a hardware
// fault's driver line to the kernel log (kernelLogMechanism).
const MechanismKernelLog = "kernel-log"

// completeXID writes what a fault's XID code (Signature.XID) decides, so
// that the code is written once, in the signature: the driver's line of
// that code leads the signature's logs, the kernel-log mechanism's
// description names it, and a fault that names no effects of its own
// plays as that XID in the twin.
func completeXID(f *Fault) {
	code := f.Signature.XID
	if code == 0 {
		return
	}
	f.Signature.Logs = append([]string{xidLog(code)}, f.Signature.Logs...)
	for i := range f.Mechanisms {
		if m := &f.Mechanisms[i]; m.Name == MechanismKernelLog && m.Description == "" {
			what := fmt.Sprintf("the XID %d line", code)
			if m.xidNote != "" {
				what += " " + m.xidNote
			}
			m.Description = kernelLogDescription(what)
		}
	}
	if f.Signature.Effects == nil {
		f.Signature.Effects = fixedEffects(Effect{Kind: EffectXID, Code: code})
	}
}

// twinMechanism is the simulation every fault gets. It reaches every layer a
// real occurrence reaches, but only as the twin simulates them: nothing on a
// real node changes, which is why it is safe for any fault.
func twinMechanism(f *Fault) Mechanism {
	names := make([]string, len(f.Detectable))
	for i, l := range f.Detectable {
		names[i] = string(l)
	}
	return Mechanism{
		Name:    MechanismTwin,
		Targets: []string{"twin"},
		Reaches: slices.Clone(f.Detectable),
		Safety:  SafetySafe,
		Description: "Plays the fault's signature in the digital twin on its virtual clock. It reaches the twin's " +
			"simulated layers (" + strings.Join(names, ", ") + "), never a real node.",
	}
}

// finiteFirst puts a finiteness check in front of a fault's own check.
// strconv.ParseFloat accepts NaN and ±Inf, and a NaN passes every Min and Max
// comparison, so without this a fault would accept factor=NaN and hand the
// twin a NaN bandwidth.
func finiteFirst(params []Param, next func(Values) error) func(Values) error {
	var floats []string
	for _, p := range params {
		if p.Type == ParamFloat {
			floats = append(floats, p.Name)
		}
	}
	if len(floats) == 0 {
		return next
	}
	return func(v Values) error {
		for _, name := range floats {
			if x := v.Float(name); math.IsNaN(x) || math.IsInf(x, 0) {
				return &ParamError{Param: name, Err: fmt.Errorf("%v is not a finite number", x)}
			}
		}
		if next != nil {
			return next(v)
		}
		return nil
	}
}

// Targets of real mechanisms. A mechanism lists in Targets only the targets
// internal/fault/all has an injector for, and the others it is meant for in
// Planned. On k8s a node's agent runs the local injector of a node- or
// GPU-scope mechanism for its NodeFaults, and the controller runs the API
// mechanisms (internal/fault/kubefault) through the API server alone.
func targetsLocal() []string    { return []string{"local"} }
func targetsK8s() []string      { return []string{"k8s"} }
func targetsLocalK8s() []string { return []string{"local", "k8s"} }

// fixedEffects returns an Effects function that ignores the parameters. It builds a
// fresh slice on every call so that a caller changing the result cannot
// change the catalogue.
func fixedEffects(effects ...Effect) func(Values) []Effect {
	return func(Values) []Effect { return slices.Clone(effects) }
}

// The example GPU, process and pid of the signature log lines: the H200
// bus location used throughout DESIGN.md and a PyTorch rank's process name.
const (
	examplePCI     = "0000:18:00"
	examplePID     = 2345
	exampleProcess = "python3"
)

// xidLog is an example NVRM line for code, in the driver's exact format and
// with the catalogue text the XID table holds for it, so that the lines the
// catalogue shows are the lines our parser reads.
func xidLog(code int) string {
	return xid.FormatLine(examplePCI, code, examplePID, exampleProcess, "")
}

// The job series the twin and the workload exporter publish for a training
// job. dcgm-exporter sees GPUs, not jobs; these are what a goodput or
// step-time alert reads.
const (
	seriesJobStepSeconds        = "gpuchaos_rank_step_seconds"
	seriesJobStepsTotal         = "gpuchaos_job_step_total"
	seriesJobStepRate           = "gpuchaos_job_steps_per_second"
	seriesJobRestartsTotal      = "gpuchaos_job_restarts_total"
	seriesJobUp                 = "gpuchaos_job_up"
	seriesJobLastCheckpointStep = "gpuchaos_job_last_checkpoint_step"
	seriesJobCheckpointFails    = "gpuchaos_job_checkpoint_failures_total"
	seriesJobLastCheckpoint     = "gpuchaos_job_last_checkpoint_timestamp_seconds"
)
