package localtarget

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/fault/procfault"
	"github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
	"github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
)

func TestMain(m *testing.M) {
	if os.Getenv(netnstest.SleeperEnv) != "" {
		netnstest.Sleep() // a process for a test's network namespace
	}
	// The local target starts the duty-cycle pacer as `<this binary>
	// pace …`, as gpuchaos would run its hidden command.
	if len(os.Args) > 1 && os.Args[1] == procfault.PaceCommand {
		os.Exit(procfault.RunPace(context.Background(), os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

// TestLocalTargetNetworkFault runs network.loss through the engine on the
// local target against a real veth in a network namespace found from a
// process in it, as a pod's would be: the cls_bpf filter is there while
// the fault is, and the interface is as it was once the run is over.
func TestLocalTargetNetworkFault(t *testing.T) {
	needKmsg(t)
	f := netnstest.New(t, netnstest.Options{})
	ctx := t.Context()
	tgt := trafficctl.Target{PID: f.PID, Interface: netnstest.IfA}
	before, err := trafficctl.Take(ctx, tgt)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := v1alpha1.Load([]byte(fmt.Sprintf(`apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata:
  name: local-loss
spec:
  selector:
    mode: all
  faults:
    - id: network.loss
      mechanism: cls-bpf
      params:
        probability: 0.5
        interface: %s
        pid: %d
  duration: 2s
  expectations:
    - name: nothing-watches-this
      probe:
        log:
          pattern: 'gpuchaos-never-logged-%d'
      within: 1s
`, netnstest.IfA, f.PID, time.Now().UnixNano())), "local-loss.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exp.Default()
	state := t.TempDir()
	lt := startLocalWith(t, Options{StateDir: state})
	l, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var (
		mu      sync.Mutex
		during  trafficctl.Snapshot
		snapErr error
	)
	eng := engine.New(engine.Options{Target: lt, Ledger: l, PollInterval: 250 * time.Millisecond, RecoveryWindow: -1,
		OnEvent: func(ev engine.Event) {
			if ev.Kind == "inject" {
				mu.Lock()
				during, snapErr = trafficctl.Take(ctx, tgt)
				mu.Unlock()
			}
		}})
	rec, err := eng.Run(ctx, exp)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rec.Err != nil {
		t.Fatalf("run error: %v", rec.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if snapErr != nil {
		t.Fatal(snapErr)
	}
	if during.Equal(before) {
		t.Errorf("the interface looked the same while the fault was injected:\n%+v", during)
	}
	after, err := trafficctl.Take(ctx, tgt)
	if err != nil {
		t.Fatal(err)
	}
	if !after.Equal(before) {
		t.Errorf("interface after the run differs from before:\nbefore %+v\nafter  %+v", before, after)
	}
	if p, _ := l.Pending(ctx); len(p) != 0 {
		t.Errorf("ledger still holds %d entries", len(p))
	}
	entries, _ := os.ReadDir(filepath.Join(state, "net"))
	for _, e := range entries {
		t.Errorf("state left behind: %s", e.Name())
	}
}
