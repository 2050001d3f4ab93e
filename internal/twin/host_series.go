package twin

import (
	"math"
	"strconv"

	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// The node-exporter dialect and each node's Kubernetes node object. A
// compact host: the rules people run read ratios (available over size,
// busy over all CPU time, load per CPU), so the twin models a few series
// of each kind, healthy on a normal day, and moves only those a catalogue
// fault moves on a real node. Names, labels and units follow
// github.com/prometheus/node_exporter's collector package at commit
// 7c9ee8a0 (cpu_linux.go, meminfo.go, loadavg.go, filesystem_linux.go,
// netdev_common.go, timex.go, filefd_linux.go, conntrack_linux.go,
// textfile.go, diskstats_linux.go, uname.go, vmstat_linux.go).

const (
	// hostMemBytes is an HGX H100/H200 node's host memory, 2 TiB.
	hostMemBytes = 2 << 40
	// hostCPUsPerSocket is what kube_node_status_capacity says; the
	// node-exporter series model one CPU per socket (cpu="0", "1"), each
	// standing for its socket: rules read CPU time as shares and load per
	// CPU, which the model keeps, while 224 CPUs times eight modes would
	// multiply the series of every run.
	hostCPUsPerSocket = 56
	// uptimeAtStart is how long the nodes have been up when the twin
	// starts: counters begin where a month of running left them.
	uptimeAtStart = 30 * 24 * 3600.0
	// loadPerCPU is a healthy training node's load average per CPU.
	loadPerCPU = 0.3
	// checkpointVolumeBytes is the shared checkpoint filesystem, mounted
	// on every node; rootVolumeBytes the node's local root disk.
	checkpointVolumeBytes = 100 << 40
	rootVolumeBytes       = 1788 << 30
)

// cpuModes are the CPU modes /proc/stat gives and node_cpu_seconds_total
// exports, with a training node's healthy share of each (the ranks' launch
// threads and data loaders).
var cpuModes = []struct {
	name  string
	share float64
}{
	{"user", 0.12}, {"nice", 0}, {"system", 0.03}, {"idle", 0}, // idle: the rest
	{"iowait", 0.002}, {"irq", 0}, {"softirq", 0.005}, {"steal", 0},
}

// hostSeries are one node's node-exporter series.
type hostSeries struct {
	cpu                                    [][]*series.Series // by modelled CPU, by cpuModes
	cpuSec                                 [][]float64
	load                                   [3]*series.Series
	loadVal                                [3]float64
	memTotal, memAvail, memFree, buffers   *series.Series
	cached, slab, pgmajfault               *series.Series
	fs                                     []fsSeries
	netRxBytes, netTxBytes, netRxPk, netTx *series.Series
	netRxErr, netTxErr, netRxDrop, netTxDr *series.Series
	diskIO, diskIOW                        *series.Series
	memHog, cpuHog                         []float64 // per socket, reused by every scrape
	last                                   float64   // seconds, the previous scrape
}

// fsSeries are one mounted filesystem's series.
type fsSeries struct {
	checkpoint                                    bool // the shared checkpoint volume
	size, avail, free, files, filesFree, readonly *series.Series
	sizeBytes, availShare                         float64
}

// initNode creates one node's series: its Kubernetes node object, its
// node-exporter and its scrape targets.
func (c *clusterSeries) initNode(t *Twin, n *node) *nodeState {
	s := c.s
	ns := &nodeState{n: n}
	ip := "10.0.1." + strconv.Itoa(10+n.idx)
	ns.unschedulable = c.ksm("kube_node_spec_unschedulable", "node", n.name)
	ns.allocGPU = c.ksm("kube_node_status_allocatable", "node", n.name, "resource", "nvidia_com_gpu", "unit", "integer")
	n.series = nodeSeries{unschedulable: ns.unschedulable, allocatable: ns.allocGPU}
	// Node conditions of a healthy kubelet (docs/metrics/cluster/
	// node-metrics.md: one series per status, true, false and unknown).
	for _, cond := range [][2]string{{"Ready", "true"}, {"MemoryPressure", "false"}, {"DiskPressure", "false"},
		{"PIDPressure", "false"}, {"NetworkUnavailable", "false"}} {
		cs := condSeries{healthy: cond[1]}
		for i, st := range conditionStatuses {
			cs.byStatus[i] = c.ksm("kube_node_status_condition", "node", n.name, "condition", cond[0], "status", st)
		}
		ns.conditions = append(ns.conditions, cs)
	}
	n.series.ready = ns.conditions[0].byStatus[0]
	// kubectl cordon's taint (kube_node_spec_taint exists only while the
	// taint does).
	ns.taint = c.ksm("kube_node_spec_taint", "node", n.name, "key", "node.kubernetes.io/unschedulable", "value", "", "effect", "NoSchedule")
	sockets := n.sockets()
	static := func(se *series.Series, v float64) {
		ns.static = append(ns.static, se)
		ns.staticVal = append(ns.staticVal, v)
	}
	static(c.ksm("kube_node_info", "node", n.name, "kernel_version", "5.15.0-127-generic", "os_image", "Ubuntu 22.04.5 LTS",
		"container_runtime_version", "containerd://1.7.24", "kubelet_version", "v1.31.4", "internal_ip", ip,
		"pod_cidr", "10.244."+strconv.Itoa(1+n.idx)+".0/24"), 1)
	gpus := float64(len(n.gpus))
	for _, kind := range []string{"kube_node_status_capacity", "kube_node_status_allocatable"} {
		// The kubelet reserves a little CPU and memory for the system
		// (kube-reserved, system-reserved): allocatable is below capacity.
		cpu, mem := float64(sockets*hostCPUsPerSocket), float64(hostMemBytes)
		if kind == "kube_node_status_allocatable" {
			cpu, mem = cpu-2, mem-float64(16<<30)
		} else {
			static(c.ksm(kind, "node", n.name, "resource", "nvidia_com_gpu", "unit", "integer"), gpus)
		}
		static(c.ksm(kind, "node", n.name, "resource", "cpu", "unit", "core"), cpu)
		static(c.ksm(kind, "node", n.name, "resource", "memory", "unit", "byte"), mem)
		static(c.ksm(kind, "node", n.name, "resource", "pods", "unit", "integer"), 110)
	}
	// Scrape targets on the node, up while the node is: a GPU that falls
	// off the bus leaves dcgm-exporter serving its page (its series of
	// that GPU go), so its target stays up.
	ns.upNodeExporter = s.add("up", labels("job", "node-exporter", "instance", n.name))
	ns.upDCGM = s.add("up", labels("job", "nvidia-dcgm-exporter", "instance", ip+":9400"))
	ns.upGC = s.add("up", labels("job", "gpuchaos-agent", "instance", ip+":9464"))
	for _, path := range []string{"/metrics", "/metrics/cadvisor", "/metrics/probes"} {
		ns.upKubelet = append(ns.upKubelet, s.add("up", labels("job", "kubelet", "instance", ip+":10250", "metrics_path", path, "node", n.name)))
	}
	ns.up = append([]*series.Series{ns.upNodeExporter, ns.upDCGM, ns.upGC}, ns.upKubelet...)
	ns.host = c.initHost(n, sockets, static)
	return ns
}

// sockets is the node's NUMA sockets: one past the highest of its GPUs'.
func (n *node) sockets() int {
	s := 1
	for _, g := range n.gpus {
		s = max(s, g.socket+1)
	}
	return s
}

// initHost creates a node's node-exporter series. kube-prometheus
// relabels node-exporter's instance to the node's name.
func (c *clusterSeries) initHost(n *node, sockets int, static func(*series.Series, float64)) hostSeries {
	s := c.s
	ne := func(metric string, kv ...string) *series.Series {
		return s.add(metric, labels(append(kv, "job", "node-exporter", "instance", n.name)...))
	}
	h := hostSeries{}
	for cpu := 0; cpu < sockets; cpu++ {
		var row []*series.Series
		var sec []float64
		for _, m := range cpuModes {
			row = append(row, ne("node_cpu_seconds_total", "cpu", strconv.Itoa(cpu), "mode", m.name))
			sec = append(sec, math.Round(uptimeAtStart*cpuShare(m.name, m.share, 0)))
		}
		h.cpu = append(h.cpu, row)
		h.cpuSec = append(h.cpuSec, sec)
	}
	h.memHog, h.cpuHog = make([]float64, sockets), make([]float64, sockets)
	for i, name := range []string{"node_load1", "node_load5", "node_load15"} {
		h.load[i] = ne(name)
		h.loadVal[i] = loadPerCPU * float64(sockets)
	}
	h.memTotal = ne("node_memory_MemTotal_bytes")
	h.memAvail = ne("node_memory_MemAvailable_bytes")
	h.memFree = ne("node_memory_MemFree_bytes")
	h.buffers = ne("node_memory_Buffers_bytes")
	h.cached = ne("node_memory_Cached_bytes")
	h.slab = ne("node_memory_Slab_bytes")
	h.pgmajfault = ne("node_vmstat_pgmajfault")
	for _, fs := range []struct {
		device, fstype, mount string
		size, avail           float64
		ckpt                  bool
	}{
		{"/dev/nvme0n1p2", "ext4", "/", rootVolumeBytes, 0.7, false},
		// The checkpoint volume: shared storage, mounted on every node
		// of the job that writes to it.
		{"storage.cluster.local:/checkpoints", "nfs4", "/mnt/checkpoints", checkpointVolumeBytes, 0.45, true},
	} {
		l := []string{"device", fs.device, "fstype", fs.fstype, "mountpoint", fs.mount}
		h.fs = append(h.fs, fsSeries{
			checkpoint: fs.ckpt, sizeBytes: fs.size, availShare: fs.avail,
			size: ne("node_filesystem_size_bytes", l...), avail: ne("node_filesystem_avail_bytes", l...),
			free: ne("node_filesystem_free_bytes", l...), files: ne("node_filesystem_files", l...),
			filesFree: ne("node_filesystem_files_free", l...), readonly: ne("node_filesystem_readonly", l...),
		})
	}
	// The management NIC; the GPU network's RDMA traffic bypasses the
	// kernel's interface counters, so network faults on it move none of
	// these.
	eth := []string{"device", "eth0"}
	h.netRxBytes, h.netTxBytes = ne("node_network_receive_bytes_total", eth...), ne("node_network_transmit_bytes_total", eth...)
	h.netRxPk, h.netTx = ne("node_network_receive_packets_total", eth...), ne("node_network_transmit_packets_total", eth...)
	h.netRxErr, h.netTxErr = ne("node_network_receive_errs_total", eth...), ne("node_network_transmit_errs_total", eth...)
	h.netRxDrop, h.netTxDr = ne("node_network_receive_drop_total", eth...), ne("node_network_transmit_drop_total", eth...)
	disk := []string{"device", "nvme0n1"}
	h.diskIO, h.diskIOW = ne("node_disk_io_time_seconds_total", disk...), ne("node_disk_io_time_weighted_seconds_total", disk...)
	// Constant on a healthy node: NTP-synchronised clock, descriptors,
	// connections and the textfile collector well within their limits.
	for _, v := range []struct {
		se *series.Series
		v  float64
	}{
		{ne("node_uname_info", "domainname", "(none)", "machine", "x86_64", "nodename", n.name, "release", "5.15.0-127-generic",
			"sysname", "Linux", "version", "#137-Ubuntu SMP"), 1},
		{ne("node_timex_offset_seconds"), 0.000012},
		{ne("node_timex_sync_status"), 1},
		{ne("node_timex_maxerror_seconds"), 0.0105},
		{ne("node_filefd_allocated"), 25600},
		{ne("node_filefd_maximum"), 9223372036854775807},
		{ne("node_nf_conntrack_entries"), 3100},
		{ne("node_nf_conntrack_entries_limit"), 262144},
		{ne("node_textfile_scrape_error"), 0},
		{ne("node_boot_time_seconds"), 0}, // set at the first scrape
	} {
		static(v.se, v.v)
	}
	return h
}

// cpuShare is a mode's share of a CPU's time when a hog keeps hog of its
// socket busy: the hog runs in user mode and takes its time from idle.
func cpuShare(mode string, share, hog float64) float64 {
	busy := 0.0
	for _, m := range cpuModes {
		busy += m.share
	}
	switch mode {
	case "idle":
		return (1 - busy) * (1 - hog)
	case "user":
		return share + (1-busy)*hog
	}
	return share
}

// scrapeNode samples one node's series.
func (t *Twin) scrapeNode(ns *nodeState, ts int64) {
	n := ns.n
	now := t.now.Seconds()
	ns.unschedulable.Append(ts, b2f(n.mods.cordoned))
	if n.mods.cordoned {
		ns.taint.Append(ts, 1)
	} else {
		ns.taint.MarkStale(ts)
	}
	alloc := 0.0
	if !n.mods.pluginKilled {
		for _, g := range n.gpus {
			// The device plugin withdraws unhealthy devices.
			if g.usable() {
				alloc++
			}
		}
	}
	ns.allocGPU.Append(ts, alloc)
	for _, cs := range ns.conditions {
		for i, se := range cs.byStatus {
			se.Append(ts, b2f(conditionStatuses[i] == cs.healthy))
		}
	}
	for i, se := range ns.static {
		v := ns.staticVal[i]
		if se.Metric == "node_boot_time_seconds" {
			v = math.Floor(float64(t.start.Unix()) - uptimeAtStart)
		}
		se.Append(ts, v)
	}
	for _, se := range ns.up {
		se.Append(ts, 1)
	}
	t.scrapeHost(ns, ts, now)
}

// scrapeHost samples a node's node-exporter series.
func (t *Twin) scrapeHost(ns *nodeState, ts int64, now float64) {
	h, n := &ns.host, ns.n
	dt := now - h.last
	h.last = now
	// What hogs beside the ranks take, per socket: the largest share any
	// rank's hog asks of its GPU's NUMA node.
	memHog, cpuHog := h.memHog, h.cpuHog
	clear(memHog)
	clear(cpuHog)
	for _, g := range n.gpus {
		if g.socket < len(h.cpu) {
			memHog[g.socket] = math.Max(memHog[g.socket], g.mods.hostMemHog)
			cpuHog[g.socket] = math.Max(cpuHog[g.socket], g.mods.hostCPUHog)
		}
	}
	load := 0.0
	for cpu, row := range h.cpu {
		for i, m := range cpuModes {
			h.cpuSec[cpu][i] += dt * cpuShare(m.name, m.share, cpuHog[cpu])
			row[i].Append(ts, math.Round(h.cpuSec[cpu][i]*100)/100) // USER_HZ ticks
		}
		// One busy thread per CPU of a hogged socket adds one to its
		// run queue.
		load += loadPerCPU + cpuHog[cpu]
	}
	for i, tau := range []float64{60, 300, 900} {
		if dt > 0 {
			h.loadVal[i] += (load - h.loadVal[i]) * (1 - math.Exp(-dt/tau))
		}
		h.load[i].Append(ts, math.Round(h.loadVal[i]*100)/100)
	}
	// Memory of a training node: about a third in use (pinned buffers,
	// data loaders, the page cache of the dataset). A hog maps its share
	// of the free memory of one NUMA node, half the node's on two
	// sockets; that memory leaves MemFree and MemAvailable.
	total := float64(hostMemBytes)
	avail, free, cached := 0.65*total, 0.2*total, 0.4*total
	hog := 0.0
	for _, share := range memHog {
		hog += share * avail / float64(len(memHog))
	}
	free -= math.Min(hog, free)
	cached -= math.Max(0, hog-0.2*total)
	h.memTotal.Append(ts, total)
	h.memAvail.Append(ts, math.Floor(avail-hog))
	h.memFree.Append(ts, math.Floor(free))
	h.buffers.Append(ts, 0.01*total)
	h.cached.Append(ts, math.Floor(cached))
	h.slab.Append(ts, 0.02*total)
	h.pgmajfault.Append(ts, math.Floor((uptimeAtStart+now)*0.5))
	for _, fs := range h.fs {
		avail := fs.availShare * fs.sizeBytes
		if fs.checkpoint && t.ckptFilled(n) {
			// fallocate takes what is left (free 0 by default).
			avail = 0
		}
		fs.size.Append(ts, fs.sizeBytes)
		fs.avail.Append(ts, avail)
		fs.free.Append(ts, avail)
		fs.files.Append(ts, 1<<27)
		fs.filesFree.Append(ts, 1<<27-1<<20)
		fs.readonly.Append(ts, 0)
	}
	up := uptimeAtStart + now
	h.netRxBytes.Append(ts, math.Floor(up*2.5e6))
	h.netTxBytes.Append(ts, math.Floor(up*1.5e6))
	h.netRxPk.Append(ts, math.Floor(up*3000))
	h.netTx.Append(ts, math.Floor(up*2000))
	for _, se := range []*series.Series{h.netRxErr, h.netTxErr, h.netRxDrop, h.netTxDr} {
		se.Append(ts, 0)
	}
	h.diskIO.Append(ts, math.Floor(up*0.02*1000)/1000)
	h.diskIOW.Append(ts, math.Floor(up*0.03*1000)/1000)
}

// ckptFilled reports whether a job with a rank on n has its checkpoint
// volume filled: the shared volume reads full on every node of the job.
func (t *Twin) ckptFilled(n *node) bool {
	for _, j := range t.jobs {
		if !j.mods.ckptFill {
			continue
		}
		for _, jn := range j.nodes {
			if jn == n {
				return true
			}
		}
	}
	return false
}
