package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/kube/kubetarget"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
)

// Reasons of a refused admission (condition Admitted=False).
const (
	ReasonNotOptedIn        = "NamespaceNotOptedIn"
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonMechanism         = "MechanismUnavailable"
	ReasonBlastRadius       = "BlastRadiusExceeded"
	ReasonSelector          = "SelectorMatchesNothing"
	ReasonProbe             = "ProbeUnavailable"
	ReasonInventory         = "InventoryUnreadable"
	ReasonAdmitted          = "Admitted"
	ReasonControllerRestart = "ControllerRestarted"
)

// refusal is an admission that failed for the Experiment's own reasons:
// written to its status, not retried.
type refusal struct{ reason, msg string }

func (e *refusal) Error() string { return e.reason + ": " + e.msg }

// seedOf derives a run's selection seed from its uid: stable across
// reconciles and restarts of one Experiment, different between runs.
func seedOf(exp *v1alpha1.Experiment) uint64 {
	h := fnv.New64a()
	h.Write([]byte(exp.UID))
	return h.Sum64()
}

// target builds the k8s target of one Experiment.
func (r *ExperimentReconciler) target(exp *v1alpha1.Experiment) (*kubetarget.Target, error) {
	return kubetarget.New(kubetarget.Options{
		Client: r.client, Reader: r.api, Watcher: r.watcher, Experiment: exp, Prometheus: r.opts.Prometheus,
		PollInterval: r.opts.PollInterval, RecoveryWindow: r.opts.RecoveryWindow, Concurrency: r.opts.Concurrency,
		Grace: r.opts.Grace, Logger: r.log,
	})
}

// admit checks, before anything is created on a node, everything that
// would make the run refuse or fail at once: the namespace's opt-in, the
// spec (as `gpuchaos run` validates it), a k8s mechanism for each fault,
// the blast radius, a selector that matches, and probes this target runs.
func (r *ExperimentReconciler) admit(ctx context.Context, exp *v1alpha1.Experiment) (*engine.Plan, error) {
	ok, err := r.namespaceOptedIn(ctx, exp.Namespace)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &refusal{ReasonNotOptedIn, fmt.Sprintf("namespace %s is not labelled %s=%s", exp.Namespace, v1alpha1.LabelChaos, v1alpha1.ChaosEnabled)}
	}
	if err := exp.Validate(engine.ValidateOptions()); err != nil {
		return nil, &refusal{ReasonInvalidSpec, err.Error()}
	}
	tgt, err := r.target(exp)
	if err != nil {
		return nil, err
	}
	eng := engine.New(engine.Options{Target: tgt, Seed: seedOf(exp)})
	plan, err := eng.Plan(ctx, exp)
	if err != nil {
		var fe *v1alpha1.FieldError
		switch {
		case errors.Is(err, catalog.ErrPlanned) || strings.Contains(err.Error(), ".mechanism:"):
			return nil, &refusal{ReasonMechanism, err.Error()}
		case errors.As(err, &fe) && fe.Path == "spec.blastRadius":
			return nil, &refusal{ReasonBlastRadius, err.Error()}
		case errors.As(err, &fe) && strings.HasPrefix(fe.Path, "spec.selector"):
			return nil, &refusal{ReasonSelector, err.Error()}
		case strings.HasPrefix(err.Error(), "read inventory"):
			return nil, fmt.Errorf("%s: %w", ReasonInventory, err)
		}
		return nil, &refusal{ReasonInvalidSpec, err.Error()}
	}
	for i, x := range exp.Spec.Expectations {
		spec := v1alpha1.ProbeSpec{Detector: x.Detector}
		if x.Probe != nil {
			spec = *x.Probe
		}
		if _, err := tgt.Probe(fmt.Sprintf("expectation-%d", i), spec); err != nil {
			return nil, &refusal{ReasonProbe, fmt.Sprintf("spec.expectations[%d]: %v", i, err)}
		}
	}
	for _, cs := range [][]v1alpha1.Check{exp.Spec.SteadyState, exp.Spec.AbortWhen} {
		for _, c := range cs {
			if _, err := tgt.Probe(c.Name, c.Probe); err != nil {
				return nil, &refusal{ReasonProbe, err.Error()}
			}
		}
	}
	return plan, nil
}

// admitAndStart admits a new Experiment and starts its run, or refuses it
// with phase Failed and condition Admitted=False.
func (r *ExperimentReconciler) admitAndStart(ctx context.Context, stored *v1alpha1.Experiment) (reconcile.Result, error) {
	r.mu.Lock()
	stopped := r.stopped
	r.mu.Unlock()
	if stopped {
		return reconcile.Result{}, nil
	}
	// The engine and validation see the spec as `gpuchaos run` does:
	// defaulted, with the apiVersion and kind the API server strips.
	exp := stored.DeepCopy()
	exp.APIVersion, exp.Kind = v1alpha1.GroupVersion, v1alpha1.KindExperiment
	exp.Default()
	plan, err := r.admit(ctx, exp)
	var ref *refusal
	if errors.As(err, &ref) {
		r.log.Info("refused", "experiment", client.ObjectKeyFromObject(exp), "reason", ref.reason, "message", ref.msg)
		r.event(stored, corev1.EventTypeWarning, ref.reason, "Admit", ref.msg)
		return reconcile.Result{}, r.finish(ctx, stored, v1alpha1.PhaseFailed, metav1.Condition{
			Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: ref.reason, Message: ref.msg})
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	// The finalizer goes on before any NodeFault exists.
	if !controllerutil.ContainsFinalizer(stored, v1alpha1.FinalizerRecover) {
		patch := client.MergeFrom(stored.DeepCopy())
		controllerutil.AddFinalizer(stored, v1alpha1.FinalizerRecover)
		if err := r.client.Patch(ctx, stored, patch); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	runCtx, cancel := context.WithCancelCause(context.Background())
	rn := &run{cancel: cancel, done: make(chan struct{})}
	r.mu.Lock()
	r.runs[exp.UID] = rn
	r.mu.Unlock()
	targets := plannedTargets(exp, plan)
	nodes := len(plan.Nodes)
	err = r.writeStatus(ctx, exp, func(s *v1alpha1.ExperimentStatus) {
		s.Phase = v1alpha1.PhaseRunning
		s.ObservedGeneration = exp.Generation
		now := metav1.Now()
		s.StartTime = &now
		s.PlannedNodes = nodes
		s.Targets = targets
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue,
			Reason: ReasonAdmitted, Message: fmt.Sprintf("%d injections on %d nodes", len(targets), nodes)})
	})
	if err != nil {
		cancel(err)
		close(rn.done)
		r.mu.Lock()
		delete(r.runs, exp.UID)
		r.mu.Unlock()
		return reconcile.Result{}, err
	}
	r.log.Info("running", "experiment", client.ObjectKeyFromObject(exp), "injections", len(targets), "nodes", nodes)
	r.event(stored, corev1.EventTypeNormal, "Started", "Run", fmt.Sprintf("%d injections on %d nodes", len(targets), nodes))
	go r.runExperiment(runCtx, exp, rn)
	return reconcile.Result{}, nil
}

func plannedTargets(exp *v1alpha1.Experiment, plan *engine.Plan) []v1alpha1.PlannedTarget {
	out := make([]v1alpha1.PlannedTarget, 0, len(plan.Injections))
	for _, in := range plan.Injections {
		out = append(out, v1alpha1.PlannedTarget{
			NodeFault: kubetarget.NodeFaultName(exp.UID, in.Key), Node: in.Ref.Node, Fault: in.Fault,
			Mechanism: in.Mechanism, Target: in.Ref.Key(), Phase: v1alpha1.NodeFaultPending,
		})
	}
	return out
}

// runExperiment runs the engine and reports as it goes, then writes the
// final phase. Clean-up (deleting recovered NodeFaults, the finalizer) is
// the reconciler's, once it sees the final phase.
func (r *ExperimentReconciler) runExperiment(ctx context.Context, exp *v1alpha1.Experiment, rn *run) {
	defer close(rn.done)
	log := r.log.With("experiment", client.ObjectKeyFromObject(exp))
	rep := &reporter{r: r, exp: exp}
	stop := rep.start(r.opts.StatusInterval)
	rec, err := func() (*engine.Record, error) {
		tgt, err := r.target(exp)
		if err != nil {
			return nil, err
		}
		eng := engine.New(engine.Options{Target: tgt, Seed: seedOf(exp), OnEvent: rep.event, Logger: log.With("component", "engine")})
		return eng.Run(ctx, exp)
	}()
	stop()
	cause := context.Cause(ctx)
	phase := v1alpha1.PhaseSucceeded
	switch {
	case errors.Is(cause, errAborted) || errors.Is(cause, errDeleted) || errors.Is(cause, errShutdown):
		phase = v1alpha1.PhaseAborted
	case rec != nil && rec.Aborted != "" && err == nil:
		phase = v1alpha1.PhaseAborted
	case err != nil || rec == nil || !rec.Passed():
		phase = v1alpha1.PhaseFailed
	}
	log.Info("finished", "phase", phase, "err", err)
	if rec != nil {
		observeVerdicts(exp.Namespace, exp.Name, rec)
	}
	werr := rep.flush(context.Background(), func(s *v1alpha1.ExperimentStatus) {
		s.Phase = phase
		now := metav1.Now()
		s.CompletionTime = &now
		if rec != nil {
			s.Verdicts, s.Passed = engine.StatusVerdicts(rec)
		}
		msg := "every NodeFault recovered"
		status := metav1.ConditionTrue
		if err != nil && strings.Contains(err.Error(), "left in the ledger") {
			status, msg = metav1.ConditionFalse, err.Error()
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: v1alpha1.ConditionRecovered, Status: status, Reason: "RunEnded", Message: msg})
		if cause != nil {
			meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: v1alpha1.ConditionRecovered, Status: status, Reason: "Stopped", Message: context.Cause(ctx).Error() + "; " + msg})
		}
		if err != nil && cause == nil {
			addEvents(s, 0, v1alpha1.EventStatus{Time: now, Kind: "error", Detail: err.Error()})
		}
	})
	if werr != nil {
		log.Error("final status", "err", werr)
	}
	r.event(exp, endEventType(phase), string(phase), "Run", endNote(rec, err, cause))
}

func endEventType(p v1alpha1.ExperimentPhase) string {
	if p == v1alpha1.PhaseSucceeded {
		return corev1.EventTypeNormal
	}
	return corev1.EventTypeWarning
}

// endNote says in one line how a run ended: its expectations, then why it
// stopped or failed.
func endNote(rec *engine.Record, err, cause error) string {
	var parts []string
	if rec != nil {
		_, passed := engine.StatusVerdicts(rec)
		parts = append(parts, passed+" expectations passed")
		if rec.Aborted != "" {
			parts = append(parts, "aborted: "+rec.Aborted)
		}
	}
	switch {
	case cause != nil:
		parts = append(parts, cause.Error())
	case err != nil:
		parts = append(parts, err.Error())
	}
	return strings.Join(parts, "; ")
}

// addEvents appends to the status's timeline, keeping the newest
// MaxStatusEvents, and counts them (with dropped, those capped before they
// reached it) in EventsTotal, so a follower knows what it missed.
func addEvents(s *v1alpha1.ExperimentStatus, dropped int, more ...v1alpha1.EventStatus) {
	s.EventsTotal = max(s.EventsTotal, len(s.Events)) + dropped + len(more)
	s.Events = appendCapped(s.Events, more...)
}

func appendCapped(evs []v1alpha1.EventStatus, more ...v1alpha1.EventStatus) []v1alpha1.EventStatus {
	evs = append(evs, more...)
	if n := len(evs) - v1alpha1.MaxStatusEvents; n > 0 {
		evs = append(evs[:0:0], evs[n:]...)
	}
	return evs
}

// reporter gathers a run's events and writes them, with the NodeFaults'
// phases, at most once per interval.
type reporter struct {
	r   *ExperimentReconciler
	exp *v1alpha1.Experiment

	mu         sync.Mutex
	pending    []v1alpha1.EventStatus
	dropped    int // events capped out of pending before a flush
	recovering bool
	dirty      bool
}

func (p *reporter) event(ev engine.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) == v1alpha1.MaxStatusEvents {
		p.dropped++
	}
	p.pending = appendCapped(p.pending, engine.StatusEvent(ev))
	if ev.Kind == "recover" {
		p.recovering = true
	}
	p.dirty = true
}

// start writes every interval while there is news; the returned func
// stops it.
func (p *reporter) start(interval time.Duration) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.mu.Lock()
				dirty := p.dirty
				p.mu.Unlock()
				if dirty {
					if err := p.flush(context.Background(), nil); err != nil {
						p.r.log.Warn("status", "experiment", client.ObjectKeyFromObject(p.exp), "err", err)
					}
				}
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// flush writes the gathered events, the NodeFaults' phases and the
// Injected/Recovered conditions, then more (the final fields).
func (p *reporter) flush(ctx context.Context, more func(*v1alpha1.ExperimentStatus)) error {
	var nfs v1alpha1.NodeFaultList
	if err := p.r.client.List(ctx, &nfs, client.MatchingLabels{
		v1alpha1.LabelExperiment: p.exp.Name, v1alpha1.LabelExperimentNamespace: p.exp.Namespace}); err != nil {
		return err
	}
	// An injection aimed at pods has a NodeFault per pod, all with its
	// label: it is as far on as the least advanced of them, and Failed if
	// one failed.
	phases := map[string]v1alpha1.NodeFaultPhase{}
	for _, nf := range nfs.Items {
		k := cmp.Or(nf.Labels[v1alpha1.LabelInjection], nf.Name)
		ph, seen := phases[k]
		if !seen || phaseOrder(nf.Status.Phase) < phaseOrder(ph) {
			phases[k] = nf.Status.Phase
		}
	}
	p.mu.Lock()
	evs, dropped := p.pending, p.dropped
	p.pending, p.dropped = nil, 0
	p.dirty = false
	recovering := p.recovering
	p.mu.Unlock()
	return p.r.writeStatus(ctx, p.exp, func(s *v1alpha1.ExperimentStatus) {
		addEvents(s, dropped, evs...)
		applied, recovered := 0, 0
		for i := range s.Targets {
			t := &s.Targets[i]
			if ph, ok := phases[t.NodeFault]; ok && ph != "" {
				t.Phase = ph
			}
			switch t.Phase {
			case v1alpha1.NodeFaultApplied:
				applied++
			case v1alpha1.NodeFaultRecovered:
				applied++
				recovered++
			}
		}
		if n := len(s.Targets); n > 0 {
			if applied == n {
				meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: v1alpha1.ConditionInjected, Status: metav1.ConditionTrue, Reason: "AllApplied", Message: fmt.Sprintf("%d NodeFaults applied", n)})
			}
			st := metav1.ConditionFalse
			if recovered == n {
				st = metav1.ConditionTrue
			}
			if recovering || recovered == n {
				meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: v1alpha1.ConditionRecovered, Status: st, Reason: "Recovering", Message: fmt.Sprintf("%d of %d NodeFaults recovered", recovered, n)})
			}
		}
		if recovering && s.Phase == v1alpha1.PhaseRunning {
			s.Phase = v1alpha1.PhaseRecovering
		}
		if more != nil {
			more(s)
		}
	})
}

// phaseOrder ranks NodeFault phases from the least advanced: a failure
// first, then not yet applied, applied, recovered.
func phaseOrder(p v1alpha1.NodeFaultPhase) int {
	switch p {
	case v1alpha1.NodeFaultFailed:
		return 0
	case v1alpha1.NodeFaultApplied:
		return 2
	case v1alpha1.NodeFaultRecovered:
		return 3
	}
	return 1
}
