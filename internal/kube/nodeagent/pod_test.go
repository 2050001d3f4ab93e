package nodeagent_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc/podproctest"

	"github.com/vishvananda/netns"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc"
	nt "github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
)

// kubePod is a pod as kubelet lays it out in this machine's own cgroup
// hierarchy: the pod's group with a sandbox container group and one app
// container group, made for the test and removed at its end.
type kubePod struct {
	uid              string
	mount            string
	sandbox, app     string // groups below mount
	sandboxID, appID string
}

// newKubePod makes the groups of a pod with a fresh uid: the systemd
// driver's Burstable layout in the v2 hierarchy, or cgroupfs's BestEffort
// one in the v1 pids hierarchy where there is no v2 one. It skips unless
// root can make them.
func newKubePod(t *testing.T) *kubePod {
	t.Helper()
	if os.Geteuid() != 0 {
		kubetest.Missing(t, "not root: moving processes between cgroups needs root")
	}
	hs, err := podproc.Hierarchies("")
	if err != nil {
		kubetest.Missing(t, fmt.Sprintf("no cgroup hierarchies: %v", err))
	}
	p := &kubePod{uid: randUID(t), sandboxID: randHex(t, 32), appID: randHex(t, 32)}
	var pod string
	for _, h := range hs {
		if h.Version == cgroup.V2 {
			p.mount = h.Mount
			pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(p.uid, "-", "_") + ".slice"
			p.sandbox, p.app = pod+"/cri-containerd-"+p.sandboxID+".scope", pod+"/cri-containerd-"+p.appID+".scope"
			break
		}
	}
	if p.mount == "" {
		for _, h := range hs {
			if h.Controller == "pids" {
				p.mount, pod = h.Mount, "/kubepods/besteffort/pod"+p.uid
				p.sandbox, p.app = pod+"/"+p.sandboxID, pod+"/"+p.appID
				break
			}
		}
	}
	if p.mount == "" {
		kubetest.Missing(t, fmt.Sprintf("neither a v2 nor a v1 pids hierarchy among %+v", hs))
	}
	// Registered before any process starts, so it runs after their
	// cleanups have killed and reaped them and the groups are empty.
	made := podproctest.MkGroups(t, p.mount, []string{p.sandbox, p.app})
	t.Cleanup(func() { podproctest.RmGroups(t, made) })
	return p
}

// join moves pid into group (below the pod's mount).
func (p *kubePod) join(t *testing.T, group string, pid int) {
	t.Helper()
	podproctest.Join(t, p.mount, group, pid)
}

// helper is an idle process of this test binary under argv0 with env
// added, started in ns when ns is not nil. done closes when it has
// exited and been reaped; state then holds how. Cleanup kills it.
type helper struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startHelper(t *testing.T, argv0 string, ns *netns.NsHandle, env ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Args[0] = argv0
	cmd.Env = append(append(os.Environ(), nt.SleeperEnv+"=1"), env...)
	var err error
	if ns != nil {
		err = nt.In(*ns, cmd.Start)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		t.Fatalf("start %s: %v", argv0, err)
	}
	h := &helper{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(h.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-h.done
	})
	return h
}

func (h *helper) pid() int { return h.cmd.Process.Pid }

func (h *helper) exited() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// procState is the state letter of /proc/PID/stat (R, S, T, Z, ...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("read the state of pid %d: %v", pid, err)
	}
	// The command name may hold spaces and parentheses; the state
	// follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		t.Fatalf("/proc/%d/stat %q: no state", pid, b)
	}
	return string(b[i+2])
}

// Rank faults aimed at a pod, through the real agent process: the agent
// finds rank 0 among the pod's processes by the pod's uid in a kubelet
// cgroup layout (not by a pid in the spec), beside a /pause sandbox and
// a rank 1 in the same container that started first (the container's
// main process, so picking the main process would hit the wrong rank).
// hang-rank stops rank 0 (state T) and Recover continues it; a
// duty-cycle straggler stops it part of each period and leaves it running
// on Recover; kill-rank kills it. Rank 1 and the pause process are left alone throughout.
func TestRankFaultsInPod(t *testing.T) {
	pod := newKubePod(t)
	pause := startHelper(t, "/pause", nil)
	rank1 := startHelper(t, "python", nil, "RANK=1", "LOCAL_RANK=1")
	rank0 := startHelper(t, "python", nil, "RANK=0", "LOCAL_RANK=0")
	pod.join(t, pod.sandbox, pause.pid())
	pod.join(t, pod.app, rank1.pid())
	pod.join(t, pod.app, rank0.pid())

	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	createNode(t, env)
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	startAgent(t, env, ledgerPath, "--cgroup-root", podproc.DefaultRoot)

	zero := 0
	tgt := v1alpha1.NodeFaultTarget{Kind: "rank", Job: "train/llm", Rank: &zero, Pod: "train/llm-worker-0", PodUID: pod.uid, Key: "train/llm/0"}
	untouched := func(when string) {
		t.Helper()
		for name, h := range map[string]*helper{"rank 1": rank1, "pause": pause} {
			if h.exited() {
				t.Fatalf("%s: %s (pid %d) died", when, name, h.pid())
			}
			if s := procState(t, h.pid()); s == "T" {
				t.Fatalf("%s: %s (pid %d) is stopped", when, name, h.pid())
			}
		}
	}

	create(t, env, newFault("hang", "workload.hang-rank", "signal", map[string]string{"watchdog": "10m"}, tgt, time.Now().Add(10*time.Minute)))
	waitPhase(t, env, "hang", v1alpha1.NodeFaultApplied)
	testutil.Eventually(t, within, "rank 0 to show stopped (T)", func() bool { return procState(t, rank0.pid()) == "T" })
	untouched("hang applied")
	setRecover(t, env, "hang")
	waitPhase(t, env, "hang", v1alpha1.NodeFaultRecovered)
	if s := procState(t, rank0.pid()); s == "T" {
		t.Fatalf("hang-rank reports Recovered, yet rank 0 (pid %d) is still stopped", rank0.pid())
	}
	untouched("hang recovered")

	// duty-cycle stops rank 0 for 90 ms of every 100 ms: polled, it
	// shows stopped soon; a sleeping process never does on its own.
	create(t, env, newFault("slow", "workload.straggler", "duty-cycle", map[string]string{"slowdown": "10"}, tgt, time.Now().Add(10*time.Minute)))
	waitPhase(t, env, "slow", v1alpha1.NodeFaultApplied)
	testutil.Eventually(t, within, "the paced rank 0 to show stopped (T)", func() bool { return procState(t, rank0.pid()) == "T" })
	untouched("duty-cycle applied")
	setRecover(t, env, "slow")
	waitPhase(t, env, "slow", v1alpha1.NodeFaultRecovered)
	for range 20 {
		if s := procState(t, rank0.pid()); s == "T" {
			t.Fatalf("duty-cycle reports Recovered, yet rank 0 (pid %d) shows stopped", rank0.pid())
		}
		time.Sleep(10 * time.Millisecond) // spans two of the pacer's periods, had it survived
	}
	untouched("duty-cycle recovered")

	create(t, env, newFault("kill", "workload.kill-rank", "signal", map[string]string{"signal": "SIGKILL"}, tgt, time.Now().Add(10*time.Minute)))
	waitPhase(t, env, "kill", v1alpha1.NodeFaultApplied)
	testutil.Eventually(t, within, "rank 0 to die", rank0.exited)
	if ws, ok := rank0.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("rank 0 ended %v, want killed by SIGKILL", rank0.cmd.ProcessState)
	}
	untouched("kill applied")
	setRecover(t, env, "kill")
	waitPhase(t, env, "kill", v1alpha1.NodeFaultRecovered)

	// With its rank gone, a new kill of rank 0 has nothing to hit and
	// fails naming the pod, rather than hitting rank 1.
	create(t, env, newFault("kill2", "workload.kill-rank", "signal", nil, tgt, time.Now().Add(10*time.Minute)))
	if f := waitPhase(t, env, "kill2", v1alpha1.NodeFaultFailed); !strings.Contains(f.Status.Message, pod.uid) {
		t.Errorf("kill of a rank no process carries: message %q, want it to name pod %s", f.Status.Message, pod.uid)
	}
	untouched("kill of a missing rank")
	if p := pendingKeys(t, ledgerPath); len(p) != 0 {
		t.Errorf("ledger pending %v, want none", p)
	}
}

// A network fault aimed at a pod works in the pod's own network
// namespace, the one its /pause process holds, found by the pod's uid:
// the veth end is there and nowhere else (the app process is left in the
// node's namespace, where the interface does not exist, so only the
// pause process's namespace can work). A pod on the node's network is
// refused.
func TestNetworkFaultInPodNetNS(t *testing.T) {
	fx := nt.New(t, nt.Options{})
	before := snapshot(t, fx)
	pod := newKubePod(t)
	pause := startHelper(t, "/pause", &fx.A.Handle)
	app := startHelper(t, "python", nil)
	pod.join(t, pod.sandbox, pause.pid())
	pod.join(t, pod.app, app.pid())
	hostPod := newKubePod(t)
	hostPause := startHelper(t, "/pause", nil)
	hostApp := startHelper(t, "python", nil)
	hostPod.join(t, hostPod.sandbox, hostPause.pid())
	hostPod.join(t, hostPod.app, hostApp.pid())

	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	createNode(t, env)
	startAgent(t, env, filepath.Join(t.TempDir(), "ledger.jsonl"))

	params := map[string]string{"probability": "0.5", "interface": nt.IfA}
	tgt := v1alpha1.NodeFaultTarget{Kind: "node", Key: node, Pod: "train/llm-worker-0", PodUID: pod.uid}
	create(t, env, newFault("loss", "network.loss", "cls-bpf", params, tgt, time.Now().Add(10*time.Minute)))
	waitPhase(t, env, "loss", v1alpha1.NodeFaultApplied)
	if snapshot(t, fx).Equal(before) {
		t.Fatal("network.loss reports Applied, but the pod's veth filters are unchanged")
	}
	setRecover(t, env, "loss")
	waitPhase(t, env, "loss", v1alpha1.NodeFaultRecovered)
	if !snapshot(t, fx).Equal(before) {
		t.Error("network.loss reports Recovered, but the pod's veth filters are not as they were")
	}

	hostTgt := v1alpha1.NodeFaultTarget{Kind: "node", Key: node, Pod: "train/host-0", PodUID: hostPod.uid}
	create(t, env, newFault("host", "network.loss", "cls-bpf", params, hostTgt, time.Now().Add(10*time.Minute)))
	if f := waitPhase(t, env, "host", v1alpha1.NodeFaultFailed); !strings.Contains(f.Status.Message, podproc.ErrHostNetwork.Error()) {
		t.Errorf("network fault on a host-network pod: message %q, want %q", f.Status.Message, podproc.ErrHostNetwork)
	}
}

func randHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)[:n]
}

func randUID(t *testing.T) string {
	h := randHex(t, 32)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
