package podproc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// QoS classes as kubelet names their groups; Guaranteed pods have no
// group of their own class.
const (
	QoSGuaranteed = "guaranteed"
	QoSBurstable  = "burstable"
	QoSBestEffort = "besteffort"
)

// Group is what a cgroup path says about a pod.
type Group struct {
	// PodUID is the pod's metadata.uid, with its dashes.
	PodUID string `json:"pod_uid"`
	// QoS is one of the QoS constants.
	QoS string `json:"qos"`
	// ContainerID is the runtime's id of the container whose group the
	// path is in, or below; empty for the pod's own group.
	ContainerID string `json:"container_id,omitempty"`
	// Runtime is the prefix of the container's group: cri-containerd,
	// crio or docker; empty for a bare id (containerd and Docker under
	// the cgroupfs driver).
	Runtime string `json:"runtime,omitempty"`
	// Conmon is true for CRI-O's container monitor, whose group
	// (crio-conmon-<id>) sits in the pod beside the container's: it is
	// not a process of the container.
	Conmon bool `json:"conmon,omitempty"`
}

// ParseGroupPath reads the pod and container from a group path, as found
// in /proc/PID/cgroup or below a hierarchy's mount. Levels above the
// node-allocatable group (a --cgroup-root, the node's own container under
// kind, "/.." from a cgroup namespace) are skipped, and so are levels
// below the container's (a container that makes groups of its own). ok is
// false when no level is a pod's group.
func ParseGroupPath(path string) (g Group, ok bool) {
	levels := strings.Split(path, "/")
	for i := len(levels) - 1; i >= 0; i-- {
		if g, ok = podLevel(levels, i); ok {
			if strings.Count(levels[i], ":") == 2 {
				// runc's systemd form "slice:prefix:id", which a runtime set
				// to the systemd driver writes as a v1 path when kubelet
				// uses cgroupfs: the container is in the same level.
				if f := strings.Split(levels[i], ":"); isID(f[2]) && isPrefix(f[1]) {
					g.Runtime, g.ContainerID = f[1], f[2]
				}
				return g, true
			}
			if i+1 < len(levels) {
				g.ContainerID, g.Runtime, g.Conmon = containerLevel(levels[i+1])
			}
			return g, true
		}
	}
	return Group{}, false
}

// podLevel reads levels[i] as a pod's group, checking the levels above
// it for kubelet's QoS and node-allocatable names, so that a directory
// that merely starts with "pod" is not taken for one.
func podLevel(levels []string, i int) (Group, bool) {
	name := levels[i]
	if slice, _, found := strings.Cut(name, ":"); found {
		name = slice
	}
	if unit, found := strings.CutSuffix(name, ".slice"); found {
		// <parent unit>-pod<escaped uid>: systemd names a slice after its
		// whole path, so the prefix is the QoS slice's name.
		at := strings.LastIndex(unit, "-pod")
		if at < 0 {
			return Group{}, false
		}
		uid := unit[at+len("-pod"):]
		parent := strings.Split(unit[:at], "-")
		qos := QoSGuaranteed
		if n := len(parent); n >= 2 && (parent[n-1] == QoSBurstable || parent[n-1] == QoSBestEffort) {
			qos, parent = parent[n-1], parent[:n-1]
		}
		if parent[len(parent)-1] != "kubepods" || strings.Contains(uid, "-") {
			return Group{}, false
		}
		uid = strings.ReplaceAll(uid, "_", "-")
		if !isUID(uid) {
			return Group{}, false
		}
		return Group{PodUID: uid, QoS: qos}, true
	}
	uid, found := strings.CutPrefix(name, "pod")
	if !found || !isUID(uid) || i == 0 {
		return Group{}, false
	}
	switch up := levels[i-1]; {
	case up == "kubepods":
		return Group{PodUID: uid, QoS: QoSGuaranteed}, true
	case (up == QoSBurstable || up == QoSBestEffort) && i >= 2 && levels[i-2] == "kubepods":
		return Group{PodUID: uid, QoS: up}, true
	}
	return Group{}, false
}

// containerLevel reads the level below a pod's group: <prefix>-<id>.scope
// under systemd, <id> or crio-<id> under cgroupfs. Anything else (a group
// some other agent made in the pod) names no container.
func containerLevel(name string) (id, runtime string, conmon bool) {
	unit, scope := strings.CutSuffix(name, ".scope")
	at := strings.LastIndex(unit, "-")
	if at < 0 {
		if !scope && isID(unit) {
			return unit, "", false
		}
		return "", "", false
	}
	prefix, id := unit[:at], unit[at+1:]
	if !isID(id) || !isPrefix(prefix) {
		return "", "", false
	}
	if r, found := strings.CutSuffix(prefix, "-conmon"); found {
		return id, r, true
	}
	return id, prefix, false
}

// isUID accepts what kubelet writes as a pod UID: a UUID, or for a static
// pod the hex of a hash. It bounds the length so that a long name is not
// a pod's by accident.
func isUID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' || c == '-') {
			return false
		}
	}
	return s[0] != '-' && s[len(s)-1] != '-'
}

// isID accepts a container id: the runtimes use 64 lowercase hex digits;
// 12 is the shortest form anyone prints.
func isID(s string) bool {
	if len(s) < 12 || len(s) > 128 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isPrefix accepts a runtime's scope prefix: lowercase words and dashes.
func isPrefix(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || c == '-') {
			return false
		}
	}
	return true
}

// ErrNotInPod reports that a process's cgroups name no pod.
var ErrNotInPod = errors.New("not in a pod's cgroup")

// maxCgroupFile bounds the text ParseProcCgroup reads: a line per
// hierarchy (a few dozen at most), each a path of at most PATH_MAX.
const maxCgroupFile = 256 << 10

// ParseProcCgroup reads the pod and container of a process from the text
// of /proc/PID/cgroup ("ID:CONTROLLERS:PATH" a line, cgroups(7)). Every
// line that names a pod must name the same one; the container is taken
// from the v2 line when it names one, else from the first v1 line that
// does (on a node where kubelet and the runtime disagree on the driver,
// some v1 hierarchies hold the pod but not the container). A malformed
// line is an error naming its number; a process outside every pod is
// ErrNotInPod.
func ParseProcCgroup(b []byte) (Group, error) {
	if len(b) > maxCgroupFile {
		return Group{}, fmt.Errorf("cgroup file of %d bytes, more than %d", len(b), maxCgroupFile)
	}
	var (
		found bool
		best  Group
		bestN int
	)
	for n, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		n++
		if line == "" {
			if len(b) == 0 {
				break
			}
			return Group{}, fmt.Errorf("cgroup line %d: empty", n)
		}
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			return Group{}, fmt.Errorf("cgroup line %d: want ID:CONTROLLERS:PATH, got %q", n, line)
		}
		id, err := strconv.Atoi(f[0])
		if err != nil || id < 0 || f[0] != strconv.Itoa(id) {
			return Group{}, fmt.Errorf("cgroup line %d: hierarchy id %q is not a non-negative integer", n, f[0])
		}
		if !strings.HasPrefix(f[2], "/") {
			return Group{}, fmt.Errorf("cgroup line %d: path %q is not absolute", n, f[2])
		}
		g, ok := ParseGroupPath(f[2])
		if !ok {
			continue
		}
		if found && g.PodUID != best.PodUID {
			return Group{}, fmt.Errorf("cgroup line %d: pod %s, but line %d names pod %s", n, g.PodUID, bestN, best.PodUID)
		}
		v2 := id == 0 && f[1] == ""
		if !found || (best.ContainerID == "" && g.ContainerID != "") || (v2 && g.ContainerID != "") {
			best, bestN = g, n
		}
		found = true
	}
	if !found {
		return Group{}, ErrNotInPod
	}
	return best, nil
}

// OfProcess reads the pod and container of process pid from
// /proc/PID/cgroup; a process that is gone is os.ErrNotExist.
func OfProcess(pid int) (Group, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return Group{}, err
	}
	g, err := ParseProcCgroup(b)
	if err != nil {
		return Group{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return g, nil
}
