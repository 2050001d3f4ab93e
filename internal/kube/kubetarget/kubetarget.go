// Package kubetarget is the Kubernetes target: its inventory is the
// cluster's nodes and training jobs' pods, its injections are NodeFault
// objects that node agents (or the controller's own NodeFault reconciler,
// for API mechanisms) apply and acknowledge, and its probes ask Prometheus
// (the built-in detectors and threshold probes included) or the API
// server. The controller (internal/kube/controller) builds one per Experiment with
// New; `gpuchaos run --target k8s` opens one from a kubeconfig.
package kubetarget

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe/kubeprobe"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe/promapi"
	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/tick"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
)

// Defaults of Options.
const (
	DefaultPollInterval   = 5 * time.Second
	DefaultRecoveryWindow = 5 * time.Minute
	// DefaultConcurrency is how many NodeFaults a run creates and waits on
	// at once: each costs one API call and a wait on the shared informer.
	DefaultConcurrency = 100
	// DefaultGrace is how long past a run's own window a NodeFault's
	// agent waits before it recovers on its own.
	DefaultGrace = 5 * time.Minute
)

// Options build a Target.
type Options struct {
	// Client writes NodeFaults and reads Nodes and Pods (a manager's
	// cached client is fine).
	Client client.Client
	// Reader reads NodeFaults past any cache, to tell a deleted one from
	// one the cache has not seen; nil uses Client.
	Reader client.Reader
	// Watcher wakes injections when their NodeFault changes.
	Watcher *Watcher
	// Experiment is the run's: its namespace and name label the
	// NodeFaults, its uid names them.
	Experiment *v1alpha1.Experiment
	// Prometheus is the server prometheus probes ask when they name none.
	Prometheus string
	// HTTP sends Prometheus requests; nil is http.DefaultClient.
	HTTP *http.Client
	// PollInterval, RecoveryWindow, Concurrency and Grace default to the
	// constants above.
	PollInterval   time.Duration
	RecoveryWindow time.Duration
	Concurrency    int
	Grace          time.Duration
	Logger         *slog.Logger
}

// Target is one Experiment's view of a cluster.
type Target struct {
	tick.Wall
	opts Options
	log  *slog.Logger
	stop func()

	mu   sync.Mutex
	pods map[string]PodRef // job/rank → pod, from the last inventory
	jobs []inventory.Job   // from the last inventory, ranks sorted
	// sent are the names of the NodeFaults each injection key was given,
	// recorded before they are created: Recover in this process asks
	// them all, including one whose Create failed or that was deleted.
	sent map[string][]string
	// touched are the nodes NodeFaults were created on, and began when
	// the first was: the scope of the kubernetes probes.
	touched map[string]bool
	began   time.Time

	// ruleClock is the clock of the detector and threshold probes; nil is
	// the wall clock. Tests replay a server's history through it.
	ruleClock func() time.Time
}

// New returns the target of one Experiment run by a process that already
// holds a client and a started cache (the controller).
func New(opts Options) (*Target, error) {
	if opts.Client == nil || opts.Watcher == nil || opts.Experiment == nil {
		return nil, errors.New("k8s target: a client, a watcher and the experiment are required")
	}
	if opts.Reader == nil {
		opts.Reader = opts.Client
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.RecoveryWindow == 0 {
		opts.RecoveryWindow = DefaultRecoveryWindow
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Target{opts: opts, log: log}, nil
}

// Kind is k8s.
func (*Target) Kind() target.Kind { return target.K8s }

// Inventory lists the cluster's nodes, their GPUs and the training jobs'
// ranks (see readInventory).
func (t *Target) Inventory(ctx context.Context) (inventory.Inventory, error) {
	inv, pods, err := readInventory(ctx, t.opts.Client, t.opts.Experiment.Namespace)
	if err != nil {
		return inv, err
	}
	t.mu.Lock()
	t.pods, t.jobs = pods, inv.Jobs
	t.mu.Unlock()
	return inv, nil
}

// Settings: no ledger, because the NodeFaults in the API server are the
// journal (a restarted controller finds them by label).
func (t *Target) Settings() target.Settings {
	return target.Settings{PollInterval: t.opts.PollInterval, RecoveryWindow: t.opts.RecoveryWindow, Concurrency: t.opts.Concurrency}
}

// Prepare has nothing to do: the cluster is already there.
func (*Target) Prepare(context.Context) error { return nil }

// Close stops what Open started.
func (t *Target) Close() error {
	if t.stop != nil {
		t.stop()
	}
	return nil
}

// Probe builds prometheus probes against the configured server, kubernetes
// probes through kubeprobe, and detector and threshold probes as their
// alerting rules evaluated on the configured server (promapi.RuleProbe):
// on a cluster the series the local target scrapes from one node's
// exporter are in Prometheus, scraped from every node's agent. Log probes
// and the kmsg-xid detector read one node's kernel log, which Prometheus
// does not hold; workload probes read a job's own pages, which this target
// does not scrape.
func (t *Target) Probe(name string, spec v1alpha1.ProbeSpec) (probe.Probe, error) {
	switch {
	case spec.Prometheus != nil:
		return promapi.FromSpec(name, *spec.Prometheus, t.opts.Prometheus, t.opts.HTTP)
	case spec.Kubernetes != nil:
		ks := *spec.Kubernetes
		if ks.Namespace == "" {
			ks.Namespace = t.opts.Experiment.Namespace
		}
		// Built once to refuse a bad spec now; observed through scoped,
		// which rebuilds it on the nodes touched so far.
		if _, err := kubeprobe.New(name, ks, t.opts.Client, nil, time.Time{}); err != nil {
			return nil, err
		}
		return &scoped{t: t, name: name, spec: ks}, nil
	case spec.Detector != "":
		d, ok := probe.LookupDetector(spec.Detector)
		if !ok {
			return nil, fmt.Errorf("detector %q is not a built-in detector", spec.Detector)
		}
		if name == "" {
			name = d.Name
		}
		if d.AlertRule() == nil {
			return nil, fmt.Errorf("probe %s: detector %s reads one node's kernel log, which is not in Prometheus; on k8s use %s", name, d.Name, xidInstead)
		}
		return t.ruleProbe(name, "detector "+d.Name, d.AlertRule())
	case spec.Threshold != nil:
		r, err := probe.ThresholdRule(name, *spec.Threshold)
		if err != nil {
			return nil, err
		}
		return t.ruleProbe(name, "threshold probe", r)
	case spec.Log != nil:
		return nil, fmt.Errorf("probe %s: log probes read one node's kernel log, which is not in Prometheus; on k8s use %s", name, xidInstead)
	case spec.Workload != nil:
		return nil, fmt.Errorf("probe %s: workload probes judge a job on its own scraped pages, which the k8s target does not read; use a prometheus probe on the job's series", name)
	}
	return nil, fmt.Errorf("probe %s defines nothing: set detector, threshold, prometheus or kubernetes", name)
}

// xidInstead is what a kernel-log probe becomes on a cluster: the agent
// turns XID lines into series.
const xidInstead = "detector dcgm-xid-errors, or a prometheus probe on the XID series the agent exports (DCGM_FI_DEV_XID_ERRORS, gpuchaos_xid_events_total)"

// ruleProbe evaluates rule on the configured Prometheus server.
func (t *Target) ruleProbe(name, what string, rule *rules.Rule) (probe.Probe, error) {
	if t.opts.Prometheus == "" {
		return nil, fmt.Errorf("probe %s: a %s on k8s is evaluated on the cluster's Prometheus, and none is configured: set the controller's --prometheus (chart value controller.prometheus)", name, what)
	}
	c, err := promapi.New(promapi.Options{URL: t.opts.Prometheus, Client: t.opts.HTTP})
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", name, err)
	}
	clock := t.ruleClock
	if clock == nil {
		clock = t.Now
	}
	return c.Rule(name, rule, clock)
}

// scoped is a kubernetes probe over the nodes the run has created
// NodeFaults on by the time of each observation, counting from the first:
// before injection it sees no node, so a node check does not hold.
type scoped struct {
	t    *Target
	name string
	spec v1alpha1.KubernetesProbe
}

func (s *scoped) Name() string { return s.name }

func (s *scoped) Observe(ctx context.Context) (probe.Observation, error) {
	s.t.mu.Lock()
	nodes := slices.Sorted(maps.Keys(s.t.touched))
	began := s.t.began
	s.t.mu.Unlock()
	if began.IsZero() {
		began = s.t.Now()
	}
	p, err := kubeprobe.New(s.name, s.spec, s.t.opts.Client, nodes, began)
	if err != nil {
		return probe.Observation{}, err
	}
	return p.Observe(ctx)
}

// Injector returns the injector that carries mechanism m of fault f to the
// node as a NodeFault. Which process applies it (the node's agent, or the
// controller for API mechanisms) is the NodeFault's business.
func (t *Target) Injector(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error) {
	if f == nil || m == nil {
		return nil, errors.New("an injector needs a fault and a mechanism")
	}
	if cm := f.Mechanism(m.Name); cm == nil || !slices.Contains(cm.Targets, string(target.K8s)) {
		return nil, fmt.Errorf("mechanism %s of %s does not run on target k8s", m.Name, f.ID)
	}
	return &injector{t: t, f: f, m: m}, nil
}

// NodeFaultName is the name of the NodeFault that carries injection key
// of the Experiment with uid: stable, so a repeated Inject finds the one
// it made, and within the 253 characters of a name.
func NodeFaultName(uid types.UID, key string) string {
	sum := sha256.Sum256([]byte(key))
	u := strings.ReplaceAll(string(uid), "-", "")
	if len(u) > 12 {
		u = u[:12]
	}
	return "gc-" + u + "-" + hex.EncodeToString(sum[:8])
}

type injector struct {
	t *Target
	f *catalog.Fault
	m *catalog.Mechanism
}

// nodeFaults builds the NodeFaults of one injection, one per place it
// acts (see aims). Each carries the injection's label; a NodeFault aimed
// at a pod the target chose is named after the key and the pod's uid, so
// names stay stable across a repeated Inject and within 253 characters.
func (in *injector) nodeFaults(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) ([]*v1alpha1.NodeFault, error) {
	t := in.t
	exp := t.opts.Experiment
	aims, fanned, err := t.aims(exp.Spec.Selector, in.f, in.m, ref)
	if err != nil {
		return nil, err
	}
	expires, ok := fault.HoldUntil(ctx)
	if !ok {
		expires = t.Now().Add(exp.Spec.Duration.Duration + max(t.opts.RecoveryWindow, 0))
	}
	expires = expires.Add(t.opts.Grace)
	params := map[string]string{}
	for _, p := range in.f.Params {
		params[p.Name] = fmt.Sprint(v[p.Name])
	}
	injection := NodeFaultName(exp.UID, key)
	out := make([]*v1alpha1.NodeFault, 0, len(aims))
	for _, a := range aims {
		tgt := v1alpha1.NodeFaultTarget{Kind: string(ref.Kind), UUID: ref.UUID, Key: ref.Key(), Job: a.Job, Pod: a.Pod, PodUID: a.PodUID}
		switch ref.Kind {
		case catalog.ScopeGPU:
			g := ref.GPU
			tgt.GPU = &g
		case catalog.ScopeRank:
			r := ref.Rank
			tgt.Rank = &r
			if ref.GPU != inventory.NoGPU {
				g := ref.GPU
				tgt.GPU = &g
			}
		}
		name := injection
		if fanned {
			name = NodeFaultName(exp.UID, key+"|"+a.PodUID)
		}
		out = append(out, &v1alpha1.NodeFault{
			ObjectMeta: metav1.ObjectMeta{
				Name: name,
				Labels: map[string]string{
					v1alpha1.LabelNode:                a.Node,
					v1alpha1.LabelExperiment:          exp.Name,
					v1alpha1.LabelExperimentNamespace: exp.Namespace,
					v1alpha1.LabelInjection:           injection,
				},
			},
			Spec: v1alpha1.NodeFaultSpec{
				NodeName: a.Node, Fault: in.f.ID, Mechanism: in.m.Name, Params: maps.Clone(params),
				Target: tgt, Action: v1alpha1.ActionApply, ExpiresAt: metav1.NewTime(expires.UTC().Truncate(time.Second)),
			},
		})
	}
	return out, nil
}

// Inject creates the injection's NodeFaults (once: an existing one is the
// same injection) and waits until whoever applies them reports every one
// Applied. The first to fail fails the injection, and the engine's Recover
// then undoes those that applied.
func (in *injector) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	nfs, err := in.nodeFaults(ctx, key, ref, v)
	if err != nil {
		return err
	}
	t := in.t
	t.mu.Lock()
	if t.touched == nil {
		t.touched, t.began = map[string]bool{}, t.Now()
	}
	if t.sent == nil {
		t.sent = map[string][]string{}
	}
	names := t.sent[key]
	for _, nf := range nfs {
		t.touched[nf.Spec.NodeName] = true
		if !slices.Contains(names, nf.Name) {
			names = append(names, nf.Name)
		}
	}
	t.sent[key] = names
	t.mu.Unlock()
	_, first := each(ctx, t.opts.Concurrency, len(nfs), true, func(ctx context.Context, i int) error {
		return in.injectOne(ctx, nfs[i])
	})
	return first
}

func (in *injector) injectOne(ctx context.Context, nf *v1alpha1.NodeFault) error {
	if err := in.t.opts.Client.Create(ctx, nf); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create NodeFault %s: %w", nf.Name, err)
	}
	name := nf.Name
	return in.t.opts.Watcher.Wait(ctx, name, func(nf *v1alpha1.NodeFault) (bool, error) {
		if nf == nil {
			return false, nil // created, not yet in the cache
		}
		if nf.Spec.Action == v1alpha1.ActionRecover {
			return false, fmt.Errorf("NodeFault %s is being recovered", name)
		}
		switch nf.Status.Phase {
		case v1alpha1.NodeFaultApplied:
			return true, nil
		case v1alpha1.NodeFaultFailed:
			return false, fmt.Errorf("NodeFault %s on node %s%s failed: %s", name, nf.Spec.NodeName, inPod(nf), agentSays(nf))
		case v1alpha1.NodeFaultRecovered:
			return false, fmt.Errorf("NodeFault %s on node %s%s recovered before it was reported applied: %s", name, nf.Spec.NodeName, inPod(nf), agentSays(nf))
		}
		return false, nil
	})
}

func inPod(nf *v1alpha1.NodeFault) string {
	if nf.Spec.Target.Pod == "" {
		return ""
	}
	return " (pod " + nf.Spec.Target.Pod + ")"
}

// each calls fn for 0..n-1, at most limit at once, and returns each
// call's error and the one that came first. With stop, the first error
// cancels the context of the calls still running and starts no more, so
// it is the one that says why.
func each(ctx context.Context, limit, n int, stop bool, fn func(context.Context, int) error) (errs []error, first error) {
	errs = make([]error, n)
	if n == 1 {
		errs[0] = fn(ctx, 0)
		return errs, errs[0]
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	sem := make(chan struct{}, max(limit, 1))
	for i := range n {
		sem <- struct{}{}
		mu.Lock()
		quit := stop && first != nil
		mu.Unlock()
		if quit {
			<-sem
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			err := fn(ctx, i)
			mu.Lock()
			defer mu.Unlock()
			errs[i] = err
			if err != nil && first == nil {
				first = err
				if stop {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	return errs, first
}

func agentSays(nf *v1alpha1.NodeFault) string {
	msg := nf.Status.Message
	if msg == "" {
		msg = "no message"
	}
	if nf.Status.Agent != "" {
		msg += " (" + nf.Status.Agent + ")"
	}
	return msg
}

// Recover asks for each of the injection's NodeFaults to be undone and
// waits until every one is reported Recovered. A NodeFault that does not
// exist was never created (nothing to undo) or was deleted: that counts
// as recovered only when it was seen Recovered before it went; deleted
// while applied, nobody can say whether its agent undid it, so the
// injection stays pending (fault.ErrUnproven). A Failed report under
// Recover is the agent saying it could not undo it: pending too.
//
// The NodeFaults are those this process's Inject made for key or, in a
// process that did not inject it (a controller taking over a run), those
// labelled with the injection, read from the API server.
func (in *injector) Recover(ctx context.Context, key string) error {
	names, err := in.names(ctx, key)
	if err != nil {
		return err
	}
	errs, _ := each(ctx, in.t.opts.Concurrency, len(names), false, func(ctx context.Context, i int) error {
		return in.recoverOne(ctx, names[i])
	})
	var bad []error
	for _, err := range errs {
		if err != nil {
			bad = append(bad, err)
		}
	}
	switch len(bad) {
	case 0:
		return nil
	case 1:
		return bad[0]
	}
	return &recoverErrors{n: len(names), errs: bad}
}

// recoverErrors are the failures of an injection's NodeFaults to recover,
// on one line.
type recoverErrors struct {
	n    int
	errs []error
}

func (e *recoverErrors) Error() string {
	msgs := make([]string, len(e.errs))
	for i, err := range e.errs {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("%d of %d NodeFaults not recovered: %s", len(e.errs), e.n, strings.Join(msgs, "; "))
}

func (e *recoverErrors) Unwrap() []error { return e.errs }

// names are the NodeFaults of injection key.
func (in *injector) names(ctx context.Context, key string) ([]string, error) {
	t := in.t
	t.mu.Lock()
	names, ok := t.sent[key]
	t.mu.Unlock()
	if ok {
		return slices.Clone(names), nil
	}
	injection := NodeFaultName(t.opts.Experiment.UID, key)
	var list v1alpha1.NodeFaultList
	if err := t.opts.Reader.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelInjection: injection}); err != nil {
		return nil, fmt.Errorf("list NodeFaults of injection %s: %w", key, err)
	}
	for _, nf := range list.Items {
		names = append(names, nf.Name)
	}
	if len(names) == 0 {
		// None, or one made before NodeFaults carried the label: its
		// name is the injection's.
		names = []string{injection}
	}
	slices.Sort(names)
	return names, nil
}

func (in *injector) recoverOne(ctx context.Context, name string) error {
	t := in.t
	var nf v1alpha1.NodeFault
	err := t.opts.Reader.Get(ctx, client.ObjectKey{Name: name}, &nf)
	if apierrors.IsNotFound(err) {
		return in.goneErr(name)
	}
	if err != nil {
		return fmt.Errorf("read NodeFault %s: %w", name, err)
	}
	if nf.Status.Phase == v1alpha1.NodeFaultRecovered {
		return nil
	}
	if err := SetRecover(ctx, t.opts.Client, &nf); apierrors.IsNotFound(err) {
		return in.goneErr(name)
	} else if err != nil {
		return err
	}
	var gen int64 = nf.Generation
	return t.opts.Watcher.Wait(ctx, name, func(nf *v1alpha1.NodeFault) (bool, error) {
		if nf == nil {
			var live v1alpha1.NodeFault
			err := t.opts.Reader.Get(ctx, client.ObjectKey{Name: name}, &live)
			if apierrors.IsNotFound(err) {
				return false, in.goneErr(name)
			}
			return false, err
		}
		switch nf.Status.Phase {
		case v1alpha1.NodeFaultRecovered:
			return true, nil
		case v1alpha1.NodeFaultFailed:
			if nf.Status.ObservedGeneration >= gen {
				return false, fmt.Errorf("NodeFault %s on node %s%s could not be recovered: %s: %w", name, nf.Spec.NodeName, inPod(nf), agentSays(nf), fault.ErrUnproven)
			}
		}
		return false, nil
	})
}

func (in *injector) goneErr(name string) error {
	phase, seen := in.t.opts.Watcher.lastPhase(name)
	switch {
	case !seen:
		// Never seen by this process: a key that was never injected
		// (the engine recovers what it recorded, including an Inject that
		// failed before its Create).
		return nil
	case phase == v1alpha1.NodeFaultRecovered:
		return nil
	}
	return fmt.Errorf("NodeFault %s was deleted while %s, so no agent reports its recovery: %w", name, phaseWord(phase), fault.ErrUnproven)
}

func phaseWord(p v1alpha1.NodeFaultPhase) string {
	if p == "" {
		return "unacknowledged"
	}
	return strings.ToLower(string(p))
}

// SetRecover sets a NodeFault's Action to Recover (a merge patch, so it
// cannot lose to a concurrent status write); nf is updated in place.
func SetRecover(ctx context.Context, c client.Client, nf *v1alpha1.NodeFault) error {
	if nf.Spec.Action == v1alpha1.ActionRecover {
		return nil
	}
	patch := client.MergeFrom(nf.DeepCopy())
	nf.Spec.Action = v1alpha1.ActionRecover
	if err := c.Patch(ctx, nf, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return err
		}
		return fmt.Errorf("set NodeFault %s to Recover: %w", nf.Name, err)
	}
	return nil
}
