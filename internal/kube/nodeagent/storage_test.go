package nodeagent_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/ckptpodtest"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// ckptPod is a job's pod whose app container sees host (a tmpfs of the
// test's) at /ckpt, a path this node does not have.
type ckptPod struct {
	host string
	pod  *ckptpodtest.Pod
	ctr  *ckptpodtest.Container
	tgt  v1alpha1.NodeFaultTarget
}

func newCkptPod(t *testing.T, name, role string, host string) *ckptPod {
	t.Helper()
	p := &ckptPod{host: host, pod: ckptpodtest.NewPod(t)}
	p.ctr = ckptpodtest.Start(t, p.pod, host, role)
	p.tgt = v1alpha1.NodeFaultTarget{Kind: "job", Job: "train/llm", Pod: "train/" + name, PodUID: p.pod.UID, Key: "train/llm"}
	return p
}

func tmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		kubetest.Missing(t, "not root: the pod's volume is a tmpfs of the test's")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		kubetest.Missing(t, "mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func checkpoint(t *testing.T, dir, name string, seed int) []byte {
	t.Helper()
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(i*31 + seed*7)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	return int64(s.Bfree) * s.Bsize
}

// The checkpoint faults aimed at a job's pod, through the real agent
// process and NodeFaults of the real API server, target kind job with the
// pod's name and uid and no path: the agent finds the pod by its cgroup,
// the directory (/ckpt) in its container's GPUCHAOS_CKPT_DIR and the
// files through the container's root, where the node has nothing at
// that path. corrupt-newest flips the newest checkpoint the container
// sees, survives the agent's SIGKILL, and the next agent restores it byte
// for byte on Recover; fill-volume fills the pod's volume and Recover
// frees it; kill-writer kills the pod's process mid-write; a directory
// that is a symlink out of the container's root is refused; the
// storage-partition fault reads the pod's own mount table.
func TestCheckpointFaultsInPod(t *testing.T) {
	vol := tmpfs(t, 16<<20)
	older := checkpoint(t, vol, "ckpt-1.pt", 1)
	newest := checkpoint(t, vol, "ckpt-2.pt", 2)
	job := newCkptPod(t, "llm-worker-0", "sleep", vol)
	writerVol := tmpfs(t, 16<<20)
	writer := newCkptPod(t, "llm-worker-1", "write", writerVol)
	if err := os.Symlink(vol, job.ctr.Root+"/escape"); err != nil {
		t.Fatal(err)
	}

	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	createNode(t, env)
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	first := startAgent(t, env, ledgerPath)
	later := time.Now().Add(10 * time.Minute)

	create(t, env, newFault("corrupt", "checkpoint.corrupt-newest", "byte-flip", nil, job.tgt, later))
	waitPhase(t, env, "corrupt", v1alpha1.NodeFaultApplied)
	if bytes.Equal(fileBytes(t, filepath.Join(vol, "ckpt-2.pt")), newest) {
		t.Fatal("corrupt-newest reports Applied, yet the newest checkpoint the pod sees is unchanged")
	}
	if !bytes.Equal(fileBytes(t, filepath.Join(vol, "ckpt-1.pt")), older) {
		t.Error("corrupt-newest changed the older checkpoint")
	}
	first.stop(t, syscall.SIGKILL)
	setRecover(t, env, "corrupt")
	startAgent(t, env, ledgerPath)
	waitPhase(t, env, "corrupt", v1alpha1.NodeFaultRecovered)
	if !bytes.Equal(fileBytes(t, filepath.Join(vol, "ckpt-2.pt")), newest) {
		t.Error("corrupt-newest reports Recovered after the agent's restart, yet the checkpoint is not restored byte for byte")
	}

	free := freeBytes(t, vol)
	create(t, env, newFault("fill", "checkpoint.fill-volume", "fallocate", map[string]string{"free": "1MiB"}, job.tgt, later))
	waitPhase(t, env, "fill", v1alpha1.NodeFaultApplied)
	if got := freeBytes(t, vol); got < 1<<20 || got > 2<<20 {
		t.Errorf("fill-volume reports Applied with %d bytes free on the pod's volume, want about 1 MiB (was %d)", got, free)
	}
	setRecover(t, env, "fill")
	waitPhase(t, env, "fill", v1alpha1.NodeFaultRecovered)
	if got := freeBytes(t, vol); got != free {
		t.Errorf("fill-volume reports Recovered with %d bytes free, want %d as before", got, free)
	}

	create(t, env, newFault("kill", "checkpoint.kill-writer", "signal", map[string]string{"timeout": "1m"}, writer.tgt, later))
	waitPhase(t, env, "kill", v1alpha1.NodeFaultApplied)
	testutil.Eventually(t, within, "the pod's checkpoint writer to die", writer.ctr.Exited)
	if ws, ok := writer.ctr.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the writer ended %v, want killed by SIGKILL", writer.ctr.Cmd.ProcessState)
	}
	if job.ctr.Exited() {
		t.Error("kill-writer killed the other pod's process too")
	}
	setRecover(t, env, "kill")
	waitPhase(t, env, "kill", v1alpha1.NodeFaultRecovered)

	create(t, env, newFault("escape", "checkpoint.corrupt-newest", "byte-flip", map[string]string{"path": "/escape"}, job.tgt, later))
	if f := waitPhase(t, env, "escape", v1alpha1.NodeFaultFailed); !strings.Contains(f.Status.Message, "symlink") {
		t.Errorf("a directory that is a symlink out of the container: message %q, want a refusal naming the symlink", f.Status.Message)
	}
	if !bytes.Equal(fileBytes(t, filepath.Join(vol, "ckpt-2.pt")), newest) {
		t.Error("the refused injection changed the checkpoint behind the symlink")
	}

	// The pod's /ckpt is a tmpfs mounted there in the pod alone: the
	// refusal names that mount, which only the pod's mount table holds.
	create(t, env, newFault("partition", "checkpoint.storage-partition", "cls-bpf", nil, job.tgt, later))
	if f := waitPhase(t, env, "partition", v1alpha1.NodeFaultFailed); !strings.Contains(f.Status.Message, "mounted at "+ckptpodtest.Dir) {
		t.Errorf("storage-partition on a pod's tmpfs: message %q, want it to name the pod's mount at %s", f.Status.Message, ckptpodtest.Dir)
	}
	if p := pendingKeys(t, ledgerPath); len(p) != 0 {
		t.Errorf("ledger pending %v, want none", p)
	}
}

// slow-storage aimed at a job's pod, through the real agent: the cap goes
// on the pod's own group (io.max, or the blkio throttle on v1) for the
// loop device behind the container's /ckpt, over a limit set before, and
// Recover writes back that limit.
func TestSlowStorageInPod(t *testing.T) {
	disk, dev := ckptpodtest.Ext4(t, 64<<20)
	p := newCkptPod(t, "llm-worker-0", "sleep", disk)
	limits := p.pod.Limits()
	if len(limits) == 0 {
		kubetest.Missing(t, "neither io.max nor the blkio throttle reaches the pod's group on this kernel")
	}
	prior := dev + " 1048576"
	if strings.HasSuffix(limits[0], "io.max") {
		prior = dev + " wbps=1048576"
	}
	before := map[string][]byte{}
	for _, f := range limits {
		if strings.HasSuffix(f, "write_bps_device") || strings.HasSuffix(f, "io.max") {
			if err := os.WriteFile(f, []byte(prior), 0); err != nil {
				t.Fatal(err)
			}
		}
		before[f] = fileBytes(t, f)
	}

	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	createNode(t, env)
	startAgent(t, env, filepath.Join(t.TempDir(), "ledger.jsonl"))
	params := map[string]string{"factor": "0.1", "bandwidth": "40960000"}
	create(t, env, newFault("slow", "checkpoint.slow-storage", "cgroup-io", params, p.tgt, time.Now().Add(10*time.Minute)))
	waitPhase(t, env, "slow", v1alpha1.NodeFaultApplied)
	for _, f := range limits {
		if got := string(fileBytes(t, f)); !strings.Contains(got, dev) || !strings.Contains(got, "4096000") {
			t.Errorf("slow-storage reports Applied, yet %s reads %q, want %s capped at 4096000 bytes/s", f, got, dev)
		}
	}
	setRecover(t, env, "slow")
	waitPhase(t, env, "slow", v1alpha1.NodeFaultRecovered)
	for _, f := range limits {
		if got := fileBytes(t, f); !bytes.Equal(got, before[f]) {
			t.Errorf("slow-storage reports Recovered, yet %s reads %q, want %q as before", f, got, before[f])
		}
	}
}
