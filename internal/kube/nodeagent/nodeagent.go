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

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/fault/nodeall"
	"github.com/gpuchaos/gpuchaos/internal/kube/nodefault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc"
)

// k8s is the target kind a NodeFault's mechanism is built for.
const k8s = "k8s"

// runs reports whether the agent runs mechanism m of fault f: the node's
// registry serves it on k8s.
func runs(f *catalog.Fault, m *catalog.Mechanism) bool {
	return slices.ContainsFunc(nodeall.Registry(), func(e fault.Entry) bool {
		return e.Serves(f.ID, m.Name) && slices.Contains(e.Targets, k8s)
	})
}

// APIMechanisms are the mechanisms the controller applies through the API
// server (deleting pods, cordoning and tainting nodes): those the
// catalogue builds for k8s that the node's registry does not run there. An
// agent skips NodeFaults that name one. The slice is new on every call.
func APIMechanisms() []string {
	var names []string
	for _, f := range catalog.All() {
		for i := range f.Mechanisms {
			m := &f.Mechanisms[i]
			if slices.Contains(m.Targets, k8s) && !runs(f, m) && !slices.Contains(names, m.Name) {
				names = append(names, m.Name)
			}
		}
	}
	return names
}

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
	// Client reaches the API server; required. NewClient builds it.
	Client Client
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
	opts    Options
	log     *slog.Logger
	ledger  *ledger.File
	applier *nodefault.Applier

	// wake asks the API loop for a pass; kick asks the expiry loop to
	// look at the ledger again.
	wake, kick chan struct{}
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
	a := &Agent{opts: opts, log: log, ledger: l, wake: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
	// A GPU target is looked up among this node's GPUs, none when it has
	// none; nil would take its index unchecked.
	gpus := opts.GPUs
	if gpus == nil {
		gpus = []gpu.Device{}
	}
	a.applier, err = nodefault.New(nodefault.Options{
		API: timed{opts.Client, opts.APITimeout}, Injector: a.injector, Agent: opts.Agent, Key: Key,
		Journal: ours{l}, Recorded: func() { signal(a.kick) }, GPUs: gpus, Prepare: a.prepare,
		Retry: opts.Retry, Logger: log, Now: opts.Now,
	})
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("node agent: %w", err)
	}
	return a, nil
}

// ours is the agent's view of the ledger: only the entries it wrote.
type ours struct{ *ledger.File }

func (o ours) Pending(ctx context.Context) ([]ledger.Entry, error) {
	all, err := o.File.Pending(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(e ledger.Entry) bool {
		_, _, ok := parseKey(e.Key)
		return !ok
	}), nil
}

// timed bounds each of the applier's API requests, so a server that
// stops answering without closing the connection holds up no pass for
// long.
type timed struct {
	c Client
	d time.Duration
}

func (t timed) Patch(ctx context.Context, nf *v1alpha1.NodeFault, patch []byte) error {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.c.Patch(ctx, nf, patch)
}

func (t timed) PatchStatus(ctx context.Context, nf *v1alpha1.NodeFault, patch []byte) error {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.c.PatchStatus(ctx, nf, patch)
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

// expiryLoop recovers every injection at its ExpiresAt from the ledger
// alone, so a fault ends on time whether or not the API server answers.
func (a *Agent) expiryLoop(ctx context.Context) {
	for {
		next, recovered := a.applier.RecoverExpired(ctx)
		if recovered {
			signal(a.wake) // the API server should hear of it
		}
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

// injector builds the node's injector for a fault and mechanism, refusing
// ones the agent does not run.
func (a *Agent) injector(f *catalog.Fault, m *catalog.Mechanism) (fault.Injector, error) {
	if !runs(f, m) {
		return nil, fmt.Errorf("spec.mechanism: %s of %s is not one this agent runs on a node", m.Name, f.ID)
	}
	return nodeall.Injector(f, m, a.opts.Env)
}

// watchLoop wakes the API loop on every change to the node's NodeFaults,
// watching again after the API server drops the watch or goes away.
func (a *Agent) watchLoop(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := a.opts.Client.Watch(ctx, a.opts.Node)
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

// pass lists the node's NodeFaults and applies each, then recovers
// ledger entries whose NodeFault is gone. It fails when the list fails
// or a NodeFault could not be brought to its state.
func (a *Agent) pass(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, a.opts.APITimeout)
	list, err := a.opts.Client.List(cctx, a.opts.Node)
	cancel()
	if err != nil {
		return fmt.Errorf("list NodeFaults of node %s: %w", a.opts.Node, err)
	}
	var errs []error
	live := map[string]bool{}
	api := APIMechanisms()
	for i := range list {
		nf := &list[i]
		if nf.Spec.NodeName != a.opts.Node || slices.Contains(api, nf.Spec.Mechanism) {
			continue
		}
		live[Key(nf)] = true
		if _, err := a.applier.Reconcile(ctx, nf); err != nil {
			errs = append(errs, fmt.Errorf("NodeFault %s: %w", nf.Name, err))
		}
	}
	if err := a.applier.RecoverGone(ctx, func(key string) bool { return live[key] }); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// prepare fills in what only the node knows of an injection: the pid of
// the pod's process (podParams) and, for a checkpoint fault, the pod
// (storageCtx).
func (a *Agent) prepare(ctx context.Context, f *catalog.Fault, nf *v1alpha1.NodeFault) (context.Context, map[string]string, error) {
	params, err := a.podParams(f, nf)
	if err != nil {
		return nil, nil, err
	}
	return a.storageCtx(ctx, f, nf), params, nil
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
	cctx, cancel := context.WithTimeout(ctx, a.opts.APITimeout)
	defer cancel()
	return a.opts.Client.PatchNode(cctx, a.opts.Node, patch)
}
