package procfault

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// stateVersion is the layout of state; a reader refuses others.
const stateVersion = 1

// state is what Inject records for one key before it acts.
type state struct {
	Version int    `json:"version"`
	Key     string `json:"key"`
	Fault   string `json:"fault"`
	// Proc is the rank's process; Job and Rank say how it was found (an
	// empty Job: by the pid parameter).
	Proc    procfind.Proc `json:"proc"`
	Job     string        `json:"job,omitempty"`
	Rank    int           `json:"rank"`
	Created time.Time     `json:"created"`

	// Signal and Group are kill-rank's: what was sent, and whether to
	// the rank's process group.
	Signal string `json:"signal,omitempty"`
	Group  bool   `json:"group,omitempty"`

	// Straggler: the CPUs the rank used (measured or given), the
	// slowdown, and the cgroup that holds it.
	CPUs        float64             `json:"cpus,omitempty"`
	Slowdown    float64             `json:"slowdown,omitempty"`
	Confinement *cgroup.Confinement `json:"confinement,omitempty"`
	// PodQuota replaces Confinement for a rank in a pod's container
	// (Options.PodCgroups): the container group's quota, before and ours.
	PodQuota *podQuota `json:"pod_quota,omitempty"`

	// Mechanism is the straggler's mechanism; empty means cgroup-cpu,
	// the only one records of this version had before duty-cycle.
	Mechanism string `json:"mechanism,omitempty"`
	// Pacer is the duty-cycle pacer's process, nil in the record written
	// before it starts (Recover then only continues the rank: a pacer
	// whose injector died before recording it got its Pdeathsig).
	Pacer *procfind.Proc `json:"pacer,omitempty"`
}

// parseState decodes a record and checks what Recover relies on: a
// process identity a signal may safely reach and, for a straggler, a
// confinement of ours (cgroup-cpu) or a pacer identity that is neither
// the rank nor a group nor init (duty-cycle).
func parseState(b []byte) (state, error) {
	var st state
	if err := statedir.Decode(b, &st); err != nil {
		return state{}, err
	}
	if err := statedir.CheckHeader(st.Version, stateVersion, st.Key); err != nil {
		return state{}, err
	}
	if !st.Proc.Valid() {
		return state{}, fmt.Errorf("process %+v cannot be a rank", st.Proc)
	}
	switch st.Fault {
	case idKill:
		if _, ok := signals[st.Signal]; !ok {
			return state{}, fmt.Errorf("signal %q", st.Signal)
		}
	case idHang:
	case idStraggler:
		switch st.Mechanism {
		case mechDutyCycle:
			if st.Confinement != nil || st.PodQuota != nil {
				return state{}, errors.New("duty-cycle straggler with a confinement")
			}
			if st.Pacer != nil && (!st.Pacer.Valid() || st.Pacer.PID == st.Proc.PID) {
				return state{}, fmt.Errorf("pacer %+v cannot be ours", *st.Pacer)
			}
			return st, nil
		case "", mechCgroupCPU:
		default:
			return state{}, fmt.Errorf("straggler mechanism %q is not this package's", st.Mechanism)
		}
		if st.Pacer != nil {
			return state{}, errors.New("cgroup-cpu straggler with a pacer")
		}
		if st.PodQuota != nil {
			if st.Confinement != nil {
				return state{}, errors.New("straggler with both a confinement and a pod quota")
			}
			if err := st.PodQuota.validate(); err != nil {
				return state{}, fmt.Errorf("pod quota: %w", err)
			}
			return st, nil
		}
		if st.Confinement == nil {
			return state{}, errors.New("straggler without a confinement")
		}
		if err := st.Confinement.Validate(); err != nil {
			return state{}, fmt.Errorf("confinement: %w", err)
		}
		if st.Confinement.Proc != st.Proc {
			return state{}, errors.New("confinement of another process")
		}
	default:
		return state{}, fmt.Errorf("fault %q is not this package's", st.Fault)
	}
	return st, nil
}
