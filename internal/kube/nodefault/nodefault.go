package nodefault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
)

// API is what the applier asks of the API server: JSON merge patches
// (RFC 7386) of one NodeFault, named by nf.Name. Each stores the server's
// answer in nf, so that the next patch carries the new resourceVersion.
// Errors are the API server's, as client-go returns them, so that
// apierrors.IsNotFound and apierrors.IsConflict tell them apart; a patch
// carrying metadata.resourceVersion is refused with a Conflict when the
// object changed since. ctx bounds each call. Implementations are safe
// for concurrent use.
type API interface {
	// Patch patches the NodeFault's object (its finalizers).
	Patch(ctx context.Context, nf *v1alpha1.NodeFault, patch []byte) error
	// PatchStatus patches it through the status subresource.
	PatchStatus(ctx context.Context, nf *v1alpha1.NodeFault, patch []byte) error
}

// Options configure New. Zero values take the documented defaults.
type Options struct {
	// API reaches the API server; required.
	API API
	// Injector returns the injector of mechanism m of fault f, or refuses
	// it with an error the NodeFault's status shows. It may return the
	// same injector every time (the controller's pod deletes remember
	// what they killed). Required.
	Injector func(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error)
	// Agent names the applier in NodeFault status; required.
	Agent string
	// Key is the injector's and the journal's key of a NodeFault; nil
	// means its name. What an injector leaves behind carries it (a
	// Node's gpuchaos.dev/cordoned-by annotation, a ledger entry), so a
	// caller keeps its key across versions.
	Key func(nf *v1alpha1.NodeFault) string
	// Journal, when set, records every injection before it acts and is
	// what the applier recovers from: the node agent's ledger, holding
	// only its own entries. Entries carry target ledger.Local, so that a
	// local recovery of the same ledger undoes them too. Nil means the
	// status is the only record.
	Journal ledger.Ledger
	// Recorded is called after an injection is recorded in the journal
	// and before it acts (the agent arms its expiry timer); nil does
	// nothing.
	Recorded func()
	// GPUs are the GPUs of the node the applier runs on, for Ref; nil
	// where it runs elsewhere (the controller).
	GPUs []gpu.Device
	// Prepare readies an injection with what only the node knows: the
	// parameters (a pod's pid found through its cgroup) and the context
	// the injector gets (a pod's checkpoint directory). A refusal is
	// reported Failed. Nil takes spec.params and ctx as they are.
	Prepare func(ctx context.Context, f *catalog.Fault, nf *v1alpha1.NodeFault) (context.Context, map[string]string, error)
	// InjectTimeout bounds one Inject, which is also cut at ExpiresAt;
	// zero leaves it to the injector, as the node's injectors, which
	// return on their own, want: their children may live on ctx.
	InjectTimeout time.Duration
	// Partial reports whether an Inject error leaves the fault in
	// effect, only in part (a drain a disruption budget held back): the
	// NodeFault is then Applied with the error as its message. Nil means
	// never.
	Partial func(error) bool
	// FailRecovery reports a recovery that failed as phase Failed with
	// the error, so that the engine waiting on the NodeFault learns at
	// once that the fault could not be undone (the controller: its
	// recoveries are API calls, retried with backoff). Without it the
	// phase stays and the message says the recovery is pending (the
	// agent: a recovery on a node can take a while, a process dying or a
	// namespace torn down, and it is retried from the journal until it
	// succeeds, so the fault is still in effect). Either way Reconcile
	// returns the error, so that its caller tries again.
	FailRecovery bool
	// Retry is how soon RecoverExpired tries again after a recovery that
	// failed or a journal it could not read; default 2s.
	Retry time.Duration
	// Logger receives the applier's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Applier applies NodeFaults. Reconcile may be called for different
// NodeFaults at once, but not for one NodeFault twice at once (the
// controller's queue and the agent's single pass both ensure it).
type Applier struct {
	opts Options
	log  *slog.Logger

	// node serialises what changes the node when there is a journal:
	// journal records, injections and recoveries, so that the expiry
	// timer never recovers a fault mid-injection. API calls are made
	// without it, so a hung API server never holds up a recovery at
	// ExpiresAt. Without a journal nothing is serialised: a drain can
	// wait minutes on a disruption budget while other NodeFaults go on.
	node sync.Mutex

	// mu guards owed.
	mu sync.Mutex
	// owed is the status each NodeFault should get that the API server
	// has not yet taken, by key: recoveries made while it was away, or
	// failures.
	owed map[string]report
}

// report is a status the applier owes a NodeFault.
type report struct {
	phase     v1alpha1.NodeFaultPhase
	appliedAt time.Time // zero when unknown
	at        time.Time
	message   string
	// keep holds the finalizer after a final report: the fault may
	// still be in effect and no journal remembers it.
	keep bool
}

// final reports whether r ends the NodeFault's life on the node.
func (r report) final() bool {
	return r.phase == v1alpha1.NodeFaultRecovered || r.phase == v1alpha1.NodeFaultFailed
}

// Result says when the caller should reconcile the NodeFault again.
type Result struct {
	// RequeueAfter, when positive, is when the NodeFault next needs a
	// look even if nothing changes: its ExpiresAt. An applier with its
	// own expiry timer may ignore it.
	RequeueAfter time.Duration
}

// New returns an applier.
func New(opts Options) (*Applier, error) {
	switch {
	case opts.API == nil:
		return nil, errors.New("NodeFault applier: no API client")
	case opts.Injector == nil:
		return nil, errors.New("NodeFault applier: no injectors")
	case opts.Agent == "":
		return nil, errors.New("NodeFault applier: no agent name")
	}
	if opts.Key == nil {
		opts.Key = func(nf *v1alpha1.NodeFault) string { return nf.Name }
	}
	if opts.Retry <= 0 {
		opts.Retry = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Applier{opts: opts, log: log, owed: map[string]report{}}, nil
}

// Ref is the inventory reference of nf's target on its node. gpus, when
// not nil, are the node's GPUs: a gpu target's index is looked up among
// them for its UUID and bus id, and refused when the node has no such
// GPU. Nil gpus (an applier off the node) take the index as it is.
func Ref(nf *v1alpha1.NodeFault, gpus []gpu.Device) (inventory.Ref, error) {
	t := nf.Spec.Target
	r := inventory.Ref{Kind: catalog.Scope(t.Kind), Node: nf.Spec.NodeName, Job: t.Job, UUID: t.UUID}
	if t.Rank != nil {
		r.Rank = *t.Rank
	}
	if t.GPU == nil {
		return r, nil
	}
	r.GPU = *t.GPU
	if gpus == nil {
		return r, nil
	}
	i := slices.IndexFunc(gpus, func(d gpu.Device) bool { return d.Index == *t.GPU })
	if i < 0 {
		return r, fmt.Errorf("spec.target.gpu: node %s has no GPU %d (it has %d)", nf.Spec.NodeName, *t.GPU, len(gpus))
	}
	d := gpus[i]
	if t.UUID != "" && t.UUID != d.UUID {
		return r, fmt.Errorf("spec.target.uuid: GPU %d of node %s is %s, not %s", d.Index, nf.Spec.NodeName, d.UUID, t.UUID)
	}
	r.GPU, r.UUID, r.PCI = d.Index, d.UUID, d.PCI
	return r, nil
}

// Reason names why nf is wanted undone at now: deleted, Action Recover,
// or past its ExpiresAt; empty while it is wanted in effect.
func Reason(nf *v1alpha1.NodeFault, now time.Time) string {
	switch {
	case nf.DeletionTimestamp != nil:
		return "the NodeFault is being deleted"
	case nf.Spec.Action == v1alpha1.ActionRecover:
		return "action Recover"
	case expired(nf, now):
		return "expiry"
	}
	return ""
}

// expired reports whether nf's ExpiresAt has come; a NodeFault without
// one never expires.
func expired(nf *v1alpha1.NodeFault, now time.Time) bool {
	return !nf.Spec.ExpiresAt.IsZero() && !now.Before(nf.Spec.ExpiresAt.Time)
}

// Reconcile makes what nf asks for true and reports it in nf's status.
// It returns an error when nf could not be brought to its state (the
// API server refused a write, a recovery failed), so that the caller
// tries again.
func (a *Applier) Reconcile(ctx context.Context, nf *v1alpha1.NodeFault) (Result, error) {
	key := a.opts.Key(nf)
	now := a.opts.Now()
	why := Reason(nf, now)
	finished := nf.Status.Phase == v1alpha1.NodeFaultRecovered || nf.Status.Phase == v1alpha1.NodeFaultFailed

	a.lockNode()
	e, inEffect, err := a.inEffect(ctx, key, nf)
	if err != nil {
		a.unlockNode()
		return Result{}, err
	}
	// applied: no injection is wanted. With a journal it is what the
	// journal holds; without one, a report of this generation.
	applied := inEffect
	if a.opts.Journal == nil {
		applied = nf.Status.Phase == v1alpha1.NodeFaultApplied && nf.Status.ObservedGeneration == nf.Generation
	}
	if inEffect && why != "" {
		if err := a.recoverLocked(ctx, e, "recovered on "+why); err != nil {
			a.unlockNode()
			return Result{}, a.recoveryFailed(ctx, nf, err)
		}
		applied = false
	}
	a.unlockNode()

	if nf.DeletionTimestamp != nil {
		// Nobody reads the status of what is going away.
		a.Forget(key)
		return Result{}, a.dropFinalizer(ctx, nf)
	}
	if owed, ok := a.owedReport(key); ok {
		if err := a.setStatus(ctx, nf, owed); err != nil {
			return Result{}, err
		}
		a.paid(key, owed)
		if owed.final() && !owed.keep {
			return Result{}, a.dropFinalizer(ctx, nf)
		}
		return a.untilExpiry(nf, now), nil
	}
	switch {
	case why == "" && applied && !finished:
		// In effect and wanted: make sure the API server knows, in case
		// the report after injecting was lost.
		if nf.Status.Phase != v1alpha1.NodeFaultApplied || nf.Status.ObservedGeneration != nf.Generation {
			if err := a.setStatus(ctx, nf, report{phase: v1alpha1.NodeFaultApplied, appliedAt: e.InjectedAt, at: now}); err != nil {
				return Result{}, err
			}
		}
		return a.untilExpiry(nf, now), nil
	case why != "" && !finished:
		// Wanted undone and not in effect (only a journal can tell): an
		// Applied status means an earlier agent recovered it and could
		// not say so; anything else was never applied.
		r := report{phase: v1alpha1.NodeFaultRecovered, at: now, message: "never applied; undone on " + why}
		if nf.Status.Phase == v1alpha1.NodeFaultApplied {
			r.message = "recovered on " + why + " by an earlier agent"
		} else if expired(nf, now) && nf.Spec.Action == v1alpha1.ActionApply {
			r = report{phase: v1alpha1.NodeFaultFailed, at: now, message: "expired at " + nf.Spec.ExpiresAt.UTC().Format(time.RFC3339) + " before the agent could apply it"}
		}
		if err := a.setStatus(ctx, nf, r); err != nil {
			return Result{}, err
		}
		return Result{}, a.dropFinalizer(ctx, nf)
	case why == "" && !finished:
		return a.apply(ctx, nf)
	}
	return Result{}, nil
}

// Forget drops what the applier owes the NodeFault of key: it is gone.
func (a *Applier) Forget(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.owed, key)
}

func (a *Applier) lockNode() {
	if a.opts.Journal != nil {
		a.node.Lock()
	}
}

func (a *Applier) unlockNode() {
	if a.opts.Journal != nil {
		a.node.Unlock()
	}
}

func (a *Applier) owedReport(key string) (report, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.owed[key]
	return r, ok
}

func (a *Applier) owe(key string, r report) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.owed[key] = r
}

// paid forgets r once the API server has it, unless a newer report came
// meanwhile.
func (a *Applier) paid(key string, r report) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.owed[key] == r {
		delete(a.owed, key)
	}
}

// inEffect returns the record of nf's injection if it may be in effect.
// With a journal, that is its entry. Without one, every NodeFault not
// reported Recovered may be, as far as the applier can tell, unless no
// injector of ours serves it. Must hold node.
func (a *Applier) inEffect(ctx context.Context, key string, nf *v1alpha1.NodeFault) (ledger.Entry, bool, error) {
	if a.opts.Journal != nil {
		pending, err := a.opts.Journal.Pending(ctx)
		if err != nil {
			return ledger.Entry{}, false, fmt.Errorf("read the journal: %w", err)
		}
		i := slices.IndexFunc(pending, func(e ledger.Entry) bool { return e.Key == key })
		if i < 0 {
			return ledger.Entry{}, false, nil
		}
		return pending[i], true, nil
	}
	if nf.Status.Phase == v1alpha1.NodeFaultRecovered {
		return ledger.Entry{}, false, nil
	}
	if _, _, err := a.injector(nf.Spec.Fault, nf.Spec.Mechanism); err != nil {
		return ledger.Entry{}, false, nil
	}
	e := ledger.Entry{Key: key, Run: nf.Name, Target: ledger.Local, Fault: nf.Spec.Fault, Mechanism: nf.Spec.Mechanism}
	if nf.Status.AppliedAt != nil {
		e.InjectedAt = nf.Status.AppliedAt.Time
	}
	return e, true, nil
}

// injector looks the fault and mechanism up in the catalogue and builds
// their injector.
func (a *Applier) injector(faultID, mechanism string) (fault.Injector, *catalog.Fault, error) {
	f, ok := catalog.Lookup(faultID)
	if !ok {
		return nil, nil, fmt.Errorf("spec.fault: %s is not in the catalogue", faultID)
	}
	m := f.Mechanism(mechanism)
	if m == nil {
		return nil, nil, fmt.Errorf("spec.mechanism: %s is not a mechanism of %s", mechanism, faultID)
	}
	inj, err := a.opts.Injector(f, m)
	if err != nil {
		return nil, nil, err
	}
	return inj, f, nil
}

// recoverLocked recovers one injection, marks it done in the journal and
// owes its NodeFault the report. It returns the injector's error when
// the fault may still be in effect. Must hold node.
func (a *Applier) recoverLocked(ctx context.Context, e ledger.Entry, why string) error {
	log := a.log.With("nodefault", e.Run, "fault", e.Fault, "key", e.Key)
	inj, _, err := a.injector(e.Fault, e.Mechanism)
	if err == nil {
		err = inj.Recover(ctx, e.Key)
	}
	switch ledger.Outcome(err) {
	case ledger.Recovered:
	case ledger.Gone:
		why += "; target gone: " + err.Error()
	default:
		log.Warn("recovery pending", "err", err)
		return err
	}
	if a.opts.Journal != nil {
		if err := a.opts.Journal.Done(ctx, e.Key); err != nil {
			log.Warn("recovered but the journal could not mark it done", "err", err)
			return err
		}
	}
	log.Info("recovered", "why", why)
	a.owe(e.Key, report{phase: v1alpha1.NodeFaultRecovered, appliedAt: e.InjectedAt, at: a.opts.Now(), message: why})
	return nil
}

// recoveryFailed reports a recovery that did not finish (FailRecovery
// says how) and returns its error.
func (a *Applier) recoveryFailed(ctx context.Context, nf *v1alpha1.NodeFault, err error) error {
	r := report{phase: nf.Status.Phase, at: a.opts.Now(), message: "recovery pending: " + err.Error()}
	if a.opts.FailRecovery {
		r = report{phase: v1alpha1.NodeFaultFailed, at: r.at, message: "recover: " + err.Error()}
	}
	err = fmt.Errorf("recover NodeFault %s: %w", nf.Name, err)
	if serr := a.setStatus(ctx, nf, r); serr != nil {
		return errors.Join(err, serr)
	}
	return err
}

// apply injects nf: everything checked first, then the finalizer (a
// delete must wait for recovery), then the journal record, then the
// injection, then the report.
func (a *Applier) apply(ctx context.Context, nf *v1alpha1.NodeFault) (Result, error) {
	key := a.opts.Key(nf)
	log := a.log.With("nodefault", nf.Name, "node", nf.Spec.NodeName, "fault", nf.Spec.Fault, "mechanism", nf.Spec.Mechanism)
	fail := func(err error) (Result, error) {
		log.Warn("not applied", "err", err)
		return Result{}, a.setStatus(ctx, nf, report{phase: v1alpha1.NodeFaultFailed, at: a.opts.Now(), message: err.Error()})
	}
	inj, f, err := a.injector(nf.Spec.Fault, nf.Spec.Mechanism)
	if err != nil {
		return fail(err)
	}
	ictx, params := ctx, nf.Spec.Params
	if a.opts.Prepare != nil {
		if ictx, params, err = a.opts.Prepare(ctx, f, nf); err != nil {
			return fail(err)
		}
	}
	values, err := f.Resolve(params)
	if err != nil {
		return fail(fmt.Errorf("spec.params: %w", err))
	}
	ref, err := Ref(nf, a.opts.GPUs)
	if err != nil {
		return fail(err)
	}
	if err := a.addFinalizer(ctx, nf); err != nil {
		return Result{}, err
	}

	a.lockNode()
	now := a.opts.Now()
	if expired(nf, now) {
		a.unlockNode()
		return Result{RequeueAfter: time.Millisecond}, nil // the next look reports it expired
	}
	entry := ledger.Entry{
		Key: key, Run: nf.Name, Target: ledger.Local, Fault: nf.Spec.Fault, Mechanism: nf.Spec.Mechanism,
		Params: params, Ref: ref, InjectedAt: now, Expires: nf.Spec.ExpiresAt.Time,
	}
	if a.opts.Journal != nil {
		if err := a.opts.Journal.Record(ctx, entry); err != nil {
			a.unlockNode()
			return Result{}, fmt.Errorf("record before injecting: %w", err)
		}
		if a.opts.Recorded != nil {
			a.opts.Recorded()
		}
	}
	ierr := a.inject(ictx, inj, nf, key, ref, values)
	switch {
	case ierr != nil && a.opts.Partial != nil && a.opts.Partial(ierr):
		a.unlockNode()
		log.Warn("applied in part", "err", ierr)
		r := report{phase: v1alpha1.NodeFaultApplied, appliedAt: now, at: now, message: ierr.Error()}
		return a.untilExpiry(nf, now), a.setStatus(ctx, nf, r)
	case ierr != nil:
		// The contract: after a failed Inject, Recover cleans up.
		keep := false
		if rerr := a.recoverLocked(ctx, entry, ""); rerr != nil {
			ierr = fmt.Errorf("%w (and recovery is pending: %v)", ierr, rerr)
			keep = a.opts.Journal == nil
		}
		r := report{phase: v1alpha1.NodeFaultFailed, at: a.opts.Now(), message: "inject: " + ierr.Error(), keep: keep}
		a.owe(key, r)
		a.unlockNode()
		log.Warn("inject failed", "err", ierr)
		return Result{}, a.setStatus(ctx, nf, r)
	}
	a.unlockNode()
	log.Info("applied", "target", ref.Key(), "expires", nf.Spec.ExpiresAt.Time)
	return a.untilExpiry(nf, now), a.setStatus(ctx, nf, report{phase: v1alpha1.NodeFaultApplied, appliedAt: now, at: now})
}

// inject calls the injector with the hold time the NodeFault's expiry
// sets, bounded by InjectTimeout and ExpiresAt when InjectTimeout is set.
func (a *Applier) inject(ctx context.Context, inj fault.Injector, nf *v1alpha1.NodeFault, key string, ref inventory.Ref, v catalog.Values) error {
	if !nf.Spec.ExpiresAt.IsZero() {
		ctx = fault.WithHoldUntil(ctx, nf.Spec.ExpiresAt.Time)
	}
	if a.opts.InjectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.opts.InjectTimeout)
		defer cancel()
		if !nf.Spec.ExpiresAt.IsZero() {
			var cancelAt context.CancelFunc
			ctx, cancelAt = context.WithDeadline(ctx, nf.Spec.ExpiresAt.Time)
			defer cancelAt()
		}
	}
	return inj.Inject(ctx, key, ref, v)
}

// untilExpiry asks for a look at ExpiresAt, when the fault recovers.
func (a *Applier) untilExpiry(nf *v1alpha1.NodeFault, now time.Time) Result {
	if nf.Spec.ExpiresAt.IsZero() {
		return Result{}
	}
	return Result{RequeueAfter: max(nf.Spec.ExpiresAt.Sub(now), time.Millisecond)}
}

// setStatus writes r as nf's status through the status subresource: a
// merge patch of what changed, carrying the resourceVersion read, so that
// a report made from a stale copy is refused rather than written over a
// newer one. A NodeFault gone meanwhile needs no report.
func (a *Applier) setStatus(ctx context.Context, nf *v1alpha1.NodeFault, r report) error {
	s := *nf.Status.DeepCopy()
	if r.phase != "" {
		s.Phase = r.phase
	}
	if !r.appliedAt.IsZero() && s.AppliedAt == nil {
		s.AppliedAt = &metav1.Time{Time: r.appliedAt}
	}
	if r.phase == v1alpha1.NodeFaultRecovered && s.RecoveredAt == nil {
		s.RecoveredAt = &metav1.Time{Time: r.at}
	}
	s.Message, s.Agent, s.ObservedGeneration = r.message, a.opts.Agent, nf.Generation
	patch, err := statusPatch(nf, s)
	if err != nil {
		return fmt.Errorf("write status %s of NodeFault %s: %w", r.phase, nf.Name, err)
	}
	if patch == nil {
		return nil
	}
	if err := a.opts.API.PatchStatus(ctx, nf, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("write status %s of NodeFault %s: %w", r.phase, nf.Name, err)
	}
	return nil
}

func (a *Applier) addFinalizer(ctx context.Context, nf *v1alpha1.NodeFault) error {
	if slices.Contains(nf.Finalizers, v1alpha1.FinalizerRecover) {
		return nil
	}
	// The resourceVersion keeps finalizers others add meanwhile.
	patch, err := finalizersPatch(nf, append(slices.Clone(nf.Finalizers), v1alpha1.FinalizerRecover))
	if err == nil {
		err = a.opts.API.Patch(ctx, nf, patch)
	}
	if err != nil {
		return fmt.Errorf("add finalizer %s to NodeFault %s: %w", v1alpha1.FinalizerRecover, nf.Name, err)
	}
	return nil
}

func (a *Applier) dropFinalizer(ctx context.Context, nf *v1alpha1.NodeFault) error {
	if !slices.Contains(nf.Finalizers, v1alpha1.FinalizerRecover) {
		return nil
	}
	rest := slices.DeleteFunc(slices.Clone(nf.Finalizers), func(s string) bool { return s == v1alpha1.FinalizerRecover })
	patch, err := finalizersPatch(nf, rest)
	if err == nil {
		err = a.opts.API.Patch(ctx, nf, patch)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer %s from NodeFault %s: %w", v1alpha1.FinalizerRecover, nf.Name, err)
	}
	return nil
}

// RecoverExpired recovers, from the journal alone, every injection whose
// ExpiresAt has come, so that a fault ends on time whether or not the API
// server answers; what it recovered is owed to the NodeFaults and
// written by the next Reconcile of each. It returns when it should run
// next (zero: no injection left; Retry from now after a failure) and
// whether it recovered any. Without a journal it does nothing.
func (a *Applier) RecoverExpired(ctx context.Context) (next time.Time, recovered bool) {
	if a.opts.Journal == nil {
		return time.Time{}, false
	}
	a.node.Lock()
	defer a.node.Unlock()
	pending, err := a.opts.Journal.Pending(ctx)
	if err != nil {
		a.log.Warn("read the journal", "err", err)
		return a.opts.Now().Add(a.opts.Retry), false
	}
	for _, e := range pending {
		now := a.opts.Now()
		if e.Expires.After(now) {
			if next.IsZero() || e.Expires.Before(next) {
				next = e.Expires
			}
			continue
		}
		if err := a.recoverLocked(ctx, e, "recovered on expiry"); err != nil {
			retry := now.Add(a.opts.Retry)
			if next.IsZero() || retry.Before(next) {
				next = retry
			}
			continue
		}
		recovered = true
	}
	return next, recovered
}

// RecoverGone recovers, from the journal, every injection whose NodeFault
// is gone (live says which keys still have one), and forgets what it
// owed NodeFaults that are gone. It returns the recoveries' errors; a
// failed one stays in the journal for the next call. Without a journal
// it only forgets.
func (a *Applier) RecoverGone(ctx context.Context, live func(key string) bool) error {
	var errs []error
	if a.opts.Journal != nil {
		a.node.Lock()
		pending, err := a.opts.Journal.Pending(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("read the journal: %w", err))
		}
		for _, e := range pending {
			if !live(e.Key) {
				if err := a.recoverLocked(ctx, e, "recovered: its NodeFault is gone"); err != nil {
					errs = append(errs, err)
				}
			}
		}
		a.node.Unlock()
	}
	a.mu.Lock()
	for k := range a.owed {
		if !live(k) {
			delete(a.owed, k) // nobody left to tell
		}
	}
	a.mu.Unlock()
	return errors.Join(errs...)
}
