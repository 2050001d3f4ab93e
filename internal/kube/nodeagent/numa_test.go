package nodeagent_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/numa"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc/podproctest"
)

// podGroups is one pod's container group in every hierarchy of this
// machine, in kubelet's layout, below base(h) in each.
type podGroups map[cgroup.Hierarchy]podproctest.KubePod

// newPodGroups makes the container group of a fresh pod in every
// hierarchy at podproc.DefaultRoot below base(h) ("" skips h). With
// limits, on v2 the cpu and cpuset controllers are enabled down to the
// container (base must then hold no process), as kubelet's tree has them.
func newPodGroups(t *testing.T, limits bool, base func(cgroup.Hierarchy) string) (string, podGroups) {
	t.Helper()
	if os.Geteuid() != 0 {
		kubetest.Missing(t, "not root: a pod's cgroups need root")
	}
	hs, err := podproc.Hierarchies("")
	if err != nil {
		kubetest.Missing(t, fmt.Sprintf("no cgroup hierarchies: %v", err))
	}
	uid, id := randUID(t), randHex(t, 64)
	out := podGroups{}
	for _, h := range hs {
		b := base(h)
		if b == "" {
			continue
		}
		v2 := h.Version == cgroup.V2
		var ctrls []string
		if v2 && limits {
			for _, c := range []string{"cpu", "cpuset"} {
				if hasController(h, c) {
					ctrls = append(ctrls, c)
				}
			}
		}
		out[h] = podproctest.NewKubePod(t, v2, h.Mount, b, uid, id, ctrls...)
	}
	return uid, out
}

func hasController(h cgroup.Hierarchy, c string) bool {
	b, err := os.ReadFile(filepath.Join(h.Mount, "cgroup.controllers"))
	return err == nil && slices.Contains(strings.Fields(string(b)), c)
}

// join moves pid into the pod's container group of every hierarchy; pid
// must end before the test's cleanups remove the groups.
func (pg podGroups) join(t *testing.T, pid int) {
	t.Helper()
	for h, p := range pg {
		podproctest.Join(t, h.Mount, p.Container, pid)
	}
}

// cpuGroup is the pod's container group in the hierarchy of controller
// c (cpu, cpuset).
func (pg podGroups) group(t *testing.T, c string) (cgroup.Hierarchy, string) {
	t.Helper()
	want, err := cgroup.Find(c)
	if err != nil {
		kubetest.Missing(t, fmt.Sprintf("no %s cgroup controller: %v", c, err))
	}
	for h, p := range pg {
		if h.Mount == want.Mount {
			return want, p.Container
		}
	}
	t.Fatalf("no pod group in the %s hierarchy at %s", c, want.Mount)
	return cgroup.Hierarchy{}, ""
}

// narrowCpuset gives the pod's container the cpuset cpus/mems, each level
// above it that has none its parent's (a v1 group starts with none and
// takes no task until given some).
func (pg podGroups) narrowCpuset(t *testing.T, cpus, mems string) (cgroup.Hierarchy, string) {
	t.Helper()
	h, ctr := pg.group(t, "cpuset")
	fillCpuset(t, h, ctr, cpus, mems)
	return h, ctr
}

// fillCpuset gives group, and each level above it that has none, its
// parent's cpus and mems, then group cpus and mems when they are not "".
func fillCpuset(t *testing.T, h cgroup.Hierarchy, group, cpus, mems string) {
	t.Helper()
	var levels []string
	for d := group; d != "/"; d = filepath.Dir(d) {
		levels = append([]string{d}, levels...)
	}
	for _, d := range levels {
		for i, name := range []string{"cpuset.cpus", "cpuset.mems"} {
			val := []string{cpus, mems}[i]
			if d != group || val == "" {
				if cur, err := os.ReadFile(filepath.Join(h.Mount, d, name)); err == nil && strings.TrimSpace(string(cur)) != "" {
					continue // kept as it is: it may hold others' groups
				}
				eff := name + ".effective"
				if h.Version == cgroup.V1 {
					eff = strings.Replace(name, "cpuset.", "cpuset.effective_", 1)
				}
				val = readTrim(t, filepath.Join(h.Mount, filepath.Dir(d), eff))
			}
			if err := os.WriteFile(filepath.Join(h.Mount, d, name), []byte(val), 0o644); err != nil {
				t.Fatalf("set %s of %s to %q: %v", name, d, val, err)
			}
		}
	}
}

func readTrim(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// masks are the CPU masks of pid's threads.
func masks(t *testing.T, pid int) map[int]string {
	t.Helper()
	tids, err := numa.Threads(pid)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, tid := range tids {
		if c, err := numa.ThreadAffinity(tid); err == nil {
			out[tid] = numa.FormatCPUList(c)
		}
	}
	return out
}

// The rank mechanisms that change a pod's process placement, through
// NodeFaults and the real agent, on a rank it finds by the pod's uid in
// kubelet's layout:
//   - cgroup-cpu sets the quota of the rank's container group (the rank
//     stays in it) and Recover writes back exactly the quota that was
//     there, one that is not the default;
//   - sched-setaffinity and migrate-pages on a pod whose cpuset is one of
//     this machine's two CPUs: on one NUMA node (the machine's own) they
//     are refused in one line that names the node count and what the
//     pod's cpuset allows, read from its container group, and nothing
//     changes. (Aiming within the cpuset on a second node is
//     numafault's TestWrongAffinityWithinThePodCpuset, on made-up node
//     trees.)
func TestPlacementFaultsInPod(t *testing.T) {
	uid, pod := newPodGroups(t, true, func(cgroup.Hierarchy) string { return "/" })
	rank0 := startHelper(t, "python", nil, "RANK=0", "LOCAL_RANK=0")
	_, cpusetGroup := pod.narrowCpuset(t, "1", "0")
	pod.join(t, rank0.pid())
	cpuH, cpuGroup := pod.group(t, "cpu")
	quotaFiles := []string{"cpu.max"}
	before := []string{"150000 50000"}
	if cpuH.Version == cgroup.V1 {
		quotaFiles, before = []string{"cpu.cfs_period_us", "cpu.cfs_quota_us"}, []string{"50000", "150000"}
	}
	for i, f := range quotaFiles {
		if err := os.WriteFile(filepath.Join(cpuH.Mount, cpuGroup, f), []byte(before[i]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	quota := func() []string {
		var out []string
		for _, f := range quotaFiles {
			out = append(out, readTrim(t, filepath.Join(cpuH.Mount, cpuGroup, f)))
		}
		return out
	}

	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	createNode(t, env)
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	startAgent(t, env, ledgerPath, "--cgroup-root", podproc.DefaultRoot)
	zero := 0
	tgt := v1alpha1.NodeFaultTarget{Kind: "rank", Job: "train/llm", Rank: &zero, Pod: "train/llm-worker-0", PodUID: uid, Key: "train/llm/0"}

	create(t, env, newFault("slow", "workload.straggler", "cgroup-cpu", map[string]string{"slowdown": "2", "cpus": "1"}, tgt, time.Now().Add(10*time.Minute)))
	waitPhase(t, env, "slow", v1alpha1.NodeFaultApplied)
	want := []string{"50000 100000"}
	if cpuH.Version == cgroup.V1 {
		want = []string{"100000", "50000"}
	}
	if got := quota(); !slices.Equal(got, want) {
		t.Errorf("the container group's %v read %v while the straggler is applied, want %v", quotaFiles, got, want)
	}
	if g, err := cgroup.GroupOf(cpuH, rank0.pid(), rank0.pid()); err != nil || g != cpuGroup {
		t.Errorf("rank 0 is in cpu group %q (%v), want still its container's %s", g, err, cpuGroup)
	}
	setRecover(t, env, "slow")
	waitPhase(t, env, "slow", v1alpha1.NodeFaultRecovered)
	if got := quota(); !slices.Equal(got, before) {
		t.Errorf("the container group's %v read %v after Recover, want %v as before", quotaFiles, got, before)
	}

	topo, err := numa.ReadTopology("")
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Nodes) != 1 {
		// A machine of several nodes would pin or move for real; what
		// this checks is the refusal a one-node machine must give.
		kubetest.Missing(t, fmt.Sprintf("the placement refusals are those of a one-node machine; this one has %d", len(topo.Nodes)))
	}
	allows := fmt.Sprintf("pid %d's cpuset (group %s) allows cpus 1 and memory nodes 0", rank0.pid(), cpusetGroup)
	beforeMasks := masks(t, rank0.pid())
	for _, tc := range []struct{ name, fault, mech, what string }{
		{"aff", "numa.wrong-affinity", "sched-setaffinity", "CPUs"},
		{"mem", "numa.remote-memory", "migrate-pages", "memory"},
	} {
		create(t, env, newFault(tc.name, tc.fault, tc.mech, nil, tgt, time.Now().Add(10*time.Minute)))
		f := waitPhase(t, env, tc.name, v1alpha1.NodeFaultFailed)
		want := fmt.Sprintf("needs two NUMA nodes with %s; this machine has 1 (node %d); %s", tc.what, topo.Nodes[0].ID, allows)
		if !strings.Contains(f.Status.Message, want) || strings.Contains(f.Status.Message, "\n") {
			t.Errorf("%s on a pod with a 1-cpu cpuset: message %q, want one line with %q", tc.fault, f.Status.Message, want)
		}
	}
	if after := masks(t, rank0.pid()); fmt.Sprint(after) != fmt.Sprint(beforeMasks) {
		t.Errorf("rank 0's masks went from %v to %v", beforeMasks, after)
	}
	if p := pendingKeys(t, ledgerPath); len(p) != 0 {
		t.Errorf("ledger pending %v, want none", p)
	}
}

// hogsOf returns the numa-hog processes a NodeFault's key names.
func hogsOf(t *testing.T, name string) []procfind.Proc {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []procfind.Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte("numa-hog\x00")) || !bytes.Contains(b, []byte("--key=nodefault/"+name+"/")) {
			continue
		}
		if p, err := procfind.Identify(pid); err == nil {
			if st, err := p.Stat(); err == nil && st.State != 'Z' {
				out = append(out, p)
			}
		}
	}
	return out
}

// groupsOf reads /proc/PID/cgroup as hierarchy line -> group.
func groupsOf(t *testing.T, pid int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(readTrim(t, "/proc/"+strconv.Itoa(pid)+"/cgroup"), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) == 3 {
			out[f[0]+":"+f[1]] = f[2]
		}
	}
	return out
}

// The NUMA hogs, node faults with no pod, run from the agent driven by
// NodeFaults. The agent runs in a pod of its own (kubelet's layout below
// this test's own group in every hierarchy, as a DaemonSet's pod would
// be): each hog leaves the agent's pod for the node level above it
// before it takes anything, so no limit or cpuset of the agent's pod
// applies to it. A SIGKILLed agent leaves its hogs running (a restart
// does not end a fault); the next agent, on the same ledger, stops them
// on Recover.
func TestNUMAHogsFromTheAgent(t *testing.T) {
	self := groupsOf(t, os.Getpid())
	// Below this test's own group in each hierarchy, so that the node
	// level the hogs go to is that group, not the machine's root.
	_, pod := newPodGroups(t, false, func(h cgroup.Hierarchy) string {
		for line, g := range self {
			if h.Version == cgroup.V2 && line == "0:" {
				return g
			}
			if h.Version == cgroup.V1 && (strings.HasSuffix(line, ":"+h.Controller) || strings.HasSuffix(line, ":name="+h.Controller)) {
				return g
			}
		}
		return ""
	})
	if len(pod) == 0 {
		kubetest.Missing(t, "no hierarchy to make the agent's pod in")
	}
	// The agent's pod is narrower than the node, as a DaemonSet's is: on
	// v1, a cpuset of CPU 1 alone (the cpu hog pins a thread to CPU 0,
	// the first of the node's) and a memory limit below what the memory
	// hog takes (a tenth of the node's free memory), so a hog left in the
	// agent's pod could not take what it holds.
	limit := uint64(256 << 20)
	for h, p := range pod {
		switch {
		case h.Version == cgroup.V1 && h.Controller == "cpuset":
			fillCpuset(t, h, p.Container, "1", "")
		case h.Version == cgroup.V1 && h.Controller == "memory":
			if err := os.WriteFile(filepath.Join(h.Mount, p.Pod, "memory.limit_in_bytes"), []byte(strconv.FormatUint(limit, 10)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	createNode(t, env)
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	agent := startAgent(t, env, ledgerPath, "--cgroup-root", podproc.DefaultRoot)
	pod.join(t, agent.cmd.Process.Pid)
	agentGroups := groupsOf(t, agent.cmd.Process.Pid)
	t.Cleanup(func() {
		for _, name := range []string{"cpu", "mem"} {
			for _, p := range hogsOf(t, name) {
				_ = p.Signal(syscall.SIGKILL)
			}
		}
	})

	zero := 0
	tgt := v1alpha1.NodeFaultTarget{Kind: "rank", Job: "train/llm", Rank: &zero, Key: "train/llm/0"}
	create(t, env, newFault("cpu", "numa.cpu-saturation", "cpu-hog", map[string]string{"threads": "1"}, tgt, time.Now().Add(10*time.Minute)))
	create(t, env, newFault("mem", "numa.memory-pressure", "memory-hog", map[string]string{"fraction": "0.1"}, tgt, time.Now().Add(10*time.Minute)))
	hogs := map[string]procfind.Proc{}
	for _, name := range []string{"cpu", "mem"} {
		waitPhase(t, env, name, v1alpha1.NodeFaultApplied)
		hs := hogsOf(t, name)
		if len(hs) != 1 {
			t.Fatalf("NodeFault %s is Applied with %d hogs running, want 1", name, len(hs))
		}
		hogs[name] = hs[0]
		got := groupsOf(t, hs[0].PID)
		for line, ag := range agentGroups {
			if _, inPod := podproc.ParseGroupPath(ag); !inPod {
				continue
			}
			want, _ := podproc.NodeLevel(ag)
			if got[line] != want {
				t.Errorf("hog of %s is in group %q of hierarchy %s, want the node level %q above the agent's pod (%s)", name, got[line], line, want, ag)
			}
		}
	}

	agent.stop(t, syscall.SIGKILL)
	for name, p := range hogs {
		if ok, err := p.Alive(); err != nil || !ok {
			t.Fatalf("the hog of %s (pid %d) ended with the agent (%v): a restart must not end a fault", name, p.PID, err)
		}
	}
	again := startAgent(t, env, ledgerPath, "--cgroup-root", podproc.DefaultRoot)
	pod.join(t, again.cmd.Process.Pid)
	for name, p := range hogs {
		setRecover(t, env, name)
		waitPhase(t, env, name, v1alpha1.NodeFaultRecovered)
		testutil.Eventually(t, within, "the hog of "+name+" to end", func() bool { ok, _ := p.Alive(); return !ok })
	}
	if p := pendingKeys(t, ledgerPath); len(p) != 0 {
		t.Errorf("ledger pending %v, want none", p)
	}
}
