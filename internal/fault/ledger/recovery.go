package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// Outcomes of recovering one ledger entry.
const (
	// Recovered: the injector undid what the entry changed.
	Recovered = "recovered"
	// Gone: the injector proved that the target, and what the entry
	// changed with it, no longer exists; Detail holds the proof.
	Gone = "gone"
	// StillPending: the injector could neither undo the entry nor prove
	// it gone; the entry stays in the ledger and Detail says why.
	StillPending = "pending"
)

// Recovery is what became of one pending ledger entry.
type Recovery struct {
	Entry  Entry  `json:"entry"`
	Status string `json:"status"`
	// What names what the entry touched, for a person (Describe).
	What string `json:"what"`
	// Detail is the proof of a gone target or the reason an entry is
	// still pending; empty for a recovered one.
	Detail string `json:"detail,omitempty"`
	// Err is the injector's error behind a gone or pending outcome.
	Err error `json:"-"`
}

// Local is the target that entries recorded by a node's own injectors
// carry: a local run's and a node agent's alike, so that recovering the
// node's ledger undoes both.
const Local = "local"

// Recoverer is what recovering a ledger needs of a target: its kind (an
// entry is recovered only by the kind of target that recorded it) and its
// injectors. The kind is a plain name, as Entry.Target holds it, so that
// the ledger knows nothing of the targets that write it.
type Recoverer struct {
	// Kind names the target kind, as its entries' Target does.
	Kind string
	// Mechanisms is the target name the catalogue lists the kind's
	// mechanisms under (a kind may run another's).
	Mechanisms string
	// Injector returns the kind's injector for a fault's mechanism.
	Injector func(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error)
}

// RecoverPending recovers every injection the ledger still holds (a run
// killed before it could recover) through t's injectors and reports each:
// recovered or gone (marked done in the ledger), or still pending (left in
// the ledger for the next try, with the reason). It returns an error only
// when the ledger cannot be read; a pending entry is not an error here, the
// caller decides what it stops.
func RecoverPending(ctx context.Context, t Recoverer, l Ledger) ([]Recovery, error) {
	pending, err := l.Pending(ctx)
	if err != nil {
		return nil, fmt.Errorf("read pending injections: %w", err)
	}
	out := make([]Recovery, 0, len(pending))
	for _, e := range pending {
		r := Recovery{Entry: e, What: Describe(e.Fault, e.Ref, e.Params)}
		err := recoverEntry(ctx, t, e)
		r.Status = Outcome(err)
		if err != nil {
			r.Detail, r.Err = err.Error(), err
		}
		if r.Status != StillPending {
			if err := l.Done(ctx, e.Key); err != nil {
				r.Status, r.Detail, r.Err = StillPending, "recovered, but the ledger could not mark it done: "+err.Error(), err
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// Outcome classifies an injector's Recover error by the fault.Injector
// contract: nil is recovered, ErrTargetGone (without ErrUnproven) is gone,
// anything else leaves the injection pending.
func Outcome(err error) string {
	switch {
	case err == nil:
		return Recovered
	case errors.Is(err, fault.ErrTargetGone) && !errors.Is(err, fault.ErrUnproven):
		return Gone
	}
	return StillPending
}

// StillPendingIn returns the entries of rs left pending.
func StillPendingIn(rs []Recovery) []Recovery {
	return slices.DeleteFunc(slices.Clone(rs), func(r Recovery) bool { return r.Status != StillPending })
}

// PendingError is the error of a run that stops, or ends, with injections
// left in the ledger: it names each, so that whoever reads the one line
// knows what is still in effect and how to retry.
type PendingError struct {
	Ledger  string
	Entries []Recovery
}

func (e *PendingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d injection(s) still pending in ledger %s (retry with 'gpuchaos recover --ledger %s'): ", len(e.Entries), e.Ledger, e.Ledger)
	for i, r := range e.Entries {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s [%s]: %s", r.What, r.Entry.Key, r.Detail)
	}
	return b.String()
}

func recoverEntry(ctx context.Context, t Recoverer, e Entry) error {
	if e.Target != t.Kind {
		return fmt.Errorf("recorded on target %s, not %s", e.Target, t.Kind)
	}
	f, ok := catalog.Lookup(e.Fault)
	if !ok {
		return fmt.Errorf("fault %s is not in the catalogue", e.Fault)
	}
	// What was injected is recovered whatever its risk.
	mech, err := catalog.ChooseMechanism(f, e.Mechanism, t.Mechanisms, true)
	if err != nil {
		return err
	}
	inj, err := t.Injector(f, mech)
	if err != nil {
		return err
	}
	return inj.Recover(ctx, e.Key)
}

// identifying are the parameters that say where a fault acts, beyond its
// target ref: the interface and process of a network fault, the path of a
// checkpoint fault, the server of a storage partition.
var identifying = []string{"interface", "pid", "path", "server", "process", "cidr", "port", "min-port", "max-port"}

// Describe names what an injection touches in a few words, for recovery
// lines and errors: the fault, its target as its scope has it, and the
// parameters that locate it ("network.partition on node gpu-0 (interface
// eth0, pid 4242)").
func Describe(faultID string, r inventory.Ref, params map[string]string) string {
	var where string
	switch r.Kind {
	case catalog.ScopeGPU:
		where = fmt.Sprintf("gpu %d", r.GPU)
		if r.Node != "" {
			where += " on node " + r.Node
		}
	case catalog.ScopeRank:
		where = fmt.Sprintf("rank %d of job %s", r.Rank, r.Job)
		if r.Node != "" {
			where += " on node " + r.Node
		}
	case catalog.ScopeJob:
		where = "job " + r.Job
	default:
		where = "this node"
		if r.Node != "" {
			where = "node " + r.Node
		}
	}
	var extra []string
	for _, k := range identifying {
		if v := params[k]; v != "" && v != "0" {
			extra = append(extra, k+" "+v)
		}
	}
	if len(extra) > 0 {
		where += " (" + strings.Join(extra, ", ") + ")"
	}
	return faultID + " on " + where
}
