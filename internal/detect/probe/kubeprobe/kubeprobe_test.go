package kubeprobe_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe/kubeprobe"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
)

// world writes, through a real API server, the objects a remediation
// chain leaves: n1 carries NVSentinel's verdict (condition, quarantine
// taint and label, cordon), n2 nothing; pods of job llm run on both, one
// restarted; Events name n1 and a pod on it.
func world(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	now := metav1.Now()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	n1 := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"dgxc.nvidia.com/nvsentinel-state": "quarantined"}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{
			{Key: "nvidia.com/syslog-xid-error", Value: "true", Effect: corev1.TaintEffectNoSchedule},
		}},
	}
	must(c.Create(ctx, n1))
	n1.Status.Conditions = []corev1.NodeCondition{{
		Type: "SysLogsXIDError", Status: corev1.ConditionTrue, Reason: "SysLogsXIDErrorIsNotHealthy",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	must(c.Status().Update(ctx, n1))
	must(c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}))
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "train"}}))
	pod := func(name, node string, job string, ready bool, restarts int32) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: name, Labels: map[string]string{"job": job}},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x"}}},
		}
		must(c.Create(ctx, p))
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: now}}
		cs := corev1.ContainerStatus{Name: "c", Image: "registry.invalid/x", RestartCount: restarts, Ready: ready}
		if restarts > 0 {
			// An hour ahead, so a start between the pod's creation and
			// its last restart can be set: that of an older pod.
			end := metav1.NewTime(now.Add(time.Hour))
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, StartedAt: now, FinishedAt: end}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		must(c.Status().Update(ctx, p))
	}
	pod("llm-0", "n1", "llm", true, 2)
	pod("llm-1", "n2", "llm", true, 0)
	pod("broken-0", "n2", "broken", false, 0)
	event := func(ns, name string, obj corev1.ObjectReference, typ, reason string) {
		must(c.Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name},
			InvolvedObject: obj, Type: typ, Reason: reason, Message: "written by the test",
			FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "test"},
		}))
	}
	event("default", "n1.drain", corev1.ObjectReference{Kind: "Node", Name: "n1"}, "NodeDraining", "AwaitingPodCompletion")
	event("train", "llm-0.backoff", corev1.ObjectReference{Kind: "Pod", Namespace: "train", Name: "llm-0"}, corev1.EventTypeWarning, "BackOff")
}

// TestChecks holds every check true and false against real objects: each
// case names the nodes in scope and when the experiment started, and the
// nodes the observation must name when it holds.
func TestChecks(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	// API times have whole seconds: a start in the same second as the
	// objects must not put them before it.
	start := time.Now().Truncate(time.Second)
	world(t, env.Client)
	later, restarted := start.Add(2*time.Hour), start.Add(30*time.Minute)
	both := []string{"n1", "n2"}
	tests := []struct {
		name  string
		spec  v1alpha1.KubernetesProbe
		nodes []string
		start time.Time
		want  []string // the nodes it holds for; nil: it does not hold
	}{
		{"condition", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeNodeCondition, ConditionType: "SysLogsXIDError"}, both, start, []string{"n1"}},
		{"condition with reason", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeNodeCondition, ConditionType: "SysLogsXIDError", Reason: "SysLogsXIDErrorIsNotHealthy"}, both, start, []string{"n1"}},
		{"condition on another node", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeNodeCondition, ConditionType: "SysLogsXIDError"}, []string{"n2"}, start, nil},
		{"condition of another reason", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeNodeCondition, ConditionType: "SysLogsXIDError", Reason: "SysLogsXIDErrorIsHealthy"}, both, start, nil},
		{"condition of another status", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeNodeCondition, ConditionType: "SysLogsXIDError", Status: "False"}, both, start, nil},
		{"missing node", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeUnschedulable}, []string{"gone"}, start, nil},

		{"taint", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeTaint, Key: "nvidia.com/syslog-xid-error", Value: "true", Effect: "NoSchedule"}, both, start, []string{"n1"}},
		{"taint of another effect", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeTaint, Key: "nvidia.com/syslog-xid-error", Effect: "NoExecute"}, both, start, nil},
		{"label", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeLabel, Key: "dgxc.nvidia.com/nvsentinel-state", Value: "quarantined"}, both, start, []string{"n1"}},
		{"label of another value", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeLabel, Key: "dgxc.nvidia.com/nvsentinel-state", Value: "draining"}, both, start, nil},
		{"unschedulable", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeUnschedulable}, both, start, []string{"n1"}},
		{"schedulable", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeUnschedulable}, []string{"n2"}, start, nil},

		{"pod phase", v1alpha1.KubernetesProbe{Check: v1alpha1.KubePodPhase, Namespace: "train", Selector: "job=llm", Phase: "Running"}, []string{"n1"}, start, []string{"n1"}},
		{"pod phase elsewhere", v1alpha1.KubernetesProbe{Check: v1alpha1.KubePodPhase, Namespace: "train", Selector: "job=llm", Phase: "Running"}, []string{"gone"}, start, nil},
		{"pod phase any node", v1alpha1.KubernetesProbe{Check: v1alpha1.KubePodPhase, Namespace: "train", Selector: "job=llm", Phase: "Running", AnyNode: true}, []string{"gone"}, start, []string{"n1", "n2"}},
		{"pod phase other phase", v1alpha1.KubernetesProbe{Check: v1alpha1.KubePodPhase, Selector: "job=llm", Phase: "Failed"}, both, start, nil},

		{"restarts", v1alpha1.KubernetesProbe{Check: v1alpha1.KubePodRestarts, Selector: "job=llm", MinRestarts: 2}, both, start.Add(-time.Hour), []string{"n1"}},
		{"restarts of an older pod count once", v1alpha1.KubernetesProbe{Check: v1alpha1.KubePodRestarts, Selector: "job=llm", MinRestarts: 2}, both, restarted, nil},
		{"a restart since the start", v1alpha1.KubernetesProbe{Check: v1alpha1.KubePodRestarts, Selector: "job=llm"}, both, restarted, []string{"n1"}},
		{"restarts before the start", v1alpha1.KubernetesProbe{Check: v1alpha1.KubePodRestarts, Selector: "job=llm"}, both, later, nil},

		{"node event", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeEvent, Reason: "AwaitingPodCompletion", Type: "NodeDraining"}, both, start, []string{"n1"}},
		{"node event in its namespace", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeEvent, Reason: "AwaitingPodCompletion", Namespace: "default"}, both, start, []string{"n1"}},
		{"node event in another namespace", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeEvent, Reason: "AwaitingPodCompletion", Namespace: "train"}, both, start, nil},
		{"event of another type", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeEvent, Reason: "AwaitingPodCompletion", Type: "Warning"}, both, start, nil},
		{"event on another node", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeEvent, Reason: "AwaitingPodCompletion"}, []string{"n2"}, start, nil},
		{"event before the start", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeEvent, Reason: "AwaitingPodCompletion"}, both, later, nil},
		{"pod event", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeEvent, Reason: "BackOff"}, both, start, []string{"n1"}},
		{"pod event off the nodes", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeEvent, Reason: "BackOff"}, []string{"n2"}, start, nil},

		{"evicted", v1alpha1.KubernetesProbe{Check: v1alpha1.KubePodsEvicted, Namespace: "train", Selector: "job=llm"}, []string{"gone"}, start, []string{"gone"}},
		{"not evicted", v1alpha1.KubernetesProbe{Check: v1alpha1.KubePodsEvicted, Namespace: "train", Selector: "job=llm"}, both, start, nil},

		{"resumed", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeJobResumed, Namespace: "train", Selector: "job=llm"}, []string{"n1"}, start, []string{"n1", "n2"}},
		{"ready since before the start", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeJobResumed, Namespace: "train", Selector: "job=llm"}, []string{"n1"}, later, nil},
		{"a pod not ready", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeJobResumed, Namespace: "train", Selector: "job in (llm, broken)"}, []string{"n1"}, start, nil},
		{"no pods", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeJobResumed, Selector: "job=none"}, []string{"n1"}, start, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := kubeprobe.New("k", tc.spec, env.Client, tc.nodes, tc.start)
			if err != nil {
				t.Fatal(err)
			}
			obs, err := p.Observe(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range obs.Subjects {
				got = append(got, s.Node)
			}
			slices.Sort(got)
			if obs.Holds != (tc.want != nil) || (obs.Holds && !slices.Equal(got, tc.want)) {
				t.Fatalf("holds %v for %v (%s), want holds %v for %v", obs.Holds, got, obs.Detail, tc.want != nil, tc.want)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		spec v1alpha1.KubernetesProbe
	}{
		{"unknown check", v1alpha1.KubernetesProbe{Check: "drained"}},
		{"bad selector", v1alpha1.KubernetesProbe{Check: v1alpha1.KubePodsEvicted, Selector: "a=(b"}},
	} {
		if _, err := kubeprobe.New("k", tc.spec, unread{}, nil, time.Time{}); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if _, err := kubeprobe.New("k", v1alpha1.KubernetesProbe{Check: v1alpha1.KubeUnschedulable}, nil, nil, time.Time{}); err == nil {
		t.Error("no reader: accepted")
	}
}

// unread is a reader New is given but never reads: it refuses first.
type unread struct{ client.Reader }
