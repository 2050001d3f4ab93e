package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
	nt "github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
)

// partitionExperiment cuts the fixture's namespace off for a minute,
// through the process pid living in it, and expects nothing.
func partitionExperiment(t *testing.T, pid int, d time.Duration) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "partition.yaml")
	y := fmt.Sprintf(`apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata:
  name: partition-pod
spec:
  selector:
    nodes: [%s]
    mode: all
  faults:
    - id: network.partition
      mechanism: cls-bpf
      params:
        interface: %s
        pid: %d
  duration: %s
  expectations:
    - name: nothing-watches-this
      probe:
        log:
          pattern: 'gpuchaos-never-logged-%d'
      within: %s
`, hostname(t), nt.IfA, pid, d, time.Now().UnixNano(), d)
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// killedMidFault runs gpuchaos run on the partition experiment in a child
// process, waits until the partition is in, and SIGKILLs it: a run that
// left its fault behind, in the ledger at ledgerPath.
func killedMidFault(t *testing.T, f *nt.Fixture, ledgerPath string) trafficctl.Snapshot {
	t.Helper()
	tgt := trafficctl.Target{PID: f.PID, Interface: nt.IfA}
	before, err := trafficctl.Take(t.Context(), tgt)
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal([]string{"run", partitionExperiment(t, f.PID, time.Minute), "--target", "local", "--ledger", ledgerPath, "--exporter", "http://127.0.0.1:1/metrics"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(args))
	var out testutil.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.After(60 * time.Second)
	for {
		s, err := trafficctl.Take(t.Context(), tgt)
		if err == nil && !s.Equal(before) {
			break
		}
		select {
		case <-exited:
			t.Fatalf("gpuchaos exited before the partition appeared:\n%s", out.String())
		case <-deadline:
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("the partition never appeared; gpuchaos said:\n%s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("gpuchaos ended by itself (%v) before it was killed:\n%s", cmd.ProcessState, out.String())
	}
	return before
}

// TestRecoverAfterKillWithNamespaceAlive: a run SIGKILLed while a pod's
// namespace was partitioned, then the process it was found through exits
// while the namespace lives on. The next recovery must find the namespace
// and lift the partition, and only then say Recovered.
func TestRecoverAfterKillWithNamespaceAlive(t *testing.T) {
	f := nt.New(t, nt.Options{}) // skips without root or the kernel's network faults
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	before := killedMidFault(t, f, ledgerPath)
	f.KillProcess()

	var out, errb bytes.Buffer
	code := Main([]string{"recover", "--ledger", ledgerPath}, strings.NewReader(""), &out, &errb)
	if code != 0 {
		t.Fatalf("recover exited %d: %s%s", code, out.String(), errb.String())
	}
	want := fmt.Sprintf("Recovered network.partition on node %s (interface %s, pid %d", hostname(t), nt.IfA, f.PID)
	if !strings.Contains(out.String(), want) {
		t.Errorf("recover said %q, want a line starting %q", out.String(), want)
	}
	if after := snapshotThrough(t, f.A.Handle); !after.Equal(before) {
		t.Errorf("the namespace's interface after recovery is %+v, want it as before %+v", after, before)
	}
	// Nothing is left pending: a second recover has nothing to do.
	out.Reset()
	if code := Main([]string{"recover", "--ledger", ledgerPath, "--list"}, strings.NewReader(""), &out, &errb); code != 0 || !strings.Contains(out.String(), "Nothing pending") {
		t.Errorf("recover --list after recovery: %d, %q", code, out.String())
	}
}

// TestRecoverWhenNothingHoldsTheNamespace: the namespace itself is gone
// after the kill. Recovery says gone with its proof, or, where a process
// cannot be looked into, keeps the entry pending, names the process and
// exits 1 — never "Recovered".
func TestRecoverWhenNothingHoldsTheNamespace(t *testing.T) {
	f := nt.New(t, nt.Options{})
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	killedMidFault(t, f, ledgerPath)
	f.Vanish()

	var out, errb bytes.Buffer
	code := Main([]string{"recover", "--ledger", ledgerPath}, strings.NewReader(""), &out, &errb)
	if strings.Contains(out.String(), "Recovered") {
		t.Fatalf("recover claimed a recovery of a namespace nobody holds: %s", out.String())
	}
	if hidden := nt.HiddenProcesses(t); len(hidden) > 0 {
		if code != 1 || !strings.Contains(out.String(), "STILL PENDING: network.partition") || !strings.Contains(out.String(), hidden[0]) ||
			!strings.Contains(errb.String(), "still pending in ledger "+ledgerPath) {
			t.Fatalf("recover with %v hidden exited %d:\n%s%s\nwant 1, the entry pending and the hidden process named", hidden, code, out.String(), errb.String())
		}
		// A run refuses to inject on top of it, naming it.
		errb.Reset()
		code := Main([]string{"run", partitionExperiment(t, os.Getpid(), time.Second), "--target", "local", "--ledger", ledgerPath}, strings.NewReader(""), &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), "nothing new was injected") || !strings.Contains(errb.String(), "network.partition on node") {
			t.Fatalf("run over a pending entry exited %d: %s", code, errb.String())
		}
		return
	}
	if code != 0 || !strings.Contains(out.String(), "Gone: network.partition") || !strings.Contains(out.String(), "no holder left") {
		t.Fatalf("recover exited %d:\n%s%s\nwant 0 and the entry gone with its proof", code, out.String(), errb.String())
	}
}

// TestRunRecoversBeforeListingGPUs: on a node without NVML, run --target
// local without --job recovers what a killed run left before anything
// else, and then goes on with the node's faults instead of refusing for
// want of GPUs.
func TestRunRecoversBeforeListingGPUs(t *testing.T) {
	f := nt.New(t, nt.Options{})
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	before := killedMidFault(t, f, ledgerPath)

	var out, errb bytes.Buffer
	code := Main([]string{"run", partitionExperiment(t, f.PID, time.Second), "--target", "local", "--ledger", ledgerPath,
		"--exporter", "http://127.0.0.1:1/metrics"}, strings.NewReader(""), &out, &errb)
	if strings.Contains(errb.String(), "cannot list this node's GPUs") {
		t.Fatalf("run refused for want of GPUs: %s", errb.String())
	}
	if !strings.Contains(out.String(), "Recovered network.partition on node") {
		t.Fatalf("run (exit %d) did not recover the killed run's partition first:\n%s%s", code, out.String(), errb.String())
	}
	if strings.Index(out.String(), "Recovered network.partition") > strings.Index(out.String(), "inject") {
		t.Errorf("recovery came after the new injection:\n%s", out.String())
	}
	if code != 1 || !strings.Contains(out.String(), "MISSED") {
		t.Errorf("run exited %d, want 1 with its never-matching expectation missed:\n%s%s", code, out.String(), errb.String())
	}
	after, err := trafficctl.Take(context.Background(), trafficctl.Target{PID: f.PID, Interface: nt.IfA})
	if err != nil {
		t.Fatal(err)
	}
	if !after.Equal(before) {
		t.Errorf("interface after both runs %+v, want it as before %+v", after, before)
	}
}

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// snapshotThrough takes the fixture interface's snapshot in ns through a
// process started in it, since the one the fault was found through is dead.
func snapshotThrough(t *testing.T, ns netns.NsHandle) trafficctl.Snapshot {
	t.Helper()
	pid, kill := nt.StartSleeper(t, ns)
	defer kill()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s, err := trafficctl.Take(t.Context(), trafficctl.Target{PID: pid, Interface: nt.IfA})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRunEndingWithPendingNamesThem: the namespace a run partitioned
// vanishes while the fault is in. Its own recovery at the end says gone
// with the proof, or, where a process is hidden from it, leaves the entry
// pending; then the run's one-line error names the entry and the ledger.
func TestRunEndingWithPendingNamesThem(t *testing.T) {
	f := nt.New(t, nt.Options{})
	ledgerPath := filepath.Join(t.TempDir(), "ledger.jsonl")
	tgt := trafficctl.Target{PID: f.PID, Interface: nt.IfA}
	before, err := trafficctl.Take(t.Context(), tgt)
	if err != nil {
		t.Fatal(err)
	}
	// Other tests' processes may come and go in namespaces this one
	// cannot read; a recovery that saw any of them cannot prove a
	// namespace has no holder, so look before and after the run.
	hiddenBefore := nt.HiddenProcesses(t)
	vanished := make(chan struct{})
	go func() {
		defer close(vanished)
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if s, err := trafficctl.Take(context.Background(), tgt); err == nil && !s.Equal(before) {
				f.Vanish()
				return
			}
		}
	}()
	var out, errb testutil.LockedBuffer
	code := Main([]string{"run", partitionExperiment(t, f.PID, 3*time.Second), "--target", "local", "--ledger", ledgerPath,
		"--exporter", "http://127.0.0.1:1/metrics"}, strings.NewReader(""), &out, &errb)
	<-vanished
	hidden := len(hiddenBefore) > 0 || len(nt.HiddenProcesses(t)) > 0
	stdout, stderr := out.String(), errb.String()
	switch {
	case strings.Contains(stdout, "target gone") && strings.Contains(stdout, "no device has the index any more"):
		// The namespace was still reachable (the kernel tears a netns
		// down after its last holder exits, later under load) and the
		// partitioned device was gone from it: proof whatever other
		// processes hide, since its qdiscs and filters went with it.
	case strings.Contains(stdout, "target gone") && strings.Contains(stdout, "no holder left"):
		if hidden {
			t.Fatalf("run exited %d:\n%s%s\nclaims no holder is left while processes were hidden from it", code, stdout, stderr)
		}
	case hidden:
		if code != 1 || !strings.Contains(stderr, "1 injection(s) still pending in ledger "+ledgerPath) ||
			!strings.Contains(stderr, "network.partition on node") || strings.Count(strings.TrimSpace(stderr), "\n") > 1 {
			t.Fatalf("run exited %d:\n%s%s\nwant 1 and one line naming the pending partition and the ledger", code, stdout, stderr)
		}
	default:
		t.Fatalf("run exited %d:\n%s%s\nwant the recovery to say gone with its proof", code, stdout, stderr)
	}
}
