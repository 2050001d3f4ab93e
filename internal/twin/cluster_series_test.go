package twin

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// absent is the value expected of a series that is not on its exporter's
// page.
var absent = math.Inf(-1)

// want is one series' expected newest value: every series of metric whose
// labels include kv (name, value pairs) and that is on the page must read
// value, and there must be one; or, with absent, there must be none.
type want struct {
	metric string
	kv     []string
	value  float64
}

func (w want) check(t *testing.T, tw *Twin) {
	t.Helper()
	var found []*series.Series
	for _, s := range tw.Select(w.metric) {
		ok := true
		for i := 0; i+1 < len(w.kv); i += 2 {
			ok = ok && s.Labels.Get(w.kv[i]) == w.kv[i+1]
		}
		if n := len(s.Samples); ok && n > 0 && !series.IsStale(s.Samples[n-1].V) {
			found = append(found, s)
		}
	}
	name := w.metric + "{" + strings.Join(w.kv, ",") + "}"
	switch {
	case w.value == absent && len(found) > 0:
		t.Errorf("%s: %d series on the page, want none (%s = %g)", name, len(found), found[0].LabelKey(), last(found[0]))
	case w.value == absent:
	case len(found) == 0:
		t.Errorf("%s: no series on the page, want %g", name, w.value)
	default:
		for _, s := range found {
			if v := last(s); v != w.value {
				t.Errorf("%s%s = %g, want %g", w.metric, s.LabelKey(), v, w.value)
			}
		}
	}
}

const (
	worker0 = demoJob + "-worker-0" // the job's pod on gpu-node-0
	worker1 = demoJob + "-worker-1"
)

// TestClusterSeries plays the catalogue's node and workload effects on the
// demo cluster and reads kube-state-metrics', node-exporter's and the
// scrape targets' series as kube-prometheus' rules would.
func TestClusterSeries(t *testing.T) {
	t.Parallel()
	type fault struct {
		ref     inventory.Ref
		effects []catalog.Effect
	}
	pod := func(metric, p string, v float64, kv ...string) want {
		return want{metric, append([]string{"namespace", trainingNamespace, "pod", p}, kv...), v}
	}
	plugin := func(node string) string {
		return "nvidia-device-plugin-daemonset-" + podSuffix(map[string]int{"gpu-node-0": 0, "gpu-node-1": 1}[node], 1)
	}
	healthy := []want{
		{"kube_node_status_condition", []string{"condition", "Ready", "status", "true"}, 1},
		{"kube_node_status_condition", []string{"condition", "MemoryPressure", "status", "true"}, 0},
		{"kube_node_spec_unschedulable", nil, 0},
		{"kube_node_spec_taint", nil, absent},
		{"kube_node_status_allocatable", []string{"resource", "nvidia_com_gpu"}, 8},
		{"kube_node_status_capacity", []string{"resource", "pods"}, 110},
		{"kube_pod_status_phase", []string{"phase", "Running"}, 1},
		{"kube_pod_status_ready", []string{"condition", "true"}, 1},
		{"kube_pod_container_status_restarts_total", nil, 0},
		{"kube_pod_container_status_waiting_reason", nil, absent},
		{"kube_pod_container_status_last_terminated_reason", nil, absent},
		{"kube_daemonset_status_number_unavailable", nil, 0},
		{"kube_daemonset_status_number_available", nil, 2},
		{"kube_state_metrics_list_total", []string{"result", "error"}, 0},
		{"kube_state_metrics_total_shards", nil, 1},
		{"up", nil, 1},
		{"up", []string{"job", "apiserver"}, 1},
		{"up", []string{"job", "kube-scheduler"}, 1},
		{"up", []string{"job", "kube-controller-manager"}, 1},
		{"up", []string{"job", "kubelet", "metrics_path", "/metrics"}, 1},
		{"node_filesystem_avail_bytes", []string{"mountpoint", "/mnt/checkpoints"}, 0.45 * checkpointVolumeBytes},
		{"node_filesystem_readonly", nil, 0},
		{"node_timex_sync_status", nil, 1},
		{"node_network_receive_errs_total", nil, 0},
		{"node_memory_MemAvailable_bytes", []string{"instance", "gpu-node-0"}, math.Floor(0.65 * hostMemBytes)},
		{"node_load1", []string{"instance", "gpu-node-0"}, 2 * loadPerCPU},
	}
	tests := []struct {
		name   string
		fault  *fault
		after  time.Duration
		expect []want
	}{
		{"fault-free", nil, 30 * time.Minute, healthy},
		{"kill-rank: every worker container exits and restarts once", &fault{rankRef(3), []catalog.Effect{{Kind: catalog.EffectRank, Mode: "kill"}}}, 5 * time.Minute,
			[]want{
				pod("kube_pod_container_status_restarts_total", worker0, 1),
				pod("kube_pod_container_status_restarts_total", worker1, 1),
				pod("kube_pod_container_status_last_terminated_reason", worker0, 1, "reason", "Error"),
				pod("kube_pod_status_ready", worker0, 1, "condition", "true"),
				{"up", nil, 1},
			}},
		{"hang-rank before the watchdog: nothing in the API", &fault{rankRef(3), []catalog.Effect{{Kind: catalog.EffectRank, Mode: "hang"}}}, 5 * time.Minute,
			[]want{
				pod("kube_pod_container_status_restarts_total", worker0, 0),
				pod("kube_pod_container_status_running", worker0, 1),
				pod("kube_pod_status_ready", worker0, 1, "condition", "true"),
			}},
		{"hang-rank after the watchdog: the job's containers exit once", &fault{rankRef(3), []catalog.Effect{{Kind: catalog.EffectRank, Mode: "hang"}}}, 15 * time.Minute,
			[]want{pod("kube_pod_container_status_restarts_total", worker0, 1)}},
		{"pod-kill: a new pod on the node, the other pod's container restarts", &fault{nodeRef("gpu-node-0"), []catalog.Effect{{Kind: catalog.EffectNode, Mode: "pod-kill"}}}, 5 * time.Minute,
			[]want{
				pod("kube_pod_info", worker0, 1, "uid", "00000000-0000-4000-8000-000000000001", "node", "gpu-node-0"),
				pod("kube_pod_info", worker0, absent, "uid", "00000000-0000-4000-8000-000000000000"),
				pod("kube_pod_container_status_restarts_total", worker0, 0),
				pod("kube_pod_container_status_restarts_total", worker1, 1),
				pod("kube_pod_status_phase", worker0, 1, "phase", "Running"),
			}},
		{"drain: cordoned, tainted, the new pod pending without a node", &fault{nodeRef("gpu-node-1"), []catalog.Effect{{Kind: catalog.EffectNode, Mode: "drain"}}}, 5 * time.Minute,
			[]want{
				{"kube_node_spec_unschedulable", []string{"node", "gpu-node-1"}, 1},
				{"kube_node_spec_taint", []string{"node", "gpu-node-1", "key", "node.kubernetes.io/unschedulable", "effect", "NoSchedule"}, 1},
				{"kube_node_spec_taint", []string{"node", "gpu-node-0"}, absent},
				pod("kube_pod_status_phase", worker1, 1, "phase", "Pending"),
				pod("kube_pod_status_ready", worker1, 1, "condition", "false"),
				pod("kube_pod_info", worker1, absent, "node", "gpu-node-1"),
				pod("kube_pod_container_status_running", worker1, absent),
				pod("kube_pod_status_phase", worker0, 1, "phase", "Running"),
			}},
		{"cordon: tainted, pods untouched", &fault{nodeRef("gpu-node-1"), []catalog.Effect{{Kind: catalog.EffectNode, Mode: "cordon"}}}, 5 * time.Minute,
			[]want{
				{"kube_node_spec_taint", []string{"node", "gpu-node-1"}, 1},
				pod("kube_pod_container_status_restarts_total", worker1, 0),
				pod("kube_pod_status_phase", worker1, 1, "phase", "Running"),
			}},
		{"device-plugin-kill: the new plugin pod is not up, no GPUs offered, the job runs on", &fault{nodeRef("gpu-node-1"), []catalog.Effect{{Kind: catalog.EffectNode, Mode: "device-plugin-kill"}}}, 5 * time.Minute,
			[]want{
				{"kube_node_status_allocatable", []string{"node", "gpu-node-1", "resource", "nvidia_com_gpu"}, 0},
				{"kube_node_status_allocatable", []string{"node", "gpu-node-0", "resource", "nvidia_com_gpu"}, 8},
				{"kube_daemonset_status_number_unavailable", []string{"daemonset", "nvidia-device-plugin-daemonset"}, 1},
				{"kube_daemonset_status_number_available", []string{"daemonset", "nvidia-device-plugin-daemonset"}, 1},
				{"kube_daemonset_status_number_unavailable", []string{"daemonset", "nvidia-dcgm-exporter"}, 0},
				{"kube_pod_container_status_waiting_reason", []string{"pod", plugin("gpu-node-1"), "reason", "ContainerCreating"}, 1},
				{"kube_pod_status_phase", []string{"pod", plugin("gpu-node-1"), "phase", "Pending"}, 1},
				{"kube_pod_info", []string{"pod", plugin("gpu-node-1"), "node", "gpu-node-1"}, 1},
				pod("kube_pod_container_status_restarts_total", worker1, 0),
			}},
		{"fallen off the bus: the node's worker pod crash-loops, dcgm-exporter stays up", &fault{inventory.Ref{Kind: catalog.ScopeNode, Node: "gpu-node-1"}, []catalog.Effect{{Kind: catalog.EffectOffBus}}}, 10 * time.Minute,
			[]want{
				pod("kube_pod_container_status_waiting_reason", worker1, 1, "reason", "CrashLoopBackOff"),
				pod("kube_pod_container_status_waiting_reason", worker0, absent),
				pod("kube_pod_status_phase", worker1, 1, "phase", "Running"),
				pod("kube_pod_status_ready", worker1, 1, "condition", "false"),
				// One exit at the crash; then 3 minutes of restart cost and
				// 7 minutes of back-off: starts at 0, 10, 30, 70, 150 and
				// 310 s.
				pod("kube_pod_container_status_restarts_total", worker1, 1+6),
				pod("kube_pod_container_status_restarts_total", worker0, 1),
				{"up", []string{"job", "nvidia-dcgm-exporter"}, 1},
			}},
		{"checkpoint volume filled: full on the job's nodes, the root disk untouched", &fault{jobRef(), []catalog.Effect{{Kind: catalog.EffectCheckpoint, Mode: "fill"}}}, 5 * time.Minute,
			[]want{
				{"node_filesystem_avail_bytes", []string{"mountpoint", "/mnt/checkpoints"}, 0},
				{"node_filesystem_avail_bytes", []string{"mountpoint", "/"}, 0.7 * rootVolumeBytes},
				{"node_filesystem_readonly", nil, 0},
			}},
		{"memory hog on rank 3's NUMA node: MemAvailable loses its share of that node", &fault{rankRef(3), []catalog.Effect{{Kind: catalog.EffectHost, Mode: "memory", Value: 0.8}}}, 5 * time.Minute,
			[]want{
				{"node_memory_MemAvailable_bytes", []string{"instance", "gpu-node-0"}, math.Floor(0.65*hostMemBytes - 0.8*0.65*hostMemBytes/2)},
				{"node_memory_MemAvailable_bytes", []string{"instance", "gpu-node-1"}, math.Floor(0.65 * hostMemBytes)},
			}},
		{"CPU hog on rank 3's socket: load per CPU up by a half", &fault{rankRef(3), []catalog.Effect{{Kind: catalog.EffectHost, Mode: "cpu", Value: 1}}}, 30 * time.Minute,
			[]want{
				{"node_load1", []string{"instance", "gpu-node-0"}, 2*loadPerCPU + 1},
				{"node_load1", []string{"instance", "gpu-node-1"}, 2 * loadPerCPU},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t, Options{Seed: 1})
			sleep(t, tw, 20*time.Minute)
			if tc.fault != nil {
				apply(t, tw, "f", tc.fault.ref, tc.fault.effects...)
			}
			sleep(t, tw, tc.after)
			for _, w := range tc.expect {
				w.check(t, tw)
			}
		})
	}
}

// TestCPUHogIdle holds the CPU hog to the socket it runs on: that CPU's
// idle time stops growing, the other socket's goes on at its healthy
// share.
func TestCPUHogIdle(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{Seed: 1})
	idle := func(cpu string) float64 {
		for _, s := range tw.Select("node_cpu_seconds_total") {
			if s.Labels.Get("instance") == "gpu-node-0" && s.Labels.Get("cpu") == cpu && s.Labels.Get("mode") == "idle" {
				return last(s)
			}
		}
		t.Fatalf("no idle time of cpu %s", cpu)
		return 0
	}
	// Rank 5 is GPU 5 of gpu-node-0, on its second socket.
	apply(t, tw, "hog", rankRef(5), catalog.Effect{Kind: catalog.EffectHost, Mode: "cpu", Value: 1})
	a0, a1 := idle("0"), idle("1")
	sleep(t, tw, 10*time.Minute)
	d0, d1 := idle("0")-a0, idle("1")-a1
	if d1 > 1 {
		t.Errorf("the hogged socket's CPU idled %gs in 10m, want none", d1)
	}
	if d0 < 0.8*600 {
		t.Errorf("the other socket's CPU idled %gs in 10m, want its healthy share, over 480s", d0)
	}
}

// TestCrashLoopEnds: once the lost GPU is back, the worker runs and is
// ready again, and the restarts of its crash loop stay counted, as a
// container's restart count never goes down.
func TestCrashLoopEnds(t *testing.T) {
	t.Parallel()
	tw := newTwin(t, Options{Seed: 1})
	apply(t, tw, "off", nodeRef("gpu-node-1"), catalog.Effect{Kind: catalog.EffectOffBus})
	sleep(t, tw, 10*time.Minute)
	restarts := want{"kube_pod_container_status_restarts_total", []string{"pod", worker1}, 0}
	looped := 0.0
	for _, s := range tw.Select(restarts.metric) {
		if s.Labels.Get("pod") == worker1 {
			looped = last(s)
		}
	}
	if looped < 3 {
		t.Fatalf("%s restarted %g times in a 10m crash loop, want several", worker1, looped)
	}
	revert(t, tw, "off")
	sleep(t, tw, 5*time.Minute)
	// The job restarts after its restart cost: no exit, no more loops.
	restarts.value = looped
	for _, w := range []want{
		restarts,
		{"kube_pod_container_status_waiting_reason", []string{"pod", worker1}, absent},
		{"kube_pod_status_ready", []string{"pod", worker1, "condition", "true"}, 1},
	} {
		w.check(t, tw)
	}
}
