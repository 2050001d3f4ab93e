package catalog

import (
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
)

// pathParam names the checkpoint directory a checkpoint fault works on.
func pathParam() Param {
	return Param{Name: "path", Type: ParamString, Default: "", Help: "checkpoint directory, without symlinks in it; empty for the one the job's ranks carry in GPUCHAOS_CKPT_DIR"}
}

// checkPath accepts an empty path (the job's own directory) or a clean
// absolute one. A relative path would depend on the agent's working
// directory, and ".." could lead a byte flip or a fill outside the
// checkpoints.
func checkPath(v Values) error {
	p := v.String("path")
	if p == "" {
		return nil
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return &ParamError{Param: "path", Err: errors.New("must be a clean absolute path such as /checkpoints/run1")}
	}
	return nil
}

// checkPathAndServer is checkPath for checkpoint.storage-partition, which
// also takes a server: empty (found from the mount), an IP address, a CIDR
// or a host name. Anything else (a URL, a mount source) is refused here
// rather than failing a DNS lookup at injection.
func checkPathAndServer(v Values) error {
	if err := checkPath(v); err != nil {
		return err
	}
	s := v.String("server")
	if s == "" {
		return nil
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return nil
	}
	if _, err := netip.ParsePrefix(s); err == nil {
		return nil
	}
	if len(s) > 253 || strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != "" ||
		strings.HasPrefix(s, "-") || strings.HasPrefix(s, ".") || strings.Contains(s, "..") {
		return &ParamError{Param: "server", Err: errors.New("must be an IP address, a CIDR or a host name such as storage-0.example.org")}
	}
	return nil
}

// checkpointFaults attack the job's ability to save and restore its state
// (strategy 6 of the talk). None of them shows in GPU telemetry; the job's
// own checkpoint metrics, or a restart that falls back, are where they show.
func checkpointFaults() []*Fault {
	workload := func() []Layer { return []Layer{LayerWorkload} }
	ckptSeries := func(extra ...string) []string {
		return append([]string{seriesJobLastCheckpointStep, seriesJobCheckpointFails, seriesJobLastCheckpoint}, extra...)
	}
	return []*Fault{
		{
			ID:      "checkpoint.kill-writer",
			Family:  FamilyCheckpoint,
			Summary: "Kill the process writing a checkpoint in the middle of the write",
			Scope:   ScopeJob,
			Safety:  SafetyDisruptive,
			Params: []Param{
				pathParam(),
				{Name: "signal", Type: ParamEnum, Default: "SIGKILL", Enum: []string{"SIGKILL", "SIGTERM"}, Help: "signal to send; SIGTERM lets a well-behaved writer clean up"},
				{Name: "timeout", Type: ParamDuration, Default: "10m", Min: "1s", Max: "24h", Help: "how long to wait for a checkpoint write before giving up (never past the experiment's end)"},
				pidParam(),
			},
			// In Kubernetes the container's restart shows in the pod status.
			Detectable: []Layer{LayerWorkload, LayerK8sAPI},
			Mechanisms: []Mechanism{{
				Name: "signal", Targets: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: []Layer{LayerWorkload, LayerK8sAPI},
				Description: "Polls /proc/PID/fd and fdinfo of the job's ranks every few milliseconds and signals the rank that holds a " +
					"file under the checkpoint directory open for writing once it has written some bytes, so the checkpoint is torn. " +
					"On Kubernetes the node agent watches every process of the pod's app containers (found by the pod's cgroup, " +
					"again after a container restart) and the directory is the path inside the container.",
			}},
			Signature: Signature{
				Series:   ckptSeries(seriesJobRestartsTotal, seriesJobUp),
				Workload: "The job dies mid-checkpoint and restarts from the previous complete checkpoint; a torn file is left behind unless the writer renames atomically.",
				Silent:   true,
				Effects:  fixedEffects(Effect{Kind: EffectCheckpoint, Mode: "kill-writer"}),
			},
			Check: checkPath,
		},
		{
			ID:      "checkpoint.fill-volume",
			Family:  FamilyCheckpoint,
			Summary: "Fill the checkpoint volume so the next checkpoint cannot be written",
			Scope:   ScopeJob,
			Safety:  SafetyDisruptive,
			Params: []Param{
				pathParam(),
				{Name: "free", Type: ParamBytes, Default: "0", Min: "0", Unit: "bytes", Help: "free space to leave on the volume"},
			},
			Detectable: []Layer{LayerWorkload, LayerExporterMetrics},
			Mechanisms: []Mechanism{{
				Name: "fallocate", Targets: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: []Layer{LayerWorkload, LayerExporterMetrics},
				Description: "Allocates one file in the checkpoint directory with fallocate(2) so that only the chosen free space is left " +
					"(counting the blocks reserved for root, which a root writer can use), and deletes it on recovery. Filesystem " +
					"metrics (node-exporter, kubelet volume stats) see the space go. On Kubernetes the node agent fills the pod's " +
					"volume as its containers see it (the path resolved inside a container's root, symlinks refused); a volume " +
					"detached from the node with its pod before recovery cannot be reached, and recovery says so.",
			}},
			Signature: Signature{
				Series:   ckptSeries("node_filesystem_avail_bytes", "kubelet_volume_stats_available_bytes"),
				Workload: "Checkpoint writes fail with 'No space left on device'; a job that ignores the failure trains on without a recent checkpoint.",
				Silent:   true,
				Effects:  fixedEffects(Effect{Kind: EffectCheckpoint, Mode: "fill"}),
			},
			Check: checkPath,
		},
		{
			ID:      "checkpoint.slow-storage",
			Family:  FamilyCheckpoint,
			Summary: "Checkpoint storage at a fraction of its bandwidth; synchronous checkpoints stall the job",
			Scope:   ScopeJob,
			Safety:  SafetyDisruptive,
			Params: []Param{
				pathParam(),
				{Name: "factor", Type: ParamFloat, Default: "0.1", Min: "0.001", Max: "1", Help: "multiplier of the storage bandwidth"},
				{Name: "bandwidth", Type: ParamBytes, Default: "0", Min: "0", Unit: "bytes/s", Help: "the storage's bandwidth; 0 measures it with a 64 MiB direct write into the checkpoint directory"},
				pidParam(),
			},
			// A real slow device also shows in disk latency metrics; both
			// mechanisms throttle above the device, so the disk itself looks
			// healthy and they miss that layer.
			Detectable: []Layer{LayerWorkload, LayerExporterMetrics},
			Mechanisms: []Mechanism{
				{
					Name: "cgroup-io", Targets: targetsLocalK8s(), Safety: SafetyDisruptive,
					Reaches: workload(), Misses: []Layer{LayerExporterMetrics},
					Description: "Moves the job's ranks into a cgroup of ours whose io.max (v2) or blkio throttle (v1) caps reads and writes " +
						"to the volume's block device at factor × its bandwidth, and moves them back on recovery. On Kubernetes no " +
						"process is moved out of kubelet's groups: the node agent writes the cap into the pod's own group, which " +
						"holds every container of the pod, and writes back the value it replaced on recovery. Block devices only: " +
						"refused on tmpfs, overlay, NFS or Lustre. On cgroup v1, direct I/O is throttled but buffered writes flushed " +
						"later by the kernel's writeback threads are not.",
				},
				{
					Name: "fuse-latency", Planned: targetsLocalK8s(), Safety: SafetyDisruptive,
					Reaches: workload(), Misses: []Layer{LayerExporterMetrics},
					Description: "Mounts a FUSE pass-through over the checkpoint directory that paces reads and writes to factor × the " +
						"measured bandwidth; works on any filesystem, but files the job already has open keep the fast path.",
				},
			},
			Signature: Signature{
				Series:   ckptSeries(seriesJobStepSeconds, "node_disk_write_time_seconds_total"),
				Workload: "Checkpoints take 1/factor as long; a synchronous checkpoint stalls every rank for that time, an asynchronous one only delays the next.",
				Silent:   true,
				Effects: func(v Values) []Effect {
					return []Effect{{Kind: EffectCheckpoint, Mode: "slow", Factor: v.Float("factor")}}
				},
			},
			Check: checkPath,
		},
		{
			ID:      "checkpoint.storage-partition",
			Family:  FamilyCheckpoint,
			Summary: "Checkpoint storage stops answering; writes hang",
			Scope:   ScopeJob,
			Safety:  SafetyDisruptive,
			Params: []Param{
				pathParam(),
				{Name: "server", Type: ParamString, Default: "", Help: "storage server to cut off: an IPv4 address, a host name or a CIDR; empty for the server of the network filesystem that holds path (NFS, CIFS or sshfs)"},
				{Name: "port", Type: ParamInt, Default: "0", Min: "0", Max: "65535", Help: "server port to cut off (2049 for NFS, 445 for CIFS, 22 for sshfs); 0 for every port"},
			},
			// A network filesystem whose server vanished logs it ("nfs:
			// server ... not responding"); a FUSE stall does not.
			Detectable: []Layer{LayerWorkload, LayerKernelLog},
			Mechanisms: []Mechanism{
				{
					Name: "cls-bpf", Targets: targetsLocalK8s(), Safety: SafetyDisruptive,
					Reaches: workload(), Misses: []Layer{LayerKernelLog},
					Description: "Finds the storage server (given, or parsed from the mount that holds path: NFS, CIFS or sshfs), " +
						"and attaches cls_bpf programs on ingress and egress of the interface this node routes to it that drop " +
						"every IPv4 packet to or from the server (and port), as a partitioned storage network does. " +
						"The mount is not touched: a hard mount blocks its writers until recovery. " +
						"The kernel log shows it only where the filesystem logs its server's silence: NFS does " +
						"(\"server ... not responding\") and CIFS does, but sshfs and other FUSE filesystems log nothing. " +
						"On Kubernetes the mount is read from the pod's own mount table and the cut is made in the node's " +
						"network namespace, where kubelet's NFS and CIFS mounts talk to their server; a FUSE daemon inside " +
						"the pod is not reached.",
				},
				{
					Name: "fuse-latency", Planned: targetsLocalK8s(), Safety: SafetyDisruptive,
					Reaches: workload(), Misses: []Layer{LayerKernelLog},
					Description: "Mounts the FUSE pass-through over the checkpoint directory and holds every write until recovery, " +
						"as a hung network filesystem does.",
				},
			},
			Signature: Signature{
				Series:   ckptSeries(seriesJobStepsTotal),
				Logs:     []string{"nfs: server storage-0 not responding, still trying"},
				Workload: "Checkpoint writes block in D state; a synchronous checkpoint stalls the whole job, an asynchronous one piles up.",
				Silent:   true,
				Effects:  fixedEffects(Effect{Kind: EffectCheckpoint, Mode: "partition"}),
			},
			Check: checkPathAndServer,
		},
		{
			ID:      "checkpoint.corrupt-newest",
			Family:  FamilyCheckpoint,
			Summary: "Flip bytes in the newest checkpoint so the next restore fails or falls back",
			Scope:   ScopeJob,
			Safety:  SafetyDisruptive,
			Params: []Param{
				pathParam(),
				{Name: "bytes", Type: ParamInt, Default: "64", Min: "1", Max: "1048576", Unit: "bytes", Help: "number of bytes to flip, at random offsets"},
				{Name: "seed", Type: ParamInt, Default: "0", Min: "0", Help: "seed of the offsets; 0 derives it from the injection's key"},
			},
			Detectable: workload(),
			Mechanisms: []Mechanism{{
				Name: "byte-flip", Targets: targetsLocalK8s(), Safety: SafetyDisruptive, Reaches: workload(),
				Description: "Inverts bytes at seeded random offsets of the newest checkpoint file (highest step), recording each offset " +
					"and original byte first so that recovery puts them back and the file is restored bit for bit. On Kubernetes " +
					"the node agent corrupts the newest checkpoint as the pod's containers see it; recovery finds it again through " +
					"any live process of the pod, or by its file handle through the node's mount of the volume once the pod is gone.",
			}},
			Signature: Signature{
				Series:   []string{seriesJobRestartsTotal, seriesJobLastCheckpoint},
				Workload: "Nothing until the next restore: then loading fails (a checksum or unpickling error) and the job falls back one checkpoint, or trains on silently damaged weights if nothing checks.",
				Silent:   true,
				Effects:  fixedEffects(Effect{Kind: EffectCheckpoint, Mode: "corrupt"}),
			},
			Check: checkPath,
		},
	}
}
