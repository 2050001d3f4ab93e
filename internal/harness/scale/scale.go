package scale

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest/simagent"
)

// Driver is how a run's faults come to be: the part of the benchmark the
// controller will take over. Today [Direct] writes the NodeFaults itself,
// as the controller will; once the operator lands, a Driver that creates
// an Experiment and leaves the NodeFaults to an operator started in the
// benchmark's process measures the operator instead, with nothing else
// in the harness changed.
type Driver struct {
	// Name labels the driver in logs.
	Name string
	// Inject starts run: one NodeFault with Action Apply per target node,
	// each labelled v1alpha1.LabelExperiment=run, which is how the
	// harness finds them. It may return before they exist (an operator
	// creates them later); the harness times until all are Applied.
	Inject func(ctx context.Context, c client.Client, run string, targets []string) error
	// Recover sets Action Recover on every NodeFault of run, or asks for
	// it (an Experiment's abort or end). The harness times from its call
	// until all are Recovered.
	Recover func(ctx context.Context, c client.Client, run string) error
	// Cleanup, when set, ends run once all are Recovered (an operator
	// driver deletes its Experiment); the harness then deletes whatever
	// NodeFaults of run are left.
	Cleanup func(ctx context.Context, c client.Client, run string) error
}

// writers bounds Direct's writes in flight, as a controller's worker pool
// would.
const writers = 32

// Direct is the Driver that writes the NodeFaults itself, named and
// labelled as the controller names and labels them.
var Direct = Driver{
	Name: "direct",
	Inject: func(ctx context.Context, c client.Client, run string, targets []string) error {
		expires := metav1.NewTime(time.Now().Add(time.Hour))
		return kubetest.Parallel(ctx, len(targets), writers, func(ctx context.Context, i int) error {
			node, gpu := targets[i], 3
			nf := &v1alpha1.NodeFault{
				ObjectMeta: metav1.ObjectMeta{
					Name: run + "-" + node,
					Labels: map[string]string{
						v1alpha1.LabelNode:                node,
						v1alpha1.LabelExperiment:          run,
						v1alpha1.LabelExperimentNamespace: "default",
					},
				},
				Spec: v1alpha1.NodeFaultSpec{
					NodeName: node, Fault: "gpu.xid-79", Mechanism: "xid.kmsg-inject",
					Target:    v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &gpu, Key: node + "/3"},
					Action:    v1alpha1.ActionApply,
					ExpiresAt: expires,
				},
			}
			if err := c.Create(ctx, nf); err != nil {
				return fmt.Errorf("create NodeFault %s: %w", nf.Name, err)
			}
			return nil
		})
	},
	Recover: func(ctx context.Context, c client.Client, run string) error {
		var list v1alpha1.NodeFaultList
		if err := c.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelExperiment: run}); err != nil {
			return fmt.Errorf("list NodeFaults of %s: %w", run, err)
		}
		return kubetest.Parallel(ctx, len(list.Items), writers, func(ctx context.Context, i int) error {
			nf := &list.Items[i]
			// A merge patch carries no resourceVersion, so the agents'
			// status writes in between cannot make it conflict.
			patch := client.MergeFrom(nf.DeepCopy())
			nf.Spec.Action = v1alpha1.ActionRecover
			if err := c.Patch(ctx, nf, patch); err != nil {
				return fmt.Errorf("recover NodeFault %s: %w", nf.Name, err)
			}
			return nil
		})
	},
}

// Cluster is a test API server with kwok's fake GPU nodes and the
// simulated agents of all of them.
type Cluster struct {
	Env *kubetest.Env
	// Nodes are the fake nodes' names.
	Nodes []string
	// CreateNodes is how long creating the Nodes took; ReadyNodes how long
	// from the first create until kwok had made every one Ready.
	CreateNodes, ReadyNodes time.Duration
	Agents                  *simagent.Agents

	phases *phaseTracker
}

// NewCluster starts the control plane and kwok, creates n fake GPU nodes
// and waits until they are Ready, and starts simulated agents for all of
// them and an informer following NodeFaults for the harness. Everything
// stops when tb ends.
func NewCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	env := kubetest.Start(tb, kubetest.Options{CRDs: true})
	env.StartKWOK(tb, kubetest.KWOKOptions{})
	c := &Cluster{Env: env}
	began := time.Now()
	c.Nodes = kubetest.FakeNodeNames("gpu", n)
	nodes := make([]*corev1.Node, n)
	for i, name := range c.Nodes {
		nodes[i] = kubetest.FakeGPUNode(name, 8)
		if i%10 == 0 {
			nodes[i].Labels[LabelTarget] = "true"
		}
	}
	if err := kubetest.CreateNodes(context.Background(), env.Client, nodes, 0); err != nil {
		tb.Fatal(err)
	}
	c.CreateNodes = time.Since(began)
	// Generous: on two busy cores kwok readies a few hundred nodes a
	// second at best.
	env.WaitNodesReady(tb, c.Nodes, time.Duration(n)*100*time.Millisecond+2*time.Minute)
	c.ReadyNodes = time.Since(began)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	var err error
	c.Agents, err = simagent.New(env.Config, kubetest.Scheme(), simagent.Options{Nodes: c.Nodes})
	if err != nil {
		tb.Fatal(err)
	}
	wg.Go(func() {
		if err := c.Agents.Start(ctx); err != nil {
			tb.Errorf("simulated agents: %v", err)
		}
	})
	c.phases, err = trackPhases(ctx, tb, env, &wg)
	if err != nil {
		tb.Fatal(err)
	}
	select {
	case <-c.Agents.Synced():
	case <-time.After(2 * time.Minute):
		tb.Fatal("simulated agents' informer not synced in 2 min")
	}
	return c
}

// LabelTarget is on every tenth node, those [Cluster.Targets] returns, so
// an Experiment can select them by label.
const LabelTarget = "scale.gpuchaos.dev/target"

// Targets returns every tenth node, the 10 % a run touches.
func (c *Cluster) Targets() []string {
	var t []string
	for i := 0; i < len(c.Nodes); i += 10 {
		t = append(t, c.Nodes[i])
	}
	return t
}

// Timing is one run's figures.
type Timing struct {
	// Applied is from Inject's call until every target's NodeFault is
	// Applied; Recovered from Recover's call until every one is Recovered.
	Applied, Recovered time.Duration
}

// Run injects a fault on every target through d, waits until all are
// Applied, recovers them, waits until all are Recovered, and deletes
// them. within bounds each wait; past it tb fails, saying how many were
// left.
func (c *Cluster) Run(tb testing.TB, d Driver, run string, targets []string, within time.Duration) Timing {
	tb.Helper()
	ctx := context.Background()
	var tm Timing
	began := time.Now()
	if err := d.Inject(ctx, c.Env.Client, run, targets); err != nil {
		tb.Fatalf("%s: inject %s: %v", d.Name, run, err)
	}
	c.phases.wait(tb, run, len(targets), v1alpha1.NodeFaultApplied, within)
	tm.Applied = time.Since(began)

	began = time.Now()
	if err := d.Recover(ctx, c.Env.Client, run); err != nil {
		tb.Fatalf("%s: recover %s: %v", d.Name, run, err)
	}
	c.phases.wait(tb, run, len(targets), v1alpha1.NodeFaultRecovered, within)
	tm.Recovered = time.Since(began)

	if d.Cleanup != nil {
		if err := d.Cleanup(ctx, c.Env.Client, run); err != nil {
			tb.Fatalf("%s: clean up %s: %v", d.Name, run, err)
		}
	}

	if err := c.Env.Client.DeleteAllOf(ctx, &v1alpha1.NodeFault{}, client.MatchingLabels{v1alpha1.LabelExperiment: run}); err != nil {
		tb.Fatalf("delete NodeFaults of %s: %v", run, err)
	}
	return tm
}

// phaseTracker follows every NodeFault through one informer and counts,
// per run, those in each phase; a watch, so waiting on thousands costs
// the API server nothing more than the events it sends anyway. A deleted
// NodeFault keeps the last phase seen: a controller deletes its
// NodeFaults once they are Recovered, maybe before a waiter looked.
type phaseTracker struct {
	mu      sync.Mutex
	phases  map[string]map[string]v1alpha1.NodeFaultPhase // run → name → phase
	changed chan struct{}                                 // closed and replaced on every change
}

func trackPhases(ctx context.Context, tb testing.TB, env *kubetest.Env, wg *sync.WaitGroup) (*phaseTracker, error) {
	p := &phaseTracker{phases: map[string]map[string]v1alpha1.NodeFaultPhase{}, changed: make(chan struct{})}
	sel, err := labels.Parse(v1alpha1.LabelExperiment)
	if err != nil {
		return nil, err
	}
	ca, err := cache.New(env.Config, cache.Options{Scheme: kubetest.Scheme(), DefaultLabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("NodeFault cache: %w", err)
	}
	inf, err := ca.GetInformer(ctx, &v1alpha1.NodeFault{})
	if err != nil {
		return nil, fmt.Errorf("NodeFault informer: %w", err)
	}
	set := func(obj any, gone bool) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj, gone = d.Obj, true
		}
		nf, ok := obj.(*v1alpha1.NodeFault)
		if !ok {
			return
		}
		run := nf.Labels[v1alpha1.LabelExperiment]
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.phases[run] == nil {
			p.phases[run] = map[string]v1alpha1.NodeFaultPhase{}
		}
		if _, seen := p.phases[run][nf.Name]; !gone || !seen {
			p.phases[run][nf.Name] = nf.Status.Phase
		}
		close(p.changed)
		p.changed = make(chan struct{})
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { set(obj, false) },
		UpdateFunc: func(_, obj any) { set(obj, false) },
		DeleteFunc: func(obj any) { set(obj, true) },
	}); err != nil {
		return nil, err
	}
	wg.Go(func() {
		if err := ca.Start(ctx); err != nil {
			tb.Errorf("NodeFault tracker: %v", err)
		}
	})
	if !ca.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("NodeFault tracker did not sync")
	}
	return p, nil
}

// count is how many NodeFaults of any run are in phase now.
func (p *phaseTracker) count(phase v1alpha1.NodeFaultPhase) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, names := range p.phases {
		for _, ph := range names {
			if ph == phase {
				n++
			}
		}
	}
	return n
}

// wait blocks until want NodeFaults of run are in phase, failing tb after
// within with the count it reached.
func (p *phaseTracker) wait(tb testing.TB, run string, want int, phase v1alpha1.NodeFaultPhase, within time.Duration) {
	tb.Helper()
	deadline := time.After(within)
	for {
		p.mu.Lock()
		got := 0
		for _, ph := range p.phases[run] {
			if ph == phase {
				got++
			}
		}
		changed := p.changed
		p.mu.Unlock()
		if got >= want {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			tb.Fatalf("run %s: %d of %d NodeFaults %s after %s", run, got, want, phase, within)
		}
	}
}

// PeakRSS returns this process's peak resident memory (VmHWM) in bytes:
// the test binary's, holding the harness, its informers and the
// simulated agents, not the API server's or kwok's, which are processes
// of their own.
func PeakRSS() (int64, error) {
	return vmHWM("/proc/self/status")
}

func vmHWM(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s: VmHWM line %q is not N kB", path, strings.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > 1<<40 {
			return 0, fmt.Errorf("%s: VmHWM %q is not a size in kB", path, f[0])
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("%s has no VmHWM line", path)
}
