package storagefault_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	nf "github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
)

// spawnedEnv makes the test binary a crash child that a testutil.Spawner
// started: it waits for its go-ahead, which carries childEnv.
const spawnedEnv = "GPUCHAOS_STORAGEFAULT_SPAWNED"

// TestRecoveryAfterSIGKILLAtRandom is the recovery property for the storage
// partition: an injector killed at a random moment (from before its
// record is written to long after its filters are in), the interface to
// the server then renamed, deleted or left, is recovered by a fresh
// injector, as the next run would: the interface's traffic control as
// before, or pending with a reason. Never recovered or gone over a
// leftover.
func TestRecoveryAfterSIGKILLAtRandom(t *testing.T) {
	rng := testutil.Rand(t)
	stateDir := t.TempDir()
	sn := newStorageNet(t)
	before := sn.snapshot(t)
	sp := testutil.NewSpawner(t, "^$", spawnedEnv+"=1")
	tally := testutil.Tally{}
	start := time.Now()
	for round := range testutil.CrashRounds {
		key := fmt.Sprintf("run-%d/checkpoint.storage-partition", round)
		spec, _ := json.Marshal(childSpec{StateDir: stateDir, Key: key,
			Raw: map[string]string{"server": sn.Server.String(), "port": "22"}})
		// Planning, two fsyncs and loading the programs: tens of ms.
		moment := testutil.Moment(rng, 150*time.Millisecond)
		injected := sp.KillAt(t, moment, childEnv+"="+string(spec))
		way, name := "none", sn.HostIf
		switch rng.IntN(4) {
		case 0:
			way, name = "interface renamed", sn.rename(t, fmt.Sprintf("gcsf-r%d", round))
		case 1:
			way, name = "interface deleted", ""
			sn.removeHostLink()
		}
		err := newInjector(t, stateDir).Recover(context.Background(), key)
		what := fmt.Sprintf("round %d: storage-partition killed after %s (injected %v), %s", round, moment, injected, way)
		diff := func() string {
			if name == "" {
				return "" // the device took its qdiscs and filters with it
			}
			now, err := nf.Take(context.Background(), nf.Target{Interface: name})
			if err != nil {
				return err.Error()
			}
			want := before
			want.Interface = name
			if !now.Equal(want) {
				g, _ := json.Marshal(now)
				return "traffic control " + string(g)
			}
			return ""
		}
		kept := func() bool {
			left, _ := filepath.Glob(filepath.Join(stateDir, "storage", "*.json"))
			return len(left) > 0
		}
		verdict := testutil.CheckRecovery(t, what, err, diff, kept, "no device has the index")
		cut := ""
		if !injected {
			cut = "(cut)"
		}
		tally.Add(way + "/" + verdict + cut)
		if t.Failed() {
			break
		}
		if name == "" || verdict == "pending" {
			sn = newStorageNet(t)
			before = sn.snapshot(t)
		}
	}
	t.Logf("%d rounds in %s: %s", testutil.CrashRounds, time.Since(start).Round(time.Millisecond), strings.TrimSpace(tally.String()))
}
