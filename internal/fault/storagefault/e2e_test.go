package storagefault_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/nodeall"
	"github.com/gpuchaos/gpuchaos/internal/fault/storagefault"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// childEnv makes the test binary an injector that injects, says so on
// stdout and waits to be killed; its value is the JSON of a childSpec.
const childEnv = "GPUCHAOS_STORAGEFAULT_CRASH_CHILD"

// childSpec is what the crash child injects.
type childSpec struct {
	StateDir, Key string
	Raw           map[string]string
}

// crashChild is the crash child's whole life, run from TestMain. It says
// "starting" before it injects (and, when a testutil.Spawner started it,
// takes its spec then).
func crashChild() int {
	testutil.Starting()
	var s childSpec
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &s); err != nil {
		fmt.Println("bad spec:", err)
		return 2
	}
	f, _ := catalog.Lookup(storagefault.FaultID)
	var m *catalog.Mechanism
	for i := range f.Mechanisms {
		if f.Mechanisms[i].Name == storagefault.MechanismBPF {
			m = &f.Mechanisms[i]
		}
	}
	in, err := nodeall.Injector(f, m, fault.Env{StateDir: s.StateDir})
	if err == nil {
		var v catalog.Values
		if v, err = f.Resolve(s.Raw); err == nil {
			err = in.Inject(context.Background(), s.Key, inventory.Ref{Kind: catalog.ScopeJob, Node: "n1"}, v)
		}
	}
	if err != nil {
		fmt.Println("inject:", err)
		return 2
	}
	testutil.Injected()
	return 0
}

func randomMiB(t testing.TB) []byte {
	t.Helper()
	b := make([]byte, 1<<20)
	_, _ = rand.Read(b)
	return b
}

// recordOf reads the one record under stateDir's storage subdirectory.
func recordOf(t testing.TB, stateDir string) storagefault.Record {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(stateDir, "storage", "*.json"))
	if len(files) != 1 {
		t.Fatalf("records under %s: %v, want one", stateDir, files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	r, err := storagefault.DecodeRecord(b)
	if err != nil {
		t.Fatalf("decode %s: %v", files[0], err)
	}
	return r
}

func requireNoRecords(t testing.TB, stateDir string) {
	t.Helper()
	if left, _ := filepath.Glob(filepath.Join(stateDir, "storage", "*")); len(left) != 0 {
		t.Fatalf("records left after recovery: %v", left)
	}
}

// TestPartitionHangsWritesUntilRecovery is the fault on real network
// storage: an sshfs mount of an OpenSSH server across a veth. A
// checkpoint write+fsync hangs while the server is cut off, as it does on
// a partitioned hard NFS mount, and completes once it is recovered.
func TestPartitionHangsWritesUntilRecovery(t *testing.T) {
	sn := newStorageNet(t)
	srv := startSSHD(t, sn)
	mnt := mountSSHFS(t, srv)
	data := randomMiB(t)
	ctx := context.Background()

	if r := writeSync(filepath.Join(mnt, "step-100.pt"), data); r.err != nil || r.took > 2*time.Second {
		t.Fatalf("write+fsync of 1 MiB before the fault: %v after %v, want success within 2 s", r.err, r.took)
	} else {
		t.Logf("write+fsync of 1 MiB before the fault: %v", r.took)
	}
	control := sn.listenOther(t, 7000)
	if err := dialable(control, time.Second); err != nil {
		t.Fatalf("control connection before the fault: %v", err)
	}
	before := sn.snapshot(t)

	stateDir := t.TempDir()
	in := newInjector(t, stateDir)
	f, _ := partitionFault(t)
	v, err := f.Resolve(map[string]string{"path": mnt}) // the server comes from the mount
	if err != nil {
		t.Fatal(err)
	}
	const key = "run-1/checkpoint.storage-partition"
	if err := in.Inject(ctx, key, node, v); err != nil {
		t.Fatal(err)
	}
	// Until the pending write has finished, a failing test must still
	// recover, or the write would only end when cleanup kills sshfs.
	recovered := false
	t.Cleanup(func() {
		if !recovered {
			_ = in.Recover(context.Background(), key)
		}
	})
	rec := recordOf(t, stateDir)
	if want := netip.PrefixFrom(sn.Server, 32); rec.Server != want || rec.Path != mnt || rec.Change.Interface != sn.HostIf {
		t.Fatalf("recorded server %s from %q on %s, want %s from %q on %s", rec.Server, rec.Path, rec.Change.Interface, want, mnt, sn.HostIf)
	}
	// Injecting the same key again is a no-op: the interface is unchanged.
	during := sn.snapshot(t)
	if during.Equal(before) {
		t.Fatal("the interface's traffic control is unchanged after Inject")
	}
	if err := in.Inject(ctx, key, node, v); err != nil {
		t.Fatalf("second inject: %v", err)
	}
	if !sn.snapshot(t).Equal(during) {
		t.Fatal("a second Inject of the same key changed the interface again")
	}

	done := make(chan writeResult, 1)
	go func() { done <- writeSync(filepath.Join(mnt, "step-200.pt"), data) }()
	select {
	case r := <-done:
		t.Fatalf("write+fsync during the partition ended after %v with %v; want it to hang", r.took, r.err)
	case <-time.After(3 * time.Second):
	}
	// The cut is the server's alone: another address behind the same
	// interface still answers, the server's does not.
	if err := dialable(control, time.Second); err != nil {
		t.Fatalf("control connection to %s during the partition: %v", control, err)
	}
	if err := dialable(netip.AddrPortFrom(sn.Server, 22).String(), time.Second); err == nil {
		t.Fatal("a new connection to the storage server opened during the partition")
	}

	start := time.Now()
	if err := in.Recover(ctx, key); err != nil {
		t.Fatal(err)
	}
	recovered = true
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("the pending write+fsync failed after recovery: %v (after %v in all)", r.err, r.took)
		}
		t.Logf("write+fsync hung %v in all; completed %v after recovery", r.took, time.Since(start))
	case <-time.After(15 * time.Second):
		t.Fatal("the pending write+fsync did not complete within 15 s of recovery")
	}
	got, err := os.ReadFile(filepath.Join(srv.Export, "step-200.pt"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the server holds %d bytes (err %v) of the write that hung, want the 1 MiB written", len(got), err)
	}
	if now := sn.snapshot(t); !now.Equal(before) {
		g, _ := json.Marshal(now)
		w, _ := json.Marshal(before)
		t.Fatalf("traffic control after recovery\n got %s\nwant %s", g, w)
	}
	requireNoRecords(t, stateDir)
	if err := in.Recover(ctx, key); err != nil {
		t.Fatalf("second recover: %v", err)
	}
}

// TestRecoverAfterSIGKILL kills an injector mid-fault and recovers its
// injection from the state directory alone, in this process, through a
// fresh injector from internal/fault/nodeall, as the ledger's RecoverPending
// does with the key its ledger holds.
func TestRecoverAfterSIGKILL(t *testing.T) {
	sn := newStorageNet(t)
	srv := startSSHD(t, sn)
	mnt := mountSSHFS(t, srv)
	before := sn.snapshot(t)
	stateDir := t.TempDir()
	const key = "run-7/checkpoint.storage-partition"

	spec, _ := json.Marshal(childSpec{StateDir: stateDir, Key: key, Raw: map[string]string{"path": mnt, "port": "22"}})
	testutil.KillInjector(t, testutil.StartInjector(t, "^$", childEnv+"="+string(spec)))
	if sn.snapshot(t).Equal(before) {
		t.Fatal("the killed child's fault is not in effect")
	}
	if rec := recordOf(t, stateDir); rec.Port != 22 || rec.Server != netip.PrefixFrom(sn.Server, 32) {
		t.Fatalf("the child recorded %s port %d, want %s port 22", rec.Server, rec.Port, sn.Server)
	}
	// The storage is cut off: a write hangs (it ends, with an error, when
	// cleanup kills sshfs if recovery below fails).
	done := make(chan writeResult, 1)
	go func() { done <- writeSync(filepath.Join(mnt, "after-crash.pt"), []byte("step 300")) }()
	select {
	case r := <-done:
		t.Fatalf("write+fsync with the killed child's fault in place ended after %v with %v; want it to hang", r.took, r.err)
	case <-time.After(2 * time.Second):
	}

	if err := newInjector(t, stateDir).Recover(context.Background(), key); err != nil {
		t.Fatalf("recover in a fresh injector: %v", err)
	}
	if now := sn.snapshot(t); !now.Equal(before) {
		g, _ := json.Marshal(now)
		w, _ := json.Marshal(before)
		t.Fatalf("traffic control after recovery\n got %s\nwant %s", g, w)
	}
	requireNoRecords(t, stateDir)
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("the pending write failed after recovery: %v", r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the pending write did not complete within 15 s of recovery")
	}
}
