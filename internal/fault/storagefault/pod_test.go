package storagefault_test

import (
	"context"
	"net/netip"
	"os"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/fault/ckptfault"
	"github.com/gpuchaos/gpuchaos/internal/harness/ckptpodtest"
)

// A pod's checkpoint volume on network storage: the sshfs mount is bound
// at /ckpt in the pod's container only (its own mount namespace and
// root), so the server can only be read from the pod's mount table, and
// the directory only from its GPUCHAOS_CKPT_DIR. The injection named by
// neither path nor server cuts the node off from that server on the
// interface the node routes to it, and Recover restores the interface.
func TestPartitionOfAPodsVolume(t *testing.T) {
	sn := newStorageNet(t)
	srv := startSSHD(t, sn)
	mnt := mountSSHFS(t, srv)
	pod := ckptpodtest.NewPod(t)
	ckptpodtest.Start(t, pod, mnt, "sleep")
	if _, err := os.Stat(ckptpodtest.Dir); err == nil {
		t.Fatalf("this node has %s itself; the test needs it to be the pod's alone", ckptpodtest.Dir)
	}
	before := sn.snapshot(t)

	stateDir := t.TempDir()
	in := newInjector(t, stateDir)
	f, _ := partitionFault(t)
	v, err := f.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ckptfault.WithPod(context.Background(), ckptfault.Pod{UID: pod.UID})
	const key = "run-1/pod-partition"
	if err := in.Inject(ctx, key, node, v); err != nil {
		t.Fatal(err)
	}
	recovered := false
	t.Cleanup(func() {
		if !recovered {
			_ = in.Recover(context.Background(), key)
		}
	})
	rec := recordOf(t, stateDir)
	if want := netip.PrefixFrom(sn.Server, 32); rec.Server != want || rec.Path != ckptpodtest.Dir || rec.Change.Interface != sn.HostIf {
		t.Fatalf("recorded server %s from %q on %s, want %s from the pod's %q on %s", rec.Server, rec.Path, rec.Change.Interface, want, ckptpodtest.Dir, sn.HostIf)
	}
	if sn.snapshot(t).Equal(before) {
		t.Fatal("the interface's traffic control is unchanged after Inject")
	}
	if err := newInjector(t, stateDir).Recover(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	recovered = true
	if !sn.snapshot(t).Equal(before) {
		t.Error("the interface's traffic control is not as before after Recover")
	}
	requireNoRecords(t, stateDir)
}
