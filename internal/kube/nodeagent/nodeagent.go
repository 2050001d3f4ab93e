package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/kube/kubeclient"

	"github.com/gpuchaos/gpuchaos/internal/fault/kubefault"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/fault/nodeall"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc"
)

// APIMechanisms are the mechanisms the controller applies through the API
// server (deleting pods, cordoning and tainting nodes); an agent skips
// NodeFaults that name one. The slice is new on every call.
func APIMechanisms() []string { return kubefault.Mechanisms() }

// KeyPrefix starts the ledger key of every injection an agent records, so
// that entries other runs wrote to the same ledger are left to them.
const KeyPrefix = "nodefault/"

// Key is the ledger and injector key of a NodeFault: its name and uid, so
// a NodeFault deleted and created again under the same name is another
// injection.
func Key(nf *v1alpha1.NodeFault) string { return KeyPrefix + nf.Name + "/" + string(nf.UID) }

// parseKey returns the name and uid a Key holds; ok is false for a key an
// agent did not write.
func parseKey(key string) (name string, uid types.UID, ok bool) {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return "", "", false
	}
	name, u, ok := strings.Cut(rest, "/")
	if !ok || name == "" || u == "" {
		return "", "", false
	}
	return name, types.UID(u), true
}

// Options configure New. Zero values take the documented defaults.
type Options struct {
	// Client reaches the API server; required. It must know the
	// gpuchaos.dev kinds (v1alpha1.AddToScheme) and core Nodes.
	Client client.WithWatch
	// Node is the name of this node's Node object; required.
	Node string
	// Ledger is the path of the journal every injection is recorded in
	// before it acts; required. Mechanisms that change the node keep
	// their records beside it (ledger.StateDir).
	Ledger string
	// Env is what the injectors get (nodeall.Env); an empty StateDir
	// means the one beside the ledger.
	Env fault.Env
	// GPUs are this node's GPUs: reported on the Node, and how a gpu
	// target's index becomes its UUID and bus id. Nil reports none.
	GPUs []gpu.Device
	// Agent names this agent in NodeFault status; empty means
	// "gpuchaos-agent/<node>".
	Agent string
	// Resync is how often the agent lists its NodeFaults besides
	// watching them, so a missed event costs at most this long; default
	// 30s.
	Resync time.Duration
	// Retry is how long the agent waits after a failed API call or a
	// recovery that did not finish before trying again; default 2s.
	Retry time.Duration
	// APITimeout bounds each API request; default 30s.
	APITimeout time.Duration
	// CgroupRoot is where the node's cgroup hierarchies are mounted, for
	// finding a pod's processes (podproc); empty means /sys/fs/cgroup.
	CgroupRoot string
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Agent applies one node's NodeFaults. Run it with Start.
type Agent struct {
	opts   Options
	log    *slog.Logger
	ledger *ledger.File

	// wake asks the API loop for a pass; kick asks the expiry loop to
	// look at the ledger again.
	wake, kick chan struct{}

	// mu serialises what changes the node: ledger records, injections
	// and recoveries, and owed. API calls are made without it, so a hung
	// API server never holds up a recovery at ExpiresAt.
	mu sync.Mutex
	// owed is the status each NodeFault should get that the API server
	// has not yet taken, by key: recoveries made while it was away, or
	// failures.
	owed map[string]report
}

// report is a status the agent owes a NodeFault.
type report struct {
	phase     v1alpha1.NodeFaultPhase
	appliedAt time.Time // zero when unknown
	at        time.Time
	message   string
}

// New opens the ledger. Nothing is applied or recovered before Start.
func New(opts Options) (*Agent, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("node agent: no API client")
	case opts.Node == "":
		return nil, errors.New("node agent: --node-name: the node's name is required")
	case opts.Ledger == "":
		return nil, errors.New("node agent: --ledger: a ledger path is required")
	}
	if opts.Env.StateDir == "" {
		opts.Env.StateDir = ledger.StateDir(opts.Ledger)
	}
	if opts.Agent == "" {
		opts.Agent = "gpuchaos-agent/" + opts.Node
	}
	if opts.Resync <= 0 {
		opts.Resync = 30 * time.Second
	}
	if opts.Retry <= 0 {
		opts.Retry = 2 * time.Second
	}
	if opts.APITimeout <= 0 {
		opts.APITimeout = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l, err := ledger.Open(opts.Ledger)
	if err != nil {
		return nil, fmt.Errorf("node agent: --ledger: %w", err)
	}
	return &Agent{
		opts: opts, log: log, ledger: l,
		wake: make(chan struct{}, 1), kick: make(chan struct{}, 1),
		owed: map[string]report{},
	}, nil
}

// Start runs the agent until ctx ends, then closes the ledger. Faults in
// effect stay in effect and in the ledger: the next agent recovers them
// when they expire or are no longer wanted, and a restart in between
// leaves a fault running rather than flapping it.
func (a *Agent) Start(ctx context.Context) error {
	defer a.ledger.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.expiryLoop(ctx) }()
	go func() { defer wg.Done(); a.watchLoop(ctx) }()
	a.apiLoop(ctx)
	wg.Wait()
	return nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sleep waits d or until ctx ends, saying whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ours returns the agent's pending ledger entries.
func (a *Agent) ours(ctx context.Context) ([]ledger.Entry, error) {
	all, err := a.ledger.Pending(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(e ledger.Entry) bool {
		_, _, ok := parseKey(e.Key)
		return !ok
	}), nil
}

// expiryLoop recovers every injection at its ExpiresAt from the ledger
// alone, so a fault ends on time whether or not the API server answers.
func (a *Agent) expiryLoop(ctx context.Context) {
	for {
		next := a.recoverExpired(ctx)
		wait := a.opts.Resync
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(a.opts.Now()), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// recoverExpired recovers the expired entries and returns when the next
// one expires (zero for none), or a retry time when a recovery failed.
func (a *Agent) recoverExpired(ctx context.Context) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	pending, err := a.ours(ctx)
	if err != nil {
		a.log.Warn("read ledger", "err", err)
		return a.opts.Now().Add(a.opts.Retry)
	}
	var next time.Time
	recovered := false
	for _, e := range pending {
		now := a.opts.Now()
		if e.Expires.After(now) {
			if next.IsZero() || e.Expires.Before(next) {
				next = e.Expires
			}
			continue
		}
		if err := a.recoverLocked(ctx, e, "recovered on its expiry "+e.Expires.UTC().Format(time.RFC3339)); err != nil {
			retry := now.Add(a.opts.Retry)
			if next.IsZero() || retry.Before(next) {
				next = retry
			}
			continue
		}
		recovered = true
	}
	if recovered {
		signal(a.wake) // the API server should hear of it
	}
	return next
}

// recoverLocked recovers one entry, marks it done and owes its NodeFault
// the report. It returns the injector's error when the fault may still be
// in effect. Must hold mu.
func (a *Agent) recoverLocked(ctx context.Context, e ledger.Entry, why string) error {
	log := a.log.With("nodefault", e.Run, "fault", e.Fault, "key", e.Key)
	inj, err := a.injector(e.Fault, e.Mechanism)
	if err == nil {
		err = inj.Recover(ctx, e.Key)
	}
	switch {
	case err == nil:
	case errors.Is(err, fault.ErrTargetGone) && !errors.Is(err, fault.ErrUnproven):
		why += "; target gone: " + err.Error()
	default:
		log.Warn("recovery pending", "err", err)
		return err
	}
	if err := a.ledger.Done(ctx, e.Key); err != nil {
		log.Warn("recovered but the ledger could not mark it done", "err", err)
		return err
	}
	log.Info("recovered", "why", why)
	a.owed[e.Key] = report{phase: v1alpha1.NodeFaultRecovered, appliedAt: e.InjectedAt, at: a.opts.Now(), message: why}
	return nil
}

// injector builds the local injector for a fault and mechanism, refusing
// ones the local registry does not run.
func (a *Agent) injector(faultID, mechanism string) (fault.Injector, error) {
	f, ok := catalog.Lookup(faultID)
	if !ok {
		return nil, fmt.Errorf("spec.fault: %s is not in the catalogue", faultID)
	}
	m := f.Mechanism(mechanism)
	if m == nil {
		return nil, fmt.Errorf("spec.mechanism: %s is not a mechanism of %s", mechanism, faultID)
	}
	local := slices.ContainsFunc(nodeall.Registry(), func(e fault.Entry) bool {
		return e.Serves(f.ID, m.Name) && slices.Contains(e.Targets, ledger.Local)
	})
	if !local {
		return nil, fmt.Errorf("spec.mechanism: %s of %s is not one this agent runs on a node", mechanism, faultID)
	}
	return nodeall.Injector(f, m, a.opts.Env)
}

// watchLoop wakes the API loop on every change to the node's NodeFaults,
// watching again after the API server drops the watch or goes away.
func (a *Agent) watchLoop(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := a.opts.Client.Watch(ctx, &v1alpha1.NodeFaultList{}, client.MatchingLabels{v1alpha1.LabelNode: a.opts.Node})
		if err != nil {
			if !sleep(ctx, a.opts.Retry) {
				return
			}
			continue
		}
		// Whatever changed while no watch ran is caught by one pass.
		signal(a.wake)
		for range w.ResultChan() {
			signal(a.wake)
		}
		w.Stop()
		if !sleep(ctx, a.opts.Retry/4) {
			return
		}
	}
}

// apiLoop makes the node match its NodeFaults on every wake-up, every
// Resync, and Retry after a pass that failed.
func (a *Agent) apiLoop(ctx context.Context) {
	reported := false
	down := false
	for ctx.Err() == nil {
		if !reported {
			if err := a.reportGPUs(ctx); err != nil {
				a.log.Warn("report GPUs on the node", "node", a.opts.Node, "err", err)
			} else {
				reported = true
			}
		}
		wait := a.opts.Resync
		if err := a.pass(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			if !down {
				a.log.Warn("pass failed, retrying; faults still expire on time", "err", err)
			}
			down, wait = true, a.opts.Retry
		} else if down {
			a.log.Info("pass succeeded again")
			down = false
		}
		if !reported {
			wait = min(wait, a.opts.Retry)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-a.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// pass lists the node's NodeFaults and reconciles each, then recovers
// ledger entries whose NodeFault is gone. It fails when the list fails
// or a NodeFault could not be brought to its state.
func (a *Agent) pass(ctx context.Context) error {
	var list v1alpha1.NodeFaultList
	cctx, cancel := a.call(ctx)
	defer cancel()
	if err := a.opts.Client.List(cctx, &list, client.MatchingLabels{v1alpha1.LabelNode: a.opts.Node}); err != nil {
		return fmt.Errorf("list NodeFaults of node %s: %w", a.opts.Node, err)
	}
	var errs []error
	live := map[string]bool{}
	for i := range list.Items {
		nf := &list.Items[i]
		if nf.Spec.NodeName != a.opts.Node || slices.Contains(APIMechanisms(), nf.Spec.Mechanism) {
			continue
		}
		live[Key(nf)] = true
		if err := a.reconcile(ctx, nf); err != nil {
			errs = append(errs, fmt.Errorf("NodeFault %s: %w", nf.Name, err))
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	pending, err := a.ours(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, e := range pending {
		if !live[e.Key] {
			if err := a.recoverLocked(ctx, e, "recovered: its NodeFault is gone"); err != nil {
				errs = append(errs, err)
			}
			delete(a.owed, e.Key) // nobody left to tell
		}
	}
	for k := range a.owed {
		if !live[k] {
			delete(a.owed, k)
		}
	}
	return errors.Join(errs...)
}

// pendingEntry returns the ledger entry of key, if the fault is applied.
// Must hold mu.
func (a *Agent) pendingEntry(ctx context.Context, key string) (ledger.Entry, bool, error) {
	pending, err := a.ours(ctx)
	if err != nil {
		return ledger.Entry{}, false, err
	}
	i := slices.IndexFunc(pending, func(e ledger.Entry) bool { return e.Key == key })
	if i < 0 {
		return ledger.Entry{}, false, nil
	}
	return pending[i], true, nil
}

// reconcile brings the node and nf's status to what nf asks.
func (a *Agent) reconcile(ctx context.Context, nf *v1alpha1.NodeFault) error {
	key := Key(nf)
	now := a.opts.Now()
	expired := !now.Before(nf.Spec.ExpiresAt.Time)
	finished := nf.Status.Phase == v1alpha1.NodeFaultRecovered || nf.Status.Phase == v1alpha1.NodeFaultFailed

	a.mu.Lock()
	e, applied, err := a.pendingEntry(ctx, key)
	if err != nil {
		a.mu.Unlock()
		return err
	}
	// why says why the fault is wanted undone; empty while it is wanted.
	var why string
	switch {
	case nf.DeletionTimestamp != nil:
		why = "the NodeFault is being deleted"
	case nf.Spec.Action == v1alpha1.ActionRecover:
		why = "action Recover"
	case expired:
		why = "its expiry " + nf.Spec.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if applied && why != "" {
		if err := a.recoverLocked(ctx, e, "recovered on "+why); err != nil {
			a.mu.Unlock()
			return a.setStatus(ctx, nf, report{phase: nf.Status.Phase, at: now, message: "recovery pending: " + err.Error()})
		}
		applied = false
	}
	owed, isOwed := a.owed[key]
	a.mu.Unlock()

	if nf.DeletionTimestamp != nil {
		return a.dropFinalizer(ctx, nf)
	}
	switch {
	case isOwed:
		if err := a.setStatus(ctx, nf, owed); err != nil {
			return err
		}
		a.mu.Lock()
		if a.owed[key] == owed {
			delete(a.owed, key)
		}
		a.mu.Unlock()
		if owed.phase == v1alpha1.NodeFaultRecovered || owed.phase == v1alpha1.NodeFaultFailed {
			return a.dropFinalizer(ctx, nf)
		}
		return nil
	case applied && !finished:
		// In effect and wanted: make sure the API server knows, in case
		// the report after injecting was lost.
		if nf.Status.Phase != v1alpha1.NodeFaultApplied || nf.Status.ObservedGeneration != nf.Generation {
			return a.setStatus(ctx, nf, report{phase: v1alpha1.NodeFaultApplied, appliedAt: e.InjectedAt, at: now})
		}
		return nil
	case why != "" && !finished:
		// Wanted undone and not in effect: an Applied status means an
		// earlier agent recovered it and could not say so; anything else
		// was never applied.
		r := report{phase: v1alpha1.NodeFaultRecovered, at: now, message: "never applied; undone on " + why}
		if nf.Status.Phase == v1alpha1.NodeFaultApplied {
			r.message = "recovered on " + why + " by an earlier agent"
		} else if expired && nf.Spec.Action == v1alpha1.ActionApply {
			r = report{phase: v1alpha1.NodeFaultFailed, at: now, message: "expired at " + nf.Spec.ExpiresAt.UTC().Format(time.RFC3339) + " before the agent could apply it"}
		}
		if err := a.setStatus(ctx, nf, r); err != nil {
			return err
		}
		return a.dropFinalizer(ctx, nf)
	case why == "" && !finished:
		return a.apply(ctx, nf)
	}
	return nil
}

// apply injects nf: finalizer first (a delete must wait for recovery),
// then the ledger record, then the injection, then the report.
func (a *Agent) apply(ctx context.Context, nf *v1alpha1.NodeFault) error {
	key := Key(nf)
	log := a.log.With("nodefault", nf.Name, "fault", nf.Spec.Fault, "mechanism", nf.Spec.Mechanism)
	fail := func(err error) error {
		log.Warn("not applied", "err", err)
		return a.setStatus(ctx, nf, report{phase: v1alpha1.NodeFaultFailed, at: a.opts.Now(), message: err.Error()})
	}
	inj, err := a.injector(nf.Spec.Fault, nf.Spec.Mechanism)
	if err != nil {
		return fail(err)
	}
	f, _ := catalog.Lookup(nf.Spec.Fault)
	params, err := a.podParams(f, nf)
	if err != nil {
		return fail(err)
	}
	values, err := f.Resolve(params)
	if err != nil {
		return fail(fmt.Errorf("spec.params: %w", err))
	}
	ref, err := a.ref(nf)
	if err != nil {
		return fail(err)
	}
	if err := a.addFinalizer(ctx, nf); err != nil {
		return err
	}

	a.mu.Lock()
	now := a.opts.Now()
	if !now.Before(nf.Spec.ExpiresAt.Time) {
		a.mu.Unlock()
		return nil // the next pass reports it expired
	}
	entry := ledger.Entry{
		Key: key, Run: nf.Name, Target: ledger.Local, Fault: nf.Spec.Fault, Mechanism: nf.Spec.Mechanism,
		Params: params, Ref: ref, InjectedAt: now, Expires: nf.Spec.ExpiresAt.Time,
	}
	if err := a.ledger.Record(ctx, entry); err != nil {
		a.mu.Unlock()
		return fmt.Errorf("record before injecting: %w", err)
	}
	signal(a.kick) // arm the expiry timer
	ierr := inj.Inject(fault.WithHoldUntil(a.storageCtx(ctx, f, nf), nf.Spec.ExpiresAt.Time), key, ref, values)
	if ierr != nil {
		// The contract: after a failed Inject, Recover cleans up.
		if rerr := a.recoverLocked(ctx, entry, ""); rerr != nil {
			ierr = fmt.Errorf("%w (and recovery is pending: %v)", ierr, rerr)
		}
		r := report{phase: v1alpha1.NodeFaultFailed, at: a.opts.Now(), message: "inject: " + ierr.Error()}
		a.owed[key] = r
		a.mu.Unlock()
		log.Warn("inject failed", "err", ierr)
		return a.setStatus(ctx, nf, r)
	}
	a.mu.Unlock()
	log.Info("applied", "target", ref.Key(), "expires", nf.Spec.ExpiresAt.Time)
	return a.setStatus(ctx, nf, report{phase: v1alpha1.NodeFaultApplied, appliedAt: now, at: now})
}

// podParams returns nf's params with the pid of its pod's process filled
// in: a rank in a pod is found through the pod's cgroup on this node
// (podproc), not by the environment variables a bare-metal rank carries,
// and the rank injectors take it as their pid parameter. For a network
// fault the pid names a network namespace, so it is the pod's own (its
// pause process's): that namespace lives as long as the pod, while an
// app container's process may restart. A pid the spec names is kept.
func (a *Agent) podParams(f *catalog.Fault, nf *v1alpha1.NodeFault) (map[string]string, error) {
	t := nf.Spec.Target
	if t.PodUID == "" || f.Param("pid") == nil || storageFault(f) {
		return nf.Spec.Params, nil
	}
	if p := nf.Spec.Params["pid"]; p != "" && p != "0" {
		return nf.Spec.Params, nil
	}
	var pid int
	var err error
	if f.ActsInNetNS() {
		var ns podproc.NetNS
		// A pod on the node's network (hostNetwork) is refused: its
		// "own" namespace is the node's, and every pod like it would be
		// hit.
		ns, err = podproc.NetNSOf(a.opts.CgroupRoot, t.PodUID)
		pid = ns.PID
	} else {
		pid, err = podproc.TargetPID(a.opts.CgroupRoot, t, "")
	}
	if err != nil {
		return nil, fmt.Errorf("spec.target.podUID: pod %s (%s) on node %s: %w", t.Pod, t.PodUID, a.opts.Node, err)
	}
	params := maps.Clone(nf.Spec.Params)
	if params == nil {
		params = map[string]string{}
	}
	params["pid"] = strconv.Itoa(pid)
	return params, nil
}

// ref is the inventory reference of nf's target on this node; a gpu is
// looked up by index among the node's GPUs, for its UUID and bus id.
func (a *Agent) ref(nf *v1alpha1.NodeFault) (inventory.Ref, error) {
	t := nf.Spec.Target
	r := inventory.Ref{Kind: catalog.Scope(t.Kind), Node: a.opts.Node, Job: t.Job, UUID: t.UUID}
	if t.Rank != nil {
		r.Rank = *t.Rank
	}
	if t.GPU != nil {
		i := slices.IndexFunc(a.opts.GPUs, func(d gpu.Device) bool { return d.Index == *t.GPU })
		if i < 0 {
			return r, fmt.Errorf("spec.target.gpu: node %s has no GPU %d (it has %d)", a.opts.Node, *t.GPU, len(a.opts.GPUs))
		}
		d := a.opts.GPUs[i]
		if t.UUID != "" && t.UUID != d.UUID {
			return r, fmt.Errorf("spec.target.uuid: GPU %d of node %s is %s, not %s", d.Index, a.opts.Node, d.UUID, t.UUID)
		}
		r.GPU, r.UUID, r.PCI = d.Index, d.UUID, d.PCI
	}
	return r, nil
}

// setStatus writes r as nf's status through the status subresource.
func (a *Agent) setStatus(ctx context.Context, nf *v1alpha1.NodeFault, r report) error {
	orig := nf.DeepCopy()
	s := &nf.Status
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
	cctx, cancel := a.call(ctx)
	defer cancel()
	if err := a.opts.Client.Status().Patch(cctx, nf, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("write status %s: %w", r.phase, err)
	}
	return nil
}

func (a *Agent) addFinalizer(ctx context.Context, nf *v1alpha1.NodeFault) error {
	if controllerutil.ContainsFinalizer(nf, v1alpha1.FinalizerRecover) {
		return nil
	}
	orig := nf.DeepCopy()
	controllerutil.AddFinalizer(nf, v1alpha1.FinalizerRecover)
	cctx, cancel := a.call(ctx)
	defer cancel()
	// The optimistic lock keeps finalizers others add meanwhile.
	if err := a.opts.Client.Patch(cctx, nf, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("add finalizer %s: %w", v1alpha1.FinalizerRecover, err)
	}
	return nil
}

func (a *Agent) dropFinalizer(ctx context.Context, nf *v1alpha1.NodeFault) error {
	if !controllerutil.ContainsFinalizer(nf, v1alpha1.FinalizerRecover) {
		return nil
	}
	orig := nf.DeepCopy()
	controllerutil.RemoveFinalizer(nf, v1alpha1.FinalizerRecover)
	cctx, cancel := a.call(ctx)
	defer cancel()
	if err := a.opts.Client.Patch(cctx, nf, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer %s: %w", v1alpha1.FinalizerRecover, err)
	}
	return nil
}

// call bounds one API request, so a server that stops answering
// without closing the connection holds up no pass for long.
func (a *Agent) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.opts.APITimeout)
}

// GPUReports are devs as an agent reports them on its Node.
func GPUReports(devs []gpu.Device) []v1alpha1.GPUReport {
	out := make([]v1alpha1.GPUReport, 0, len(devs))
	for _, d := range devs {
		out = append(out, v1alpha1.GPUReport{Index: d.Index, UUID: d.UUID, BusID: d.PCI, Model: d.Name})
	}
	return out
}

// reportGPUs sets the gpuchaos.dev/gpus annotation on the Node with a
// merge patch, leaving every other annotation as it is.
func (a *Agent) reportGPUs(ctx context.Context) error {
	b, err := json.Marshal(GPUReports(a.opts.GPUs))
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationGPUs: string(b)}}})
	if err != nil {
		return err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.opts.Node}}
	cctx, cancel := a.call(ctx)
	defer cancel()
	return a.opts.Client.Patch(cctx, node, client.RawPatch(types.MergePatchType, patch))
}

// Scheme returns a scheme with what an agent's client reads and writes:
// the built-in kinds (Nodes) and gpuchaos's (NodeFaults).
func Scheme() *runtime.Scheme { return kubeclient.Scheme }
