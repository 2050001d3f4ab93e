// Package kubefault injects the faults a Kubernetes cluster causes through
// its API server: deleting a job's pods or the device plugin's, cordoning
// and draining a node, tainting it. Every change it makes to a Node is
// marked on that Node (annotations gpuchaos.dev/cordoned-by and
// gpuchaos.dev/tainted-by), so recovery finds it by the injection key
// after a controller restart, and never undoes what another controller or
// a person did: a node cordoned before gpuchaos came stays cordoned, a
// foreign taint stays.
//
// The controller applies NodeFaults of these mechanisms
// (internal/kube/controller, through the NodeFault applier in
// internal/kube/nodefault); every other mechanism runs on the node, in its
// agent.
package kubefault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// The mechanisms this package runs, as the catalogue names them.
const (
	MechanismPodDelete          = "pod-delete"
	MechanismNodeCordon         = "node-cordon"
	MechanismDaemonSetPodDelete = "daemonset-pod-delete"
	MechanismNodeTaint          = "node-taint"
)

// Entries lists the mechanisms this package runs and the fault each
// causes, for the registry (internal/fault/all), built with opts: the
// client is theirs, not the target's Env, so that nothing outside this
// package needs a Kubernetes client type to build them. A nil
// opts.Client lists them and refuses to build them; a nil opts.Logger
// means the Env's. The controller's NodeFault applier builds its
// injectors itself (New); listing them in the registry holds them to the
// catalogue with the rest.
func Entries(opts Options) []fault.Entry {
	k8s := []string{"k8s"}
	build := func(f *catalog.Fault, m *catalog.Mechanism, env fault.Env) (fault.Injector, error) {
		if opts.Client == nil {
			return nil, fmt.Errorf("mechanism %s of %s needs the API server of a Kubernetes cluster", m.Name, f.ID)
		}
		o := opts
		if o.Logger == nil {
			o.Logger = env.Component("kubefault")
		}
		return New(f, m, o)
	}
	return []fault.Entry{
		{Mechanism: MechanismPodDelete, Targets: k8s, New: build, Faults: []string{"workload.pod-kill"}},
		{Mechanism: MechanismNodeCordon, Targets: k8s, New: build, Faults: []string{"workload.cordon-drain"}},
		{Mechanism: MechanismDaemonSetPodDelete, Targets: k8s, New: build, Faults: []string{"workload.device-plugin-kill"}},
		{Mechanism: MechanismNodeTaint, Targets: k8s, New: build, Faults: []string{"workload.node-taint"}},
	}
}

// Mechanisms lists the mechanisms applied through the API server: a
// NodeFault naming one of them is the controller's to apply, any other the
// node agent's. The slice is new on every call.
func Mechanisms() []string { return fault.Registry(Entries(Options{})).Mechanisms() }

// DefaultRetry is how long a drain waits before asking again to evict a
// pod a PodDisruptionBudget held back (kubectl drain waits 5 s).
const DefaultRetry = 2 * time.Second

// mirrorAnnotation marks the API's copy of a kubelet's static pod, which
// the API cannot delete for good; kubectl drain leaves them too.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// gpuResource is what a GPU pod requests; pod-kill without a selector
// takes the pods that request it.
const gpuResource corev1.ResourceName = "nvidia.com/gpu"

// Options is what the injectors need from the cluster.
type Options struct {
	// Client writes to the API server, and reads when Reader is nil.
	Client client.Client
	// Reader lists pods and nodes; it must not be a cache without a
	// spec.nodeName index (a manager's API reader is right).
	Reader client.Reader
	// Retry is the wait between evictions a disruption budget refused;
	// zero means DefaultRetry.
	Retry time.Duration
	// Logger receives what a drain could not do yet; nil discards.
	Logger *slog.Logger
}

// DrainError reports a drain that ended (its context did) with pods a
// PodDisruptionBudget kept from eviction. The node stays cordoned: the
// fault is in effect, the drain partial.
type DrainError struct {
	Node string
	// Stayed are the pods not evicted, namespace/name.
	Stayed []string
	Err    error
}

func (e *DrainError) Error() string {
	return fmt.Sprintf("drain %s: %d pods stayed, held by a disruption budget (%s): %v", e.Node, len(e.Stayed), strings.Join(e.Stayed, ", "), e.Err)
}

func (e *DrainError) Unwrap() error { return e.Err }

// New returns the injector of mechanism m of fault f.
func New(f *catalog.Fault, m *catalog.Mechanism, opts Options) (fault.Injector, error) {
	if err := fault.CheckMechanism("kubefault", f, m, Entries(Options{})); err != nil {
		return nil, err
	}
	if opts.Client == nil {
		return nil, fmt.Errorf("mechanism %s of %s needs a Kubernetes client", m.Name, f.ID)
	}
	if opts.Reader == nil {
		opts.Reader = opts.Client
	}
	if opts.Retry <= 0 {
		opts.Retry = DefaultRetry
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	switch m.Name {
	case MechanismPodDelete:
		return &podDelete{opts: opts, done: map[string]bool{}, gpuDefault: true}, nil
	case MechanismDaemonSetPodDelete:
		return &podDelete{opts: opts, done: map[string]bool{}, daemonSets: true}, nil
	case MechanismNodeCordon:
		return &cordon{opts: opts}, nil
	}
	return &taint{opts: opts}, nil
}

// podsOn lists the pods bound to node that sel matches.
func podsOn(ctx context.Context, r client.Reader, node string, sel labels.Selector) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := r.List(ctx, &list, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", node)},
		client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("list the pods on node %s: %w", node, err)
	}
	return list.Items, nil
}

// daemonSetPod reports whether a DaemonSet controls p: deleting it only
// brings it back on the same node, so drains leave it.
func daemonSetPod(p *corev1.Pod) bool {
	c := metav1.GetControllerOf(p)
	return c != nil && c.Kind == "DaemonSet"
}

// evictable reports whether a drain evicts p, as kubectl drain decides:
// not a mirror or DaemonSet pod, not finished, not already going.
func evictable(p *corev1.Pod) bool {
	_, mirror := p.Annotations[mirrorAnnotation]
	return !mirror && !daemonSetPod(p) && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func requestsGPU(p *corev1.Pod) bool {
	for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		if _, ok := c.Resources.Limits[gpuResource]; ok {
			return true
		}
		if _, ok := c.Resources.Requests[gpuResource]; ok {
			return true
		}
	}
	return false
}

func podName(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func podNames(pods []corev1.Pod) []string {
	names := make([]string, len(pods))
	for i := range pods {
		names[i] = podName(&pods[i])
	}
	return names
}

// podDelete deletes pods once per key: a death, with nothing to recover.
// Injecting a key again deletes nothing, so the replacements the
// controller brings up are not killed in turn.
type podDelete struct {
	opts Options
	// gpuDefault: an empty selector takes the pods requesting GPUs
	// (pod-kill); daemonSets: DaemonSet pods are the target
	// (device-plugin-kill), not skipped.
	gpuDefault, daemonSets bool

	mu   sync.Mutex
	done map[string]bool
}

func (d *podDelete) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done[key] {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if ref.Node == "" {
		return errors.New("pod delete: the target names no node")
	}
	expr := strings.TrimSpace(v.String("selector"))
	sel, err := labels.Parse(expr)
	if err != nil {
		return fmt.Errorf("pod delete: selector %q: %w", expr, err)
	}
	pods, err := podsOn(ctx, d.opts.Reader, ref.Node, sel)
	if err != nil {
		return err
	}
	var opts []client.DeleteOption
	if _, ok := v["grace"]; ok {
		opts = append(opts, client.GracePeriodSeconds(int64(v.Duration("grace").Seconds())))
	}
	var hit []string
	for i := range pods {
		p := &pods[i]
		if _, mirror := p.Annotations[mirrorAnnotation]; mirror || p.DeletionTimestamp != nil ||
			daemonSetPod(p) != d.daemonSets || (d.gpuDefault && expr == "" && !requestsGPU(p)) {
			continue
		}
		// The uid precondition keeps a replacement of the same name (a
		// StatefulSet's) from being deleted in its place.
		o := append(slices.Clip(opts), client.Preconditions{UID: &p.UID})
		if err := d.opts.Client.Delete(ctx, p, o...); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete pod %s: %w", podName(p), err)
		}
		hit = append(hit, podName(p))
	}
	if len(hit) == 0 {
		what := "requesting " + string(gpuResource)
		if expr != "" {
			what = "matching " + expr
		}
		return fmt.Errorf("pod delete: no pod on node %s %s", ref.Node, what)
	}
	d.done[key] = true
	return nil
}

func (d *podDelete) Recover(_ context.Context, key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.done, key)
	return nil
}

// cordon marks a node unschedulable with the key in AnnotationCordoned,
// in one update, and drains it when asked.
type cordon struct{ opts Options }

func (c *cordon) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ref.Node == "" {
		return errors.New("cordon: the target names no node")
	}
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var n corev1.Node
		if err := c.opts.Client.Get(ctx, client.ObjectKey{Name: ref.Node}, &n); err != nil {
			return err
		}
		ours := n.Annotations[annotationCordoned] == key
		if n.Spec.Unschedulable && !ours {
			// Someone else's cordon: left unmarked, so recovery leaves
			// the node as it found it.
			return nil
		}
		if ours && n.Spec.Unschedulable {
			return nil
		}
		n.Spec.Unschedulable = true
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[annotationCordoned] = key
		return c.opts.Client.Update(ctx, &n)
	})
	if err != nil {
		return fmt.Errorf("cordon node %s: %w", ref.Node, err)
	}
	if _, ok := v["drain"]; ok && !v.Bool("drain") {
		return nil
	}
	return c.drain(ctx, ref.Node)
}

// drain evicts the node's pods through the Eviction API, so disruption
// budgets hold: a pod a budget protects is asked for again every Retry
// until the budget allows it or ctx ends.
func (c *cordon) drain(ctx context.Context, node string) error {
	pods, err := podsOn(ctx, c.opts.Reader, node, labels.Everything())
	if err != nil {
		return err
	}
	var pending []corev1.Pod
	for i := range pods {
		if evictable(&pods[i]) {
			pending = append(pending, pods[i])
		}
	}
	for {
		var held []corev1.Pod
		for i := range pending {
			p := &pending[i]
			ev := &policyv1.Eviction{
				ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
				DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
			}
			err := c.opts.Client.SubResource("eviction").Create(ctx, p, ev)
			switch {
			case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
				// Evicted, or gone (a precondition failing on the uid
				// means the pod of that name is a replacement).
			case apierrors.IsTooManyRequests(err):
				held = append(held, *p)
			case ctx.Err() != nil:
				// Ended while asking (the client's rate limiter gives up
				// before the deadline): what was not evicted stayed.
				return &DrainError{Node: node, Stayed: podNames(slices.Concat(held, pending[i:])), Err: ctx.Err()}
			default:
				return fmt.Errorf("drain %s: evict pod %s: %w", node, podName(p), err)
			}
		}
		if len(held) == 0 {
			return nil
		}
		pending = held
		names := podNames(held)
		c.opts.Logger.Info("eviction refused by a disruption budget; retrying", "node", node, "pods", names)
		select {
		case <-ctx.Done():
			return &DrainError{Node: node, Stayed: names, Err: ctx.Err()}
		case <-time.After(c.opts.Retry):
		}
	}
}

// Recover uncordons the node that carries the key, and only it: a node
// cordoned by someone else carries no key of ours.
func (c *cordon) Recover(ctx context.Context, key string) error {
	nodes, err := markedNodes(ctx, c.opts.Reader, func(n *corev1.Node) bool { return n.Annotations[annotationCordoned] == key })
	if err != nil {
		return err
	}
	for _, name := range nodes {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			var n corev1.Node
			if err := c.opts.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
				return err
			}
			if n.Annotations[annotationCordoned] != key {
				return nil
			}
			delete(n.Annotations, annotationCordoned)
			n.Spec.Unschedulable = false
			return c.opts.Client.Update(ctx, &n)
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("uncordon node %s: %w", name, err)
		}
	}
	return nil
}

// markedNodes names the nodes for which marked holds.
func markedNodes(ctx context.Context, r client.Reader, marked func(*corev1.Node) bool) ([]string, error) {
	var list corev1.NodeList
	if err := r.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var names []string
	for i := range list.Items {
		if marked(&list.Items[i]) {
			names = append(names, list.Items[i].Name)
		}
	}
	return names, nil
}
