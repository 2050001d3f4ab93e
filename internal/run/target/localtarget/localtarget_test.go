package localtarget

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
)

// fakeGPUs is a gpu.Source of four GPUs on made-up buses; only Devices is
// used by the local target.
type fakeGPUs struct{}

func (fakeGPUs) Devices(ctx context.Context) ([]gpu.Device, error) {
	var out []gpu.Device
	for i := range 4 {
		out = append(out, gpu.Device{
			Index: i, UUID: fmt.Sprintf("GPU-00000000-0000-0000-0000-00000000000%d", i),
			PCI: fmt.Sprintf("00000000:%02X:00.0", 0xC1+i), Name: "NVIDIA H200", NUMANode: -1,
		})
	}
	return out, ctx.Err()
}

func (fakeGPUs) Sample(context.Context, int) (gpu.Sample, error) {
	return gpu.Sample{}, gpu.ErrNoDevice
}
func (fakeGPUs) Close() error { return nil }

// needKmsg skips a test that reads and writes the real kernel log unless
// it runs as root with /dev/kmsg present.
func needKmsg(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test writes to and reads the real /dev/kmsg")
	}
	if _, err := os.Stat(kmsg.DefaultPath); err != nil {
		t.Skipf("no kernel log device: %v", err)
	}
}

func startLocal(t *testing.T) *Target {
	t.Helper()
	return startLocalWith(t, Options{})
}

// startLocalWith starts a local target over fakeGPUs named node-a, with
// opts otherwise, and closes it when the test ends.
func startLocalWith(t *testing.T, opts Options) *Target {
	t.Helper()
	opts.Source, opts.Hostname = fakeGPUs{}, "node-a"
	lt, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := lt.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return lt
}

const localXID = `apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata:
  name: local-xid
spec:
  selector:
    gpus: ["3"]
    mode: all
  faults:
    - id: hardware.xid
      mechanism: kernel-log
      params:
        code: 79
  duration: 3s
  expectations:
    - detector: kmsg-xid
      within: 5s
    - name: fallen-off-bus-line
      probe:
        log:
          pattern: 'NVRM: Xid \(PCI:0000:c4:00\): 79,'
      within: 5s
`

func TestLocalTargetRunsKernelLogXID(t *testing.T) {
	needKmsg(t)
	exp, err := v1alpha1.Load([]byte(localXID), "local-xid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exp.Default()
	lt := startLocal(t)
	l, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	eng := engine.New(engine.Options{Target: lt, Ledger: l, PollInterval: 250 * time.Millisecond, RecoveryWindow: -1})
	start := time.Now()
	rec, err := eng.Run(t.Context(), exp)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(start); took < 3*time.Second || took > 6*time.Second {
		t.Errorf("run took %s, want about the 3s duration", took)
	}
	if got := rec.Plan.Injections; len(got) != 1 || got[0].Ref.GPU != 3 || got[0].Ref.Node != "node-a" {
		t.Fatalf("injections = %+v, want one on node-a gpu 3", got)
	}
	for _, v := range rec.Verdicts {
		if v.Verdict != engine.Pass || v.TTDSeconds == nil {
			t.Errorf("%s: verdict %s (%s), want pass", v.Name, v.Verdict, v.Detail)
			continue
		}
		if *v.TTDSeconds >= 1 {
			t.Errorf("%s: time to detect %.3fs, want under 1s", v.Name, *v.TTDSeconds)
		}
		t.Logf("%s: time to detect %.3fs", v.Name, *v.TTDSeconds)
	}
	// Other tests may log XIDs at the same time; one subject must be ours.
	if v := rec.Verdicts[0]; !slices.ContainsFunc(v.Subjects, func(s probe.Subject) bool {
		return s.Node == "node-a" && s.GPU == "3" && s.UUID == "GPU-00000000-0000-0000-0000-000000000003"
	}) {
		t.Errorf("kmsg-xid subjects = %+v, want gpu 3 resolved from its bus id", v.Subjects)
	}
	if p, _ := l.Pending(t.Context()); len(p) != 0 {
		t.Errorf("ledger still holds %d entries after the run", len(p))
	}
}

func TestLocalTargetProbes(t *testing.T) {
	needKmsg(t)
	lt := startLocal(t)
	tests := []struct {
		name    string
		spec    v1alpha1.ProbeSpec
		wantErr string
	}{
		{name: "kmsg-xid", spec: v1alpha1.ProbeSpec{Detector: "kmsg-xid"}},
		{name: "log", spec: v1alpha1.ProbeSpec{Log: &v1alpha1.LogProbe{Pattern: "Xid"}}},
		{name: "bad pattern", spec: v1alpha1.ProbeSpec{Log: &v1alpha1.LogProbe{Pattern: "("}}, wantErr: "log pattern"},
		{name: "metric detector", spec: v1alpha1.ProbeSpec{Detector: "dcgm-xid-errors"}},
		{name: "collective-trace without a tracer", spec: v1alpha1.ProbeSpec{Detector: "collective-trace"}, wantErr: "needs the job's processes or libnccl"},
		{name: "unknown detector", spec: v1alpha1.ProbeSpec{Detector: "no-such"}, wantErr: `"no-such" is not a built-in detector`},
		{name: "prometheus", spec: v1alpha1.ProbeSpec{Prometheus: &v1alpha1.PrometheusProbe{URL: "http://127.0.0.1:9090", Alert: "GpuXid"}}},
		{name: "prometheus without url", spec: v1alpha1.ProbeSpec{Prometheus: &v1alpha1.PrometheusProbe{Alert: "GpuXid"}}, wantErr: "no Prometheus URL"},
		{name: "threshold", spec: v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: "x", Op: ">", Value: 1}}},
		{name: "bad comparison", spec: v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: "x", Op: "=>", Value: 1}}, wantErr: `comparison "=>"`},
		{name: "empty", spec: v1alpha1.ProbeSpec{}, wantErr: "defines nothing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := lt.Probe(tc.name, tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Probe error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Probe: %v", err)
			}
			if p.Name() != tc.name {
				t.Errorf("Name = %q, want %q", p.Name(), tc.name)
			}
		})
	}
}

func TestLocalLogProbeWindow(t *testing.T) {
	needKmsg(t)
	lt := startLocalWith(t, Options{LogWindow: 300 * time.Millisecond})
	marker := fmt.Sprintf("gpuchaos local log probe test %d", time.Now().UnixNano())
	p, err := lt.Probe("marker", v1alpha1.ProbeSpec{Log: &v1alpha1.LogProbe{Pattern: marker}})
	if err != nil {
		t.Fatal(err)
	}
	observe := func() probe.Observation {
		t.Helper()
		obs, err := p.Observe(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return obs
	}
	if obs := observe(); obs.Holds {
		t.Fatalf("holds before the line was written: %+v", obs)
	}
	if err := (kmsg.Writer{}).Write(kmsg.LevelInfo, marker); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	obs := observe()
	for !obs.Holds && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		obs = observe()
	}
	if !obs.Holds || len(obs.Subjects) != 1 || obs.Subjects[0].Node != "node-a" || !strings.Contains(obs.Detail, marker) {
		t.Fatalf("after writing the line: %+v, want it holding for node-a", obs)
	}
	time.Sleep(400 * time.Millisecond)
	if obs := observe(); obs.Holds {
		t.Errorf("still holds after the 300ms window: %+v", obs)
	}
}

func TestLocalRunInterruptedRecovers(t *testing.T) {
	needKmsg(t)
	exp, err := v1alpha1.Load([]byte(localXID), "local-xid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exp.Default()
	lt := startLocal(t)
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	l, err := ledger.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Ctrl-C half a second into the three-second fault window.
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	eng := engine.New(engine.Options{Target: lt, Ledger: l, PollInterval: 100 * time.Millisecond, RecoveryWindow: -1})
	rec, err := eng.Run(ctx, exp)
	if err == nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want an interruption", err)
	}
	if rec == nil || !slices.ContainsFunc(rec.Timeline, func(ev engine.Event) bool { return ev.Kind == "recover" }) {
		t.Fatalf("no recover event in the interrupted run's timeline: %+v", rec)
	}
	reopened, err := ledger.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	if p, _ := reopened.Pending(t.Context()); len(p) != 0 {
		t.Errorf("the interrupted run left %+v in the ledger", p)
	}
}

func TestLocalTargetInventory(t *testing.T) {
	needKmsg(t)
	lt := startLocal(t)
	inv, err := lt.Inventory(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Nodes) != 1 || inv.Nodes[0].Name != "node-a" || len(inv.Nodes[0].GPUs) != 4 || len(inv.Jobs) != 0 {
		t.Fatalf("inventory = %+v, want node-a with 4 GPUs and no jobs", inv)
	}
	if g := inv.Nodes[0].GPUs[3]; g.Index != 3 || g.PCI != "00000000:C4:00.0" || g.UUID == "" {
		t.Errorf("gpu 3 = %+v", g)
	}
	if lt.Kind() != target.Local {
		t.Errorf("Kind = %q, want local", lt.Kind())
	}
}

// ledgerChildEnv names the ledger a re-executed test binary records an
// entry in before it waits to be killed.
const ledgerChildEnv = "GPUCHAOS_TEST_LEDGER_CHILD"

// TestLedgerChild is the child side of TestRecoverPendingAfterSIGKILL: it
// records one injection durably, says so, and hangs.
func TestLedgerChild(t *testing.T) {
	path := os.Getenv(ledgerChildEnv)
	if path == "" {
		t.Skip("child process of TestRecoverPendingAfterSIGKILL")
	}
	l, err := ledger.Open(path)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	err = l.Record(context.Background(), ledger.Entry{
		Key: "killed/0/node-a/gpu3", Run: "killed", Target: "local", Fault: "hardware.xid", Mechanism: "kernel-log",
		Ref: inventory.Ref{Kind: "gpu", Node: "node-a", GPU: 3, PCI: "00000000:C4:00.0"}, InjectedAt: time.Now(),
	})
	if err != nil {
		fmt.Println("record:", err)
		os.Exit(3)
	}
	fmt.Println("recorded")
	time.Sleep(time.Minute)
	os.Exit(4)
}

func TestRecoverPendingAfterSIGKILL(t *testing.T) {
	needKmsg(t)
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLedgerChild$")
	cmd.Env = append(os.Environ(), ledgerChildEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "recorded") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q, want recorded", buf[:n])
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", err)
	}

	l, err := ledger.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	lt := startLocal(t)
	got, err := ledger.RecoverPending(t.Context(), lt.Kind().Recoverer(lt.Injector), l)
	if err != nil {
		t.Fatalf("RecoverPending: %v", err)
	}
	if len(got) != 1 || got[0].Entry.Key != "killed/0/node-a/gpu3" || got[0].Status != ledger.Recovered {
		t.Fatalf("recovered %+v, want the killed run's entry", got)
	}
	if want := "hardware.xid on gpu 3 on node node-a"; got[0].What != want {
		t.Errorf("recovery names %q, want %q", got[0].What, want)
	}
	if p, _ := l.Pending(t.Context()); len(p) != 0 {
		t.Errorf("pending after recovery = %+v, want none", p)
	}
	l.Close()
	// The Done must be durable: a later start finds nothing to recover.
	again, err := ledger.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if p, _ := again.Pending(t.Context()); len(p) != 0 {
		t.Errorf("pending after reopening = %+v, want none", p)
	}
}

func TestRecoverPendingKeepsWhatItCannotRecover(t *testing.T) {
	needKmsg(t)
	lt := startLocal(t)
	l := &ledger.Memory{}
	ctx := t.Context()
	entries := []ledger.Entry{
		{Key: "ok", Target: "local", Fault: "hardware.xid", Mechanism: "kernel-log"},
		{Key: "other-target", Target: "twin", Fault: "hardware.xid", Mechanism: "twin"},
		{Key: "unknown-fault", Target: "local", Fault: "no.such-fault", Mechanism: "kernel-log"},
		{Key: "unknown-mechanism", Target: "local", Fault: "hardware.xid", Mechanism: "teleport"},
	}
	for _, e := range entries {
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ledger.RecoverPending(ctx, lt.Kind().Recoverer(lt.Injector), l)
	if err != nil {
		t.Fatalf("RecoverPending: %v", err)
	}
	wantStatus := map[string]string{"ok": ledger.Recovered, "other-target": ledger.StillPending, "unknown-fault": ledger.StillPending, "unknown-mechanism": ledger.StillPending}
	wantWhy := map[string]string{"other-target": "target twin", "unknown-fault": "not in the catalogue", "unknown-mechanism": `"teleport" is not a mechanism of hardware.xid`}
	if len(got) != len(entries) {
		t.Fatalf("got %d outcomes, want one per entry: %+v", len(got), got)
	}
	for _, r := range got {
		if r.Status != wantStatus[r.Entry.Key] || !strings.Contains(r.Detail, wantWhy[r.Entry.Key]) {
			t.Errorf("%s: %s (%s), want %s saying %q", r.Entry.Key, r.Status, r.Detail, wantStatus[r.Entry.Key], wantWhy[r.Entry.Key])
		}
	}
	pe := &ledger.PendingError{Ledger: "L", Entries: ledger.StillPendingIn(got)}
	for _, want := range []string{"3 injection(s) still pending in ledger L", "other-target", "unknown-fault", "unknown-mechanism", "gpuchaos recover --ledger L"} {
		if !strings.Contains(pe.Error(), want) {
			t.Errorf("pending error %q does not say %q", pe.Error(), want)
		}
	}
	if p, _ := l.Pending(ctx); len(p) != 3 {
		t.Errorf("pending = %d entries, want the 3 that failed", len(p))
	}
}
