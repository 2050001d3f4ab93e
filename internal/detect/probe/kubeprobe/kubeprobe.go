// Package kubeprobe observes what a cluster's own remediation does after
// a fault, through the API server: a node condition that
// node-problem-detector or NVSentinel sets, a quarantine taint or label, a
// cordon, a drain, Events, pod restarts and a training job coming back.
// Each probe is scoped to the nodes the experiment touches and to what
// happened since it started, so a cordon or an Event from before the run
// does not count as detection.
package kubeprobe

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
)

// Probe is one Kubernetes check over a set of nodes.
type Probe struct {
	name  string
	spec  v1alpha1.KubernetesProbe
	r     client.Reader
	nodes []string
	start time.Time
	sel   labels.Selector
}

var _ probe.Probe = (*Probe)(nil)

// New returns the probe spec defines, named name, reading through r (a
// manager's API reader, or a cache that holds nodes, pods and events), on
// the nodes the experiment touches; Events, restarts and resumes count
// from start, when the experiment began.
func New(name string, spec v1alpha1.KubernetesProbe, r client.Reader, nodes []string, start time.Time) (*Probe, error) {
	if r == nil {
		return nil, fmt.Errorf("kubernetes probe %s: no API reader", name)
	}
	if !slices.Contains(v1alpha1.KubeChecks, spec.Check) {
		return nil, fmt.Errorf("kubernetes probe %s: check %q is not one of %s", name, spec.Check, strings.Join(v1alpha1.KubeChecks, ", "))
	}
	sel := labels.Everything()
	if spec.Selector != "" {
		var err error
		if sel, err = labels.Parse(spec.Selector); err != nil {
			return nil, fmt.Errorf("kubernetes probe %s: selector %q: %w", name, spec.Selector, err)
		}
	}
	return &Probe{name: name, spec: spec, r: r, nodes: slices.Clone(nodes), start: start, sel: sel}, nil
}

// Name labels the probe in verdicts.
func (p *Probe) Name() string { return p.name }

// Observe reads the API server and says whether the check holds, and for
// which of the touched nodes.
func (p *Probe) Observe(ctx context.Context) (probe.Observation, error) {
	switch p.spec.Check {
	case v1alpha1.KubeNodeCondition, v1alpha1.KubeTaint, v1alpha1.KubeLabel, v1alpha1.KubeUnschedulable:
		return p.nodeCheck(ctx)
	case v1alpha1.KubeEvent:
		return p.events(ctx)
	}
	return p.pods(ctx)
}

// nodeCheck holds for each touched node whose object shows the check.
func (p *Probe) nodeCheck(ctx context.Context) (probe.Observation, error) {
	var obs probe.Observation
	var missing []string
	for _, name := range p.nodes {
		var n corev1.Node
		if err := p.r.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			if apierrors.IsNotFound(err) {
				missing = append(missing, name)
				continue
			}
			return probe.Observation{}, fmt.Errorf("kubernetes probe %s: node %s: %w", p.name, name, err)
		}
		if what, ok := p.nodeHolds(&n); ok {
			obs.Subjects = append(obs.Subjects, probe.Subject{Node: name})
			obs.Detail = joinDetail(obs.Detail, name+": "+what)
		}
	}
	obs.Holds = len(obs.Subjects) > 0
	obs.Value = float64(len(obs.Subjects))
	if len(missing) > 0 {
		obs.Detail = joinDetail(obs.Detail, "no such node: "+strings.Join(missing, ", "))
	}
	return obs, nil
}

func (p *Probe) nodeHolds(n *corev1.Node) (string, bool) {
	s := p.spec
	switch s.Check {
	case v1alpha1.KubeNodeCondition:
		status := s.Status
		if status == "" {
			status = string(corev1.ConditionTrue)
		}
		for _, c := range n.Status.Conditions {
			if string(c.Type) == s.ConditionType && string(c.Status) == status && (s.Reason == "" || c.Reason == s.Reason) {
				return fmt.Sprintf("condition %s=%s (%s)", c.Type, c.Status, c.Reason), true
			}
		}
	case v1alpha1.KubeTaint:
		for _, t := range n.Spec.Taints {
			if t.Key == s.Key && (s.Value == "" || t.Value == s.Value) && (s.Effect == "" || string(t.Effect) == s.Effect) {
				return "taint " + t.ToString(), true
			}
		}
	case v1alpha1.KubeLabel:
		if v, ok := n.Labels[s.Key]; ok && (s.Value == "" || v == s.Value) {
			return "label " + s.Key + "=" + v, true
		}
	case v1alpha1.KubeUnschedulable:
		if n.Spec.Unschedulable {
			return "unschedulable", true
		}
	}
	return "", false
}

// events holds for each touched node named by an Event of the reason
// (and type) since the start, on the node itself or on a pod bound to it.
func (p *Probe) events(ctx context.Context) (probe.Observation, error) {
	var list corev1.EventList
	if err := p.r.List(ctx, &list, client.InNamespace(p.spec.Namespace)); err != nil {
		return probe.Observation{}, fmt.Errorf("kubernetes probe %s: list events: %w", p.name, err)
	}
	// Pods are named by their namespace and name; the node they ran on
	// is read from the pod, so an Event on a pod already deleted cannot
	// be placed and does not count.
	podNode := map[string]string{}
	podsListed := false
	var obs probe.Observation
	seen := map[string]bool{}
	for i := range list.Items {
		e := &list.Items[i]
		if e.Reason != p.spec.Reason || (p.spec.Type != "" && e.Type != p.spec.Type) || eventTime(e).Before(p.start) {
			continue
		}
		var node string
		switch e.InvolvedObject.Kind {
		case "Node":
			node = e.InvolvedObject.Name
		case "Pod":
			if !podsListed {
				pods, err := p.podsOnNodes(ctx, "", labels.Everything(), false)
				if err != nil {
					return probe.Observation{}, err
				}
				for _, pod := range pods {
					podNode[pod.Namespace+"/"+pod.Name] = pod.Spec.NodeName
				}
				podsListed = true
			}
			node = podNode[e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name]
		}
		if !slices.Contains(p.nodes, node) {
			continue
		}
		obs.Value++
		if !seen[node] {
			seen[node] = true
			obs.Subjects = append(obs.Subjects, probe.Subject{Node: node})
			obs.Detail = joinDetail(obs.Detail, fmt.Sprintf("%s: %s %s on %s/%s: %s", node, e.Type, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message))
		}
	}
	obs.Holds = len(obs.Subjects) > 0
	return obs, nil
}

// eventTime is when an Event last happened: its series' last time, its
// last timestamp (the core/v1 API), its event time (events.k8s.io), or
// its creation.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// podsOnNodes lists the pods in ns matching sel, on the touched nodes
// unless anyNode.
func (p *Probe) podsOnNodes(ctx context.Context, ns string, sel labels.Selector, anyNode bool) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := p.r.List(ctx, &list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("kubernetes probe %s: list pods: %w", p.name, err)
	}
	if anyNode {
		return list.Items, nil
	}
	return slices.DeleteFunc(list.Items, func(pod corev1.Pod) bool { return !slices.Contains(p.nodes, pod.Spec.NodeName) }), nil
}

// pods runs the pod checks.
func (p *Probe) pods(ctx context.Context) (probe.Observation, error) {
	s := p.spec
	anyNode := s.AnyNode || s.Check == v1alpha1.KubeJobResumed
	pods, err := p.podsOnNodes(ctx, s.Namespace, p.sel, anyNode)
	if err != nil {
		return probe.Observation{}, err
	}
	var obs probe.Observation
	add := func(pod *corev1.Pod, what string) {
		obs.Value++
		sub := probe.Subject{Node: pod.Spec.NodeName}
		if !slices.Contains(obs.Subjects, sub) {
			obs.Subjects = append(obs.Subjects, sub)
		}
		obs.Detail = joinDetail(obs.Detail, pod.Namespace+"/"+pod.Name+" "+what)
	}
	switch s.Check {
	case v1alpha1.KubePodPhase:
		for i := range pods {
			if string(pods[i].Status.Phase) == s.Phase {
				add(&pods[i], "is "+s.Phase)
			}
		}
		obs.Holds = obs.Value > 0
	case v1alpha1.KubePodRestarts:
		least := max(s.MinRestarts, 1)
		for i := range pods {
			if n := p.restartsSince(&pods[i]); n >= least {
				add(&pods[i], fmt.Sprintf("restarted %d times", n))
			}
		}
		obs.Holds = obs.Value > 0
	case v1alpha1.KubePodsEvicted:
		for i := range pods {
			if running(&pods[i]) {
				add(&pods[i], "still runs on "+pods[i].Spec.NodeName)
			}
		}
		// Holds when nothing is left: the subjects are the drained nodes.
		obs.Holds = obs.Value == 0
		if obs.Holds {
			obs.Subjects = nil
			for _, n := range p.nodes {
				obs.Subjects = append(obs.Subjects, probe.Subject{Node: n})
			}
			obs.Detail = fmt.Sprintf("no pod matching %s runs on %s", p.sel, strings.Join(p.nodes, ", "))
		}
	case v1alpha1.KubeJobResumed:
		obs = p.resumed(pods)
	}
	return obs, nil
}

// restartsSince counts a pod's container restarts since the start: all of
// them for a pod created since, and for an older pod those whose last
// termination ended since (the API keeps only the last, so at most one a
// container).
func (p *Probe) restartsSince(pod *corev1.Pod) int {
	n := 0
	for _, c := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		switch {
		case !pod.CreationTimestamp.Time.Before(p.start):
			n += int(c.RestartCount)
		case c.RestartCount > 0 && c.LastTerminationState.Terminated != nil && !c.LastTerminationState.Terminated.FinishedAt.Time.Before(p.start):
			n++
		}
	}
	return n
}

// running reports whether a pod still occupies its node: not finished and
// not being deleted.
func running(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// resumed holds when every matching pod runs and is ready, and one of them
// became ready since the start: the job came back, rather than never
// having gone.
func (p *Probe) resumed(pods []corev1.Pod) probe.Observation {
	var obs probe.Observation
	if len(pods) == 0 {
		obs.Detail = "no pod matches " + p.sel.String()
		return obs
	}
	again := false
	for i := range pods {
		pod := &pods[i]
		ready := podReady(pod)
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || ready == nil || ready.Status != corev1.ConditionTrue {
			obs.Detail = pod.Namespace + "/" + pod.Name + " is not running and ready"
			return obs
		}
		if !ready.LastTransitionTime.Time.Before(p.start) {
			again = true
		}
		sub := probe.Subject{Node: pod.Spec.NodeName}
		if !slices.Contains(obs.Subjects, sub) {
			obs.Subjects = append(obs.Subjects, sub)
		}
	}
	if !again {
		obs.Subjects = nil
		obs.Detail = fmt.Sprintf("all %d pods ready since before the experiment", len(pods))
		return obs
	}
	obs.Holds, obs.Value = true, float64(len(pods))
	obs.Detail = fmt.Sprintf("%d pods running and ready", len(pods))
	return obs
}

func podReady(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
