package ckptfault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/harness/ckptpodtest"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// within bounds the waits for a process: generous, for a busy machine.
const within = 60 * time.Second

// podFixture is a pod whose app container sees host (a tmpfs of the
// test's, holding two checkpoints) at /ckpt, a path the node does not
// have: acting on the container's path from the node would find
// nothing, so only the container's view can work.
type podFixture struct {
	host string
	pod  *ckptpodtest.Pod
	ctr  *ckptpodtest.Container
	ctx  context.Context
	orig map[string][]byte
}

func newPodFixture(t *testing.T, role string) *podFixture {
	t.Helper()
	fx := &podFixture{host: mountTmpfs(t, 16<<20), orig: map[string][]byte{}}
	for i, n := range []string{"ckpt-1.pt", "ckpt-2.pt"} {
		b := make([]byte, 64<<10)
		for j := range b {
			b[j] = byte(j*31 + i*7)
		}
		if err := os.WriteFile(filepath.Join(fx.host, n), b, 0o600); err != nil {
			t.Fatal(err)
		}
		fx.orig[n] = b
	}
	fx.pod = ckptpodtest.NewPod(t)
	fx.ctr = ckptpodtest.Start(t, fx.pod, fx.host, role)
	fx.ctx = WithPod(context.Background(), Pod{UID: fx.pod.UID})
	if _, err := os.Stat(ckptpodtest.Dir + "/ckpt-2.pt"); err == nil {
		t.Fatalf("this node has %s/ckpt-2.pt itself; the test needs the path to be the container's alone", ckptpodtest.Dir)
	}
	return fx
}

func (fx *podFixture) read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fx.host, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The newest checkpoint as the pod's container sees it (/ckpt, from its
// GPUCHAOS_CKPT_DIR) is corrupted, the older left alone, and the record
// names the container's path and the pod; a fresh injector (as after a
// restart) restores it byte for byte.
func TestPodCorruptNewestAsTheContainerSeesIt(t *testing.T) {
	fx := newPodFixture(t, "sleep")
	state := t.TempDir()
	v := faulttest.Values(t, idCorrupt, map[string]string{"bytes": "32"})
	if err := newInjector(t, idCorrupt, state).Inject(fx.ctx, "k", jobRef("llm"), v); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(fx.read(t, "ckpt-2.pt"), fx.orig["ckpt-2.pt"]) {
		t.Fatal("Inject succeeded, yet the newest checkpoint the container sees is unchanged")
	}
	if !bytes.Equal(fx.read(t, "ckpt-1.pt"), fx.orig["ckpt-1.pt"]) {
		t.Error("the older checkpoint changed")
	}
	in := newInjector(t, idCorrupt, state)
	b, err := in.dir.Read("k")
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseState(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dir != ckptpodtest.Dir || st.File != ckptpodtest.Dir+"/ckpt-2.pt" || st.Pod == nil || st.Pod.UID != fx.pod.UID {
		t.Errorf("record: dir %q file %q pod %+v; want the container's paths and pod %s", st.Dir, st.File, st.Pod, fx.pod.UID)
	}
	if err := in.Recover(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fx.read(t, "ckpt-2.pt"), fx.orig["ckpt-2.pt"]) {
		t.Error("Recover succeeded, yet the checkpoint is not restored byte for byte")
	}
}

// fill-volume fills the pod's volume (the tmpfs behind /ckpt) down to
// the free space asked, and Recover frees it.
func TestPodFillVolume(t *testing.T) {
	fx := newPodFixture(t, "sleep")
	const free = 1 << 20
	before := freeOf(t, fx.host)
	in := newInjector(t, idFill, "")
	if err := in.Inject(fx.ctx, "k", jobRef("llm"), faulttest.Values(t, idFill, map[string]string{"free": "1MiB"})); err != nil {
		t.Fatal(err)
	}
	if got := freeOf(t, fx.host); got < free || got > free+fillSlack*4096*2 {
		t.Errorf("free space on the pod's volume %d bytes after the fill, want about %d (was %d)", got, free, before)
	}
	if err := in.Recover(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if got := freeOf(t, fx.host); got != before {
		t.Errorf("free space %d bytes after Recover, want %d as before", got, before)
	}
	if ents, _ := os.ReadDir(fx.host); len(ents) != 2 {
		t.Errorf("the volume holds %d entries after Recover, want the 2 checkpoints", len(ents))
	}
}

func freeOf(t *testing.T, dir string) int64 {
	t.Helper()
	free, _, err := freeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	return free
}

// With the pod's only process gone (the pod deleted, or its container
// dead), Recover still undoes the corruption and the fill: through the
// node's mount of the same filesystem, by the files' handles.
func TestPodRecoverWithThePodsProcessGone(t *testing.T) {
	fx := newPodFixture(t, "sleep")
	free := freeOf(t, fx.host)
	corrupt, fill := newInjector(t, idCorrupt, ""), newInjector(t, idFill, "")
	if err := corrupt.Inject(fx.ctx, "c", jobRef("llm"), faulttest.Values(t, idCorrupt, nil)); err != nil {
		t.Fatal(err)
	}
	if err := fill.Inject(fx.ctx, "f", jobRef("llm"), faulttest.Values(t, idFill, map[string]string{"free": "2MiB"})); err != nil {
		t.Fatal(err)
	}
	fx.ctr.Kill()
	if err := corrupt.Recover(context.Background(), "c"); err != nil {
		t.Fatalf("corrupt-newest with the pod's process gone: %v", err)
	}
	if !bytes.Equal(fx.read(t, "ckpt-2.pt"), fx.orig["ckpt-2.pt"]) {
		t.Error("Recover succeeded, yet the checkpoint is not restored")
	}
	if err := fill.Recover(context.Background(), "f"); err != nil {
		t.Fatalf("fill-volume with the pod's process gone: %v", err)
	}
	if got := freeOf(t, fx.host); got != free {
		t.Errorf("free space %d after Recover, want %d", got, free)
	}
}

// A checkpoint directory that is a symlink in the container, pointing at
// the node's own directory outside the container's root, is refused
// (absolute and relative alike), and nothing is written there.
func TestPodRefusesASymlinkOutOfTheRoot(t *testing.T) {
	fx := newPodFixture(t, "sleep")
	outside := writeCheckpoints(t, 4096, "ckpt-9.pt")
	want := sum(t, filepath.Join(outside, "ckpt-9.pt"))
	rel, err := filepath.Rel(fx.ctr.Root, outside)
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"/abs": outside, "/rel": rel} {
		if err := os.Symlink(target, fx.ctr.Root+name); err != nil {
			t.Fatal(err)
		}
		in := newInjector(t, idCorrupt, "")
		err := in.Inject(fx.ctx, "k", jobRef("llm"), faulttest.Values(t, idCorrupt, map[string]string{"path": name}))
		if !errors.Is(err, errSymlink) {
			t.Errorf("%s -> %s: Inject %v, want it refused for the symlink", name, target, err)
		}
		if sum(t, filepath.Join(outside, "ckpt-9.pt")) != want {
			t.Fatalf("%s -> %s: the node's checkpoint outside the container was changed", name, target)
		}
		if _, err := in.dir.Read("k"); err == nil {
			t.Errorf("%s: a record stays after the refusal", name)
		}
	}
}

// kill-writer watches the pod's processes, not ranks found by their
// environment, and kills the container's process mid-write of
// /ckpt/ckpt-N.pt.tmp, a path the /proc links print as the container
// sees it.
func TestPodKillWriter(t *testing.T) {
	fx := newPodFixture(t, "write")
	in := newInjector(t, idKillWriter, "")
	if err := in.Inject(fx.ctx, "k", jobRef("llm"), faulttest.Values(t, idKillWriter, map[string]string{"timeout": "1m"})); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "the container's process to die", fx.ctr.Exited)
	if ws, ok := fx.ctr.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the container ended %v, want SIGKILL", fx.ctr.Cmd.ProcessState)
	}
	b, _ := in.dir.Read("k")
	st, err := parseState(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Killed == nil || st.Killed.PID != fx.ctr.PID() || !strings.HasPrefix(st.File, ckptpodtest.Dir+"/ckpt-") || !strings.HasSuffix(st.File, ".pt.tmp") {
		t.Errorf("record: killed %+v writing %q; want pid %d writing %s/ckpt-N.pt.tmp", st.Killed, st.File, fx.ctr.PID(), ckptpodtest.Dir)
	}
	if err := in.Recover(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
}

// slow-storage on a pod sets the cap on the pod's own group (io.max, or
// the blkio throttle on v1) for the block device behind /ckpt, replacing
// a limit already there, moves no process, and Recover writes back the
// limit it replaced.
func TestPodSlowStorageLimitsThePodGroup(t *testing.T) {
	disk, dev := ckptpodtest.Ext4(t, 64<<20)
	pod := ckptpodtest.NewPod(t)
	limits := pod.Limits()
	if len(limits) == 0 {
		kubetest.Missing(t, "neither io.max nor the blkio throttle reaches the pod's group on this kernel")
	}
	ctr := ckptpodtest.Start(t, pod, disk, "sleep")
	cgBefore, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", ctr.PID()))
	if err != nil {
		t.Fatal(err)
	}
	// A limit someone set before: on the write file (v1) or as wbps (v2).
	prior := dev + " 1048576"
	if strings.HasSuffix(limits[0], "io.max") {
		prior = dev + " wbps=1048576"
	}
	before := map[string]string{}
	for _, f := range limits {
		if strings.HasSuffix(f, "write_bps_device") || strings.HasSuffix(f, "io.max") {
			if err := os.WriteFile(f, []byte(prior), 0); err != nil {
				t.Fatal(err)
			}
		}
		before[f] = readFile(t, f)
	}
	in := newInjector(t, idSlow, "")
	v := faulttest.Values(t, idSlow, map[string]string{"factor": "0.1", "bandwidth": "40960000"})
	if err := in.Inject(WithPod(context.Background(), Pod{UID: pod.UID}), "k", jobRef("llm"), v); err != nil {
		t.Fatal(err)
	}
	for _, f := range limits {
		got := readFile(t, f)
		if !strings.Contains(got, dev) || !strings.Contains(got, "4096000") {
			t.Errorf("%s reads %q while injected, want %s capped at 4096000 bytes/s", f, got, dev)
		}
	}
	if cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", ctr.PID())); !bytes.Equal(cg, cgBefore) {
		t.Errorf("the container's process moved groups:\n%s\nwas\n%s", cg, cgBefore)
	}
	if err := newInjector(t, idSlow, in.dir.Path()).Recover(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	for _, f := range limits {
		if got := readFile(t, f); got != before[f] {
			t.Errorf("%s reads %q after Recover, want %q as before", f, got, before[f])
		}
	}
}

func readFile(t *testing.T, f string) string {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A recorded limit whose value was changed since by another writer is
// left to it, and one whose group is gone (the pod deleted) has nothing
// left to undo: both are proofs the fault is gone, not restorations.
func TestPodSlowRecoverProofs(t *testing.T) {
	_, dev := ckptpodtest.Ext4(t, 16<<20)
	pod := ckptpodtest.NewPod(t)
	if len(pod.Limits()) == 0 {
		kubetest.Missing(t, "neither io.max nor the blkio throttle reaches the pod's group on this kernel")
	}
	ls, err := planPodLimits(Pod{UID: pod.UID}, dev, 8192)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if err := l.write(l.Set); err != nil {
			t.Fatal(err)
		}
	}
	changed := slices.Clone(ls)
	if err := changed[0].write(strings.Replace(changed[0].Set, "8192", "16384", -1)); err != nil {
		t.Fatal(err)
	}
	proof, err := restoreLimits(changed[:1])
	if err != nil || !strings.Contains(proof, "changed since") {
		t.Errorf("a limit changed since: proof %q, %v; want a proof that says so", proof, err)
	}
	if got, _ := changed[0].current(); !strings.Contains(got, "16384") {
		t.Errorf("the other writer's limit was replaced: %q", got)
	}
	gone := slices.Clone(ls)
	for i := range gone {
		gone[i].Dir += "/no-such-group"
	}
	if proof, err := restoreLimits(gone); err != nil || !strings.Contains(proof, "is gone") {
		t.Errorf("groups gone: proof %q, %v; want a proof that says so", proof, err)
	}
	unmounted := slices.Clone(ls)
	unmounted[0].Mount = t.TempDir()
	if _, err := restoreLimits(unmounted[:1]); !errors.Is(err, fault.ErrUnproven) {
		t.Errorf("hierarchy not mounted: %v, want ErrUnproven", err)
	}
	for _, l := range ls {
		_ = l.write(l.Prev)
	}
}

// With the pod's process gone and its volume no longer mounted anywhere
// on the node (a PersistentVolume detached with the pod), nothing can
// look at the filler or the checkpoint: Recover says so (ErrUnproven)
// and keeps the records, rather than claim the fault undone or gone.
func TestPodRecoverUnprovenWithTheVolumeDetached(t *testing.T) {
	fx := newPodFixture(t, "sleep")
	corrupt, fill := newInjector(t, idCorrupt, ""), newInjector(t, idFill, "")
	if err := corrupt.Inject(fx.ctx, "c", jobRef("llm"), faulttest.Values(t, idCorrupt, nil)); err != nil {
		t.Fatal(err)
	}
	if err := fill.Inject(fx.ctx, "f", jobRef("llm"), faulttest.Values(t, idFill, map[string]string{"free": "2MiB"})); err != nil {
		t.Fatal(err)
	}
	fx.ctr.Kill()
	if err := unix.Unmount(fx.host, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	for key, in := range map[string]*Injector{"c": corrupt, "f": fill} {
		err := in.Recover(context.Background(), key)
		if !errors.Is(err, fault.ErrUnproven) || errors.Is(err, fault.ErrTargetGone) || !strings.Contains(err.Error(), "mounted nowhere") {
			t.Errorf("%s: Recover %v, want ErrUnproven saying the volume is mounted nowhere", in.fault, err)
		}
		if _, err := in.dir.Read(key); err != nil {
			t.Errorf("%s: the record is gone after an unproven recovery: %v", in.fault, err)
		}
	}
}

// A filler the job moved within the pod's volume is found by its handle
// and emptied: the space comes back, though its new name, printed from
// the pod's mount namespace, is not one this process can remove by.
func TestPodFillRecoverFindsAMovedFiller(t *testing.T) {
	fx := newPodFixture(t, "sleep")
	before := freeOf(t, fx.host)
	in := newInjector(t, idFill, "")
	if err := in.Inject(fx.ctx, "k", jobRef("llm"), faulttest.Values(t, idFill, map[string]string{"free": "1MiB"})); err != nil {
		t.Fatal(err)
	}
	must(t, os.Mkdir(filepath.Join(fx.host, "old"), 0o700))
	must(t, os.Rename(filepath.Join(fx.host, fillerPrefix+in.dir.Name("k")), filepath.Join(fx.host, "old", "big.bin")))
	if err := in.Recover(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if got := freeOf(t, fx.host); got < before-8192 {
		t.Errorf("free space %d after Recover, want about %d as before (the moved filler emptied)", got, before)
	}
}
