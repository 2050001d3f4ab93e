package twin

import (
	"fmt"
	"strconv"

	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// The kube-state-metrics dialect: the Kubernetes objects of the twin's
// cluster (its nodes, the training jobs' worker pods, the GPU operator's
// device plugin and dcgm-exporter DaemonSets) as kube-state-metrics
// exports them, read off the same state that drives the GPU series. Names,
// labels and units follow kube-state-metrics' docs/metrics/cluster/
// node-metrics.md and docs/metrics/workload/{pod,daemonset}-metrics.md at
// github.com/kubernetes/kube-state-metrics commit 04ee634c. Every series
// carries the job and instance labels a kube-prometheus Prometheus gives
// it (its ServiceMonitor keeps kube-state-metrics' own labels,
// honorLabels), because the standard rules select on job.

const (
	ksmJob      = "kube-state-metrics"
	ksmInstance = "10.244.0.10:8443" // the kube-state-metrics pod; one shard
	// trainingNamespace holds the training jobs' pods; gpuOperatorNamespace
	// the GPU operator's DaemonSets, as its Helm chart installs them.
	trainingNamespace    = "training"
	gpuOperatorNamespace = "gpu-operator"
	// workerContainer is the container of a Kubeflow PyTorchJob's pods.
	workerContainer = "pytorch"
)

// crashLoopBackoff is the kubelet's restart back-off: 10 s, doubled after
// every exit, capped at 5 minutes (kubelet's initial and maximum container
// back-off, pkg/kubelet/kubelet.go).
const (
	crashLoopBackoffInitial = 10
	crashLoopBackoffMax     = 300
)

// clusterSeries are the twin's Kubernetes and host series beside the GPU
// and job ones.
type clusterSeries struct {
	s     *seriesStore
	nodes []*nodeState
	pods  []*workerPod
	ds    []*daemonSet
	self  []*series.Series // kube-state-metrics' own list and watch counters
	up    []*series.Series // targets always up: the control plane and kube-state-metrics
	// scrapes counts scrapes, for the self-metrics' counters.
	scrapes float64
}

// nodeState is one node's kube-state-metrics and node-exporter series.
type nodeState struct {
	n                            *node
	unschedulable, allocGPU      *series.Series
	conditions                   []condSeries
	taint                        *series.Series
	static                       []*series.Series // info, capacity, allocatable other than GPUs: constant 1 or their value
	staticVal                    []float64
	host                         hostSeries
	upNodeExporter, upDCGM, upGC *series.Series
	upKubelet                    []*series.Series
	up                           []*series.Series // every target on the node
}

// condSeries is one node condition's three series (status true, false,
// unknown) and the status it holds on a healthy node.
type condSeries struct {
	healthy  string
	byStatus [3]*series.Series
}

var conditionStatuses = [3]string{"true", "false", "unknown"}

// podSeries are the kube-state-metrics series of one pod with one
// container.
type podSeries struct {
	info                       *series.Series
	phase                      [5]*series.Series
	ready                      [3]*series.Series
	owner                      *series.Series
	running, waiting, restarts *series.Series
	waitingReason              map[string]*series.Series
	lastTerminated             *series.Series
	id                         []string // namespace, pod and uid label pairs
	ownerKind, ownerName       string
}

// infoLabels are kube_pod_info's labels with the pod bound to node ("" when
// unbound).
func (ps *podSeries) infoLabels(node, hostIP string) []string {
	kv := append([]string{}, ps.id...)
	// An empty label is no label to Prometheus: an unbound pod's info has
	// no node and no host_ip.
	for _, l := range [][2]string{{"node", node}, {"host_ip", hostIP}, {"created_by_kind", ps.ownerKind},
		{"created_by_name", ps.ownerName}, {"host_network", "false"}} {
		if l[1] != "" {
			kv = append(kv, l[0], l[1])
		}
	}
	return kv
}

var podPhases = [5]string{"Pending", "Running", "Succeeded", "Failed", "Unknown"}

// workerPod is the pod of one training job on one node: a Kubeflow
// PyTorchJob worker holding all of the job's GPUs there, whose launcher
// exits when any rank dies, so every crash of the job is a container exit
// the kubelet restarts (restartPolicy OnFailure).
type workerPod struct {
	j    *job
	n    *node
	name string
	gen  int // replacements: pod-kill and drain delete the pod
	ps   podSeries
	// exitsBase is the job's exits when this pod was created, so a new
	// pod starts at zero restarts; loops counts crash-loop restarts.
	// loopsDone those of crash loops that ended.
	exitsBase, loops, loopsDone int
	loopSince                   float64 // seconds, when the crash loop began; <0 none
	scheduled                   bool
}

// daemonSet is one DaemonSet of the GPU operator: a pod per node.
type daemonSet struct {
	name, container string
	status          []*series.Series // kube_daemonset_status_*, in dsStatus order
	pods            []*dsPod
	// plugin marks the device plugin, which workload.device-plugin-kill
	// deletes.
	plugin bool
}

type dsPod struct {
	n   *node
	gen int
	ps  podSeries
}

var dsStatus = []string{
	"kube_daemonset_status_current_number_scheduled",
	"kube_daemonset_status_desired_number_scheduled",
	"kube_daemonset_status_number_available",
	"kube_daemonset_status_number_misscheduled",
	"kube_daemonset_status_number_ready",
	"kube_daemonset_status_number_unavailable",
	"kube_daemonset_status_updated_number_scheduled",
	"kube_daemonset_status_observed_generation",
}

// ksm returns a kube-state-metrics series.
func (c *clusterSeries) ksm(metric string, kv ...string) *series.Series {
	return c.s.add(metric, labels(append(kv, "job", ksmJob, "instance", ksmInstance)...))
}

// initCluster creates the cluster series of every node, job pod and
// DaemonSet pod the twin starts with.
func (c *clusterSeries) init(t *Twin, s *seriesStore) {
	c.s = s
	for _, n := range t.nodes {
		c.nodes = append(c.nodes, c.initNode(t, n))
	}
	for _, j := range t.jobs {
		for _, n := range j.nodes {
			p := &workerPod{j: j, n: n, name: fmt.Sprintf("%s-worker-%d", j.spec.Name, len(c.podsOf(j))), loopSince: -1, scheduled: true}
			p.ps = c.podSeries(trainingNamespace, p.name, p.uid(), n.name, "PyTorchJob", j.spec.Name, workerContainer)
			c.pods = append(c.pods, p)
		}
	}
	for _, d := range []*daemonSet{
		{name: "nvidia-device-plugin-daemonset", container: "nvidia-device-plugin", plugin: true},
		{name: "nvidia-dcgm-exporter", container: "nvidia-dcgm-exporter"},
	} {
		for _, m := range dsStatus {
			d.status = append(d.status, c.ksm(m, "namespace", gpuOperatorNamespace, "daemonset", d.name))
		}
		for _, n := range t.nodes {
			p := &dsPod{n: n}
			p.ps = c.podSeries(gpuOperatorNamespace, d.podName(p), d.podUID(p), n.name, "DaemonSet", d.name, d.container)
			d.pods = append(d.pods, p)
		}
		c.ds = append(c.ds, d)
	}
	// kube-state-metrics' own series: one shard, lists and watches of the
	// resources the twin models, all succeeding (README.md, "Kube-state-
	// metrics self metrics"). The error series exist at zero, as a client
	// counter vector keeps them once an error was ever counted; zero keeps
	// the error-ratio rules defined.
	for _, res := range []string{"nodes", "pods", "daemonsets"} {
		for _, result := range []string{"success", "error"} {
			c.self = append(c.self,
				c.ksm("kube_state_metrics_list_total", "resource", "*v1."+kindOf(res), "result", result),
				c.ksm("kube_state_metrics_watch_total", "resource", "*v1."+kindOf(res), "result", result))
		}
	}
	c.self = append(c.self,
		c.ksm("kube_state_metrics_total_shards"),
		c.ksm("kube_state_metrics_shard_ordinal", "shard_ordinal", "0"))
	// Control-plane and exporter targets outside the twin's nodes: their
	// job names are kube-prometheus' (its ServiceMonitors' jobLabel or
	// service name).
	for _, tg := range [][2]string{
		{"apiserver", "10.0.0.1:6443"},
		{"kube-scheduler", "10.0.0.1:10259"},
		{"kube-controller-manager", "10.0.0.1:10257"},
		{"coredns", "10.244.0.2:9153"},
		{"coredns", "10.244.0.3:9153"},
		{ksmJob, ksmInstance},
	} {
		c.up = append(c.up, s.add("up", labels("job", tg[0], "instance", tg[1])))
	}
}

// kindOf is the Kubernetes kind of a resource, as kube-state-metrics'
// resource label names its reflector's type.
func kindOf(resource string) string {
	return map[string]string{"nodes": "Node", "pods": "Pod", "daemonsets": "DaemonSet"}[resource]
}

func (c *clusterSeries) podsOf(j *job) []*workerPod {
	var out []*workerPod
	for _, p := range c.pods {
		if p.j == j {
			out = append(out, p)
		}
	}
	return out
}

func (p *workerPod) uid() string {
	return fmt.Sprintf("00000000-%04x-4000-8000-%012x", p.j.idx, p.n.idx<<16|p.gen)
}

func (d *daemonSet) podName(p *dsPod) string {
	return fmt.Sprintf("%s-%s", d.name, podSuffix(p.n.idx, p.gen))
}

func (d *daemonSet) podUID(p *dsPod) string {
	sum := 0
	for _, r := range d.name {
		sum += int(r)
	}
	return fmt.Sprintf("00000000-%04x-4000-8000-%012x", sum&0xffff, p.n.idx<<16|p.gen)
}

// podSuffix is the five-character suffix a controller gives a pod it
// generates, derived here from the node and the replacement.
func podSuffix(node, gen int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789" // the API server's generateName alphabet
	v := node*7919 + gen*104729 + 12345
	out := make([]byte, 5)
	for i := range out {
		out[i] = alphabet[v%len(alphabet)]
		v /= len(alphabet)
	}
	return string(out)
}

// podSeries creates one pod's series.
func (c *clusterSeries) podSeries(ns, pod, uid, node, ownerKind, ownerName, container string) podSeries {
	id := []string{"namespace", ns, "pod", pod, "uid", uid}
	with := func(kv ...string) []string { return append(append([]string{}, id...), kv...) }
	ps := podSeries{waitingReason: map[string]*series.Series{}, id: id, ownerKind: ownerKind, ownerName: ownerName}
	ps.info = c.ksm("kube_pod_info", ps.infoLabels(node, hostIP(c, node))...)
	for i, ph := range podPhases {
		ps.phase[i] = c.ksm("kube_pod_status_phase", with("phase", ph)...)
	}
	for i, st := range conditionStatuses {
		ps.ready[i] = c.ksm("kube_pod_status_ready", with("condition", st)...)
	}
	ps.owner = c.ksm("kube_pod_owner", with("owner_kind", ownerKind, "owner_name", ownerName, "owner_is_controller", "true")...)
	ctr := with("container", container)
	ps.running = c.ksm("kube_pod_container_status_running", ctr...)
	ps.waiting = c.ksm("kube_pod_container_status_waiting", ctr...)
	ps.restarts = c.ksm("kube_pod_container_status_restarts_total", ctr...)
	for _, r := range []string{"CrashLoopBackOff", "ContainerCreating"} {
		ps.waitingReason[r] = c.ksm("kube_pod_container_status_waiting_reason", with("container", container, "reason", r)...)
	}
	ps.lastTerminated = c.ksm("kube_pod_container_status_last_terminated_reason", with("container", container, "reason", "Error")...)
	return ps
}

// hostIP is a node's InternalIP: 10.0.1.x by its place in the spec.
func hostIP(c *clusterSeries, node string) string {
	for _, ns := range c.nodes {
		if ns.n.name == node {
			return "10.0.1." + strconv.Itoa(10+ns.n.idx)
		}
	}
	return ""
}

// podState is what kube-state-metrics reads off one pod at a scrape.
type podState struct {
	phase         int // index in podPhases
	ready         bool
	scheduled     bool   // bound to a node: its container has a status
	running       bool   // the container runs
	waitingReason string // why it waits, when it does not run
	restarts      int
	lastError     bool // the container exited with an error before
}

// write samples a pod's series at ts, and marks stale those a pod in st
// does not have: an unscheduled pod has no container status, and
// kube-state-metrics exports a waiting reason only while the container
// waits for it.
func (ps *podSeries) write(ts int64, st podState) {
	ps.info.Append(ts, 1)
	ps.owner.Append(ts, 1)
	for i, se := range ps.phase {
		se.Append(ts, b2f(i == st.phase))
	}
	ready := 1 // false
	if st.ready {
		ready = 0
	}
	for i, se := range ps.ready {
		se.Append(ts, b2f(i == ready))
	}
	if !st.scheduled {
		for _, se := range []*series.Series{ps.running, ps.waiting, ps.restarts, ps.lastTerminated} {
			se.MarkStale(ts)
		}
		for _, se := range ps.waitingReason {
			se.MarkStale(ts)
		}
		return
	}
	ps.running.Append(ts, b2f(st.running))
	ps.waiting.Append(ts, b2f(!st.running))
	ps.restarts.Append(ts, float64(st.restarts))
	for r, se := range ps.waitingReason {
		if !st.running && r == st.waitingReason {
			se.Append(ts, 1)
		} else {
			se.MarkStale(ts)
		}
	}
	if st.lastError {
		ps.lastTerminated.Append(ts, 1)
	} else {
		ps.lastTerminated.MarkStale(ts)
	}
}

// stale marks every series of a deleted pod stale.
func (ps *podSeries) stale(ts int64) {
	all := []*series.Series{ps.info, ps.owner, ps.running, ps.waiting, ps.restarts, ps.lastTerminated}
	all = append(all, ps.phase[:]...)
	all = append(all, ps.ready[:]...)
	for _, se := range ps.waitingReason {
		all = append(all, se)
	}
	for _, se := range all {
		se.MarkStale(ts)
	}
}

// replacePods plays the pod deletions of a node effect: pod-kill and drain
// delete the training jobs' pods on the nodes (their controller creates
// new ones, new uid, same name), device-plugin-kill deletes the device
// plugin's pod (its DaemonSet creates a new one). A cordon deletes
// nothing.
func (t *Twin) replacePods(nodes []*node, mode string) {
	c := &t.store.cluster
	ts := t.Now().UnixMilli()
	for _, n := range nodes {
		switch mode {
		case "pod-kill", "drain":
			for _, p := range c.pods {
				if p.n != n {
					continue
				}
				p.ps.stale(ts)
				p.gen++
				// The job is down now; the new pod's container starts with
				// the job's restart and has not restarted itself.
				p.exitsBase, p.loops, p.loopsDone, p.loopSince = p.j.exits, 0, 0, -1
				// A cordoned node, or one offering no GPUs, takes no new
				// GPU pod: it waits unbound, with no node.
				p.scheduled = !n.mods.cordoned && !n.mods.pluginKilled
				node := ""
				if p.scheduled {
					node = n.name
				}
				p.ps = c.podSeries(trainingNamespace, p.name, p.uid(), node, "PyTorchJob", p.j.spec.Name, workerContainer)
			}
		case "device-plugin-kill":
			for _, d := range c.ds {
				if !d.plugin {
					continue
				}
				for _, p := range d.pods {
					if p.n == n {
						p.ps.stale(ts)
						p.gen++
						p.ps = c.podSeries(gpuOperatorNamespace, d.podName(p), d.podUID(p), n.name, "DaemonSet", d.name, d.container)
					}
				}
			}
		}
	}
}

// state is a worker pod's state from its job's and node's. A pod
// that must be (re)created waits in Pending while its node is cordoned or
// offers no GPUs. A pod whose node holds a GPU the job cannot use while
// the job is blocked crash-loops: its container starts, CUDA fails on the
// lost GPU, it exits, and the kubelet starts it again after the back-off.
// Elsewhere the job's containers run (a hang, a restart in progress and a
// checkpoint all run inside them).
func (p *workerPod) state(now float64) podState {
	if !p.scheduled {
		return podState{phase: 0}
	}
	st := podState{phase: 1, scheduled: true, running: true, ready: true}
	lostGPU := false
	for _, g := range p.n.gpus {
		if g.job == p.j && !g.usable() {
			lostGPU = true
		}
	}
	if p.j.state == jobBlocked && lostGPU {
		if p.loopSince < 0 {
			p.loopSince = now
		}
		// Restarts so far at the back-off: exits at 0, 10, 30, 70, … s.
		n, at, step := 0, 0.0, float64(crashLoopBackoffInitial)
		for at <= now-p.loopSince {
			n++
			at += step
			step = min(2*step, crashLoopBackoffMax)
		}
		p.loops = n
		st.running, st.ready, st.waitingReason = false, false, "CrashLoopBackOff"
	} else if p.loopSince >= 0 {
		// The loop ended (the GPU is back): its restarts stay counted.
		p.loopSince = -1
		p.loopsDone += p.loops
		p.loops = 0
	}
	st.restarts = p.j.exits - p.exitsBase + p.loopsDone + p.loops
	st.lastError = st.restarts > 0
	return st
}

// scrapeCluster samples the cluster series.
func (t *Twin) scrapeCluster(ts int64) {
	c := &t.store.cluster
	c.scrapes++
	now := t.now.Seconds()
	for _, ns := range c.nodes {
		t.scrapeNode(ns, ts)
	}
	for _, p := range c.pods {
		if !p.scheduled && !p.n.mods.cordoned && !p.n.mods.pluginKilled {
			// The scheduler binds the pending pod to its node again: its
			// info now names the node.
			p.scheduled = true
			p.ps.info.MarkStale(ts)
			p.ps.info = c.ksm("kube_pod_info", p.ps.infoLabels(p.n.name, hostIP(c, p.n.name))...)
		}
		p.ps.write(ts, p.state(now))
	}
	for _, d := range c.ds {
		desired := float64(len(d.pods))
		ready := 0.0
		for _, p := range d.pods {
			st := podState{phase: 1, scheduled: true, running: true, ready: true}
			if d.plugin && p.n.mods.pluginKilled {
				// The new plugin pod has not come up: until it does, the
				// kubelet offers no GPUs (catalogue: device-plugin-kill).
				st = podState{phase: 0, scheduled: true, waitingReason: "ContainerCreating"}
			}
			if st.ready {
				ready++
			}
			p.ps.write(ts, st)
		}
		for i, v := range []float64{desired, desired, ready, 0, ready, desired - ready, desired, 1} {
			d.status[i].Append(ts, v)
		}
	}
	// Lists at start-up and about every resync; watches renewed every few
	// minutes: both grow slowly, all succeeding.
	for i, se := range c.self[:len(c.self)-2] {
		if i%4 >= 2 { // the result="error" pair of each resource
			se.Append(ts, 0)
			continue
		}
		se.Append(ts, 1+float64(int(c.scrapes)/10))
	}
	c.self[len(c.self)-2].Append(ts, 1)
	c.self[len(c.self)-1].Append(ts, 0)
	for _, se := range c.up {
		se.Append(ts, 1)
	}
}
