package podproc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// ErrNoContainer reports that the pod has no running app container (or
// none matching the one asked for).
var ErrNoContainer = errors.New("no such app container in the pod")

// ErrAmbiguous reports that the pod runs several app containers and the
// caller named none.
var ErrAmbiguous = errors.New("the pod runs several app containers; name one")

// IsPause reports whether cmdline (the bytes of /proc/PID/cmdline) is a
// pod sandbox's pause process: argv[0] with the base name "pause" (the
// pause image runs /pause).
func IsPause(cmdline []byte) bool {
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return path.Base(string(argv0)) == "pause"
}

// live is a pod process with what choosing among them needs.
type live struct {
	Process
	stat  procfind.Stat
	pause bool
}

// inspect reads each process's stat and command line, leaving out those
// that are gone or zombies.
func (p Pod) inspect() []live {
	var out []live
	for _, pr := range p.Processes {
		st, err := procfind.ReadStat(pr.PID)
		if err != nil || st.State == 'Z' || st.State == 'X' {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pr.PID) + "/cmdline")
		if err != nil {
			continue
		}
		out = append(out, live{Process: pr, stat: st, pause: IsPause(cmd)})
	}
	return out
}

// Main returns the main process of one of the pod's app containers:
// container is its id (as in the pod's status.containerStatuses[].containerID,
// with or without the "containerd://" scheme, or a unique prefix of at
// least 12 digits), or empty when the pod runs exactly one app container.
// App containers are those with a group of their own that are neither
// the sandbox (whose processes are all pause) nor CRI-O's conmon. The
// main process is the container's init: its parent is outside the
// container; of several such (kubectl exec sessions), the earliest
// started. Container names are not in the cgroup: resolve a name to an id
// through the pod's status first.
func (p Pod) Main(container string) (Process, error) {
	if _, id, found := strings.Cut(container, "://"); found {
		container = id
	}
	if container != "" && (len(container) < 12 || !isID(container)) {
		return Process{}, fmt.Errorf("container id %q: want at least 12 lowercase hex digits", container)
	}
	procs := p.inspect()
	byID := map[string][]live{}
	for _, l := range procs {
		if l.ContainerID == "" || l.Conmon {
			continue
		}
		byID[l.ContainerID] = append(byID[l.ContainerID], l)
	}
	var ids []string
	for id, ls := range byID {
		if !slices.ContainsFunc(ls, func(l live) bool { return !l.pause }) {
			continue // the sandbox
		}
		if container == "" || strings.HasPrefix(id, container) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	switch {
	case len(ids) == 0 && container != "":
		return Process{}, fmt.Errorf("pod %s, container %s: %w", p.UID, container, ErrNoContainer)
	case len(ids) == 0:
		return Process{}, fmt.Errorf("pod %s: %w", p.UID, ErrNoContainer)
	case len(ids) > 1 && container != "":
		return Process{}, fmt.Errorf("pod %s: container %s is a prefix of %s", p.UID, container, strings.Join(ids, ", "))
	case len(ids) > 1:
		return Process{}, fmt.Errorf("pod %s: %w (%s)", p.UID, ErrAmbiguous, strings.Join(ids, ", "))
	}
	ls := byID[ids[0]]
	in := map[int]bool{}
	for _, l := range ls {
		in[l.PID] = true
	}
	var best *live
	for i := range ls {
		l := &ls[i]
		if in[l.stat.PPID] || l.pause {
			continue
		}
		if best == nil || l.stat.StartTicks < best.stat.StartTicks || (l.stat.StartTicks == best.stat.StartTicks && l.PID < best.PID) {
			best = l
		}
	}
	if best == nil {
		// Every process's parent is in the container: a parent loop, which
		// only a pid reused across the reads makes.
		return Process{}, fmt.Errorf("pod %s, container %s: no process whose parent is outside the container", p.UID, ids[0])
	}
	return best.Process, nil
}

// MainPID finds the pod podUID under the cgroup hierarchies at cgroupRoot
// (DefaultRoot when empty) and returns the pid of its app container's
// main process (see Pod.Main for container and the rule), for the rank
// injectors' pid parameter. The pid is read from /proc now; the injectors
// pin it by its start time before they act.
func MainPID(cgroupRoot, podUID, container string) (int, error) {
	hs, err := Hierarchies(cgroupRoot)
	if err != nil {
		return 0, err
	}
	p, err := Find(hs, podUID)
	if err != nil {
		return 0, err
	}
	pr, err := p.Main(container)
	if err != nil {
		return 0, err
	}
	return pr.PID, nil
}

// NetNS is a pod's network namespace, as the network injectors take it.
type NetNS struct {
	// PID is a process in the namespace, the injectors' pid parameter.
	PID int `json:"pid"`
	// Path is /proc/PID/ns/net, for setns(2).
	Path string `json:"path"`
	// Dev and Inode identify the namespace (its nsfs file), as
	// internal/node/trafficctl records it.
	Dev   uint64 `json:"dev"`
	Inode uint64 `json:"inode"`
}

// ErrHostNetwork reports that the pod shares the node's network
// namespace (hostNetwork: true): a network fault there would hit the
// node and every pod like it, so it is refused.
var ErrHostNetwork = errors.New("the pod uses the node's network namespace")

// NetNSOf returns the network namespace of the pod podUID under the cgroup
// hierarchies at cgroupRoot: that of its pause process, which holds it
// for the pod's life, or, for a runtime that runs none, of its app
// containers' main process. A pod in the node's namespace (pid 1's, seen
// with hostPID) wraps ErrHostNetwork.
func NetNSOf(cgroupRoot, podUID string) (NetNS, error) {
	hs, err := Hierarchies(cgroupRoot)
	if err != nil {
		return NetNS{}, err
	}
	p, err := Find(hs, podUID)
	if err != nil {
		return NetNS{}, err
	}
	return p.NetNS()
}

// NetNS returns the pod's network namespace; see NetNSOf.
func (p Pod) NetNS() (NetNS, error) {
	pid := 0
	for _, l := range p.inspect() {
		if l.pause && l.ContainerID != "" {
			pid = l.PID
			break
		}
	}
	if pid == 0 {
		pr, err := p.firstApp()
		if err != nil {
			return NetNS{}, err
		}
		pid = pr.PID
	}
	ns, err := statNS(pid)
	if err != nil {
		return NetNS{}, fmt.Errorf("pod %s: network namespace of pid %d: %w", p.UID, pid, err)
	}
	host, err := hostNetNS()
	if err != nil {
		return NetNS{}, fmt.Errorf("pod %s: %w", p.UID, err)
	}
	if ns.Dev == host.Dev && ns.Inode == host.Inode {
		return NetNS{}, fmt.Errorf("pod %s (pid %d): %w", p.UID, pid, ErrHostNetwork)
	}
	return ns, nil
}

// firstApp is the main process of the pod's app containers, any of them:
// they all share the pod's network namespace.
func (p Pod) firstApp() (Process, error) {
	pr, err := p.Main("")
	if !errors.Is(err, ErrAmbiguous) {
		return pr, err
	}
	for _, l := range p.inspect() {
		if l.ContainerID != "" && !l.Conmon && !l.pause {
			return p.Main(l.ContainerID)
		}
	}
	return Process{}, fmt.Errorf("pod %s: %w", p.UID, ErrNoContainer)
}

// hostNetNS is the node's network namespace: pid 1's. Where pid 1's
// namespace cannot be read (a VM's init that refuses it, a lockdown that
// refuses even root), ours stands in for it: the node agent runs with
// hostNetwork, so the two are the same there.
func hostNetNS() (NetNS, error) {
	ns, err := statNS(1)
	if errors.Is(err, fs.ErrPermission) {
		ns, err = statNS(os.Getpid())
	}
	if err != nil {
		return NetNS{}, fmt.Errorf("the node's network namespace: %w", err)
	}
	return ns, nil
}

func statNS(pid int) (NetNS, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/ns/net"
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return NetNS{}, err
	}
	return NetNS{PID: pid, Path: path, Dev: st.Dev, Inode: st.Ino}, nil
}
