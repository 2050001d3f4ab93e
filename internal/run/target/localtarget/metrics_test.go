package localtarget

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/node/exporter"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/xidwatch"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
)

// sampledGPUs answers samples too, so the agent puts fakeGPUs' GPUs on
// its page.
type sampledGPUs struct{ fakeGPUs }

func (sampledGPUs) Sample(ctx context.Context, i int) (gpu.Sample, error) {
	return gpu.Sample{Time: time.Now(), TempC: 35, PowerW: 80, FBFreeMiB: 143000}, ctx.Err()
}

const localXIDMetric = `apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata:
  name: local-xid-metric
spec:
  selector:
    gpus: ["1"]
    mode: all
  faults:
    - id: hardware.xid
      mechanism: kernel-log
      params:
        code: 48
  duration: 3s
  expectations:
    - detector: dcgm-xid-errors
      within: 5s
    - name: xid-48-counted
      probe:
        threshold:
          metric: gpuchaos_xid_events_total
          labels: {gpu: "1", code: "48"}
          op: ">="
          value: 1
      within: 5s
`

// TestLocalTargetMetricProbeOnAgent runs an XID through the kernel log and
// detects it on the agent's own exporter, as a node without a Prometheus
// would: the agent follows the real /dev/kmsg, records the XID, and the
// local target scrapes its /metrics page over HTTP for the built-in
// dcgm-xid-errors detector and a threshold probe.
func TestLocalTargetMetricProbeOnAgent(t *testing.T) {
	needKmsg(t)
	ctx := t.Context()
	a, err := exporter.New(ctx, exporter.Options{Source: sampledGPUs{}, Hostname: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	a.Collect(ctx)
	w, err := xidwatch.Start(ctx, xidwatch.Options{
		Resolve: xidwatch.GPUResolver(a.Devices()),
		OnXID:   func(ev xidwatch.Event) { a.RecordXID(ev.GPU, ev.Code) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	srv := httptest.NewServer(a)
	defer srv.Close()

	exp, err := v1alpha1.Load([]byte(localXIDMetric), "local-xid-metric.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exp.Default()
	lt := startLocalWith(t, Options{Exporter: srv.URL + "/metrics"})
	l, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	eng := engine.New(engine.Options{Target: lt, Ledger: l, PollInterval: 250 * time.Millisecond, RecoveryWindow: -1})
	rec, err := eng.Run(ctx, exp)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rec.Err != nil {
		t.Fatalf("run error: %v", rec.Err)
	}
	for _, v := range rec.Verdicts {
		if v.Verdict != engine.Pass || v.TTDSeconds == nil {
			t.Errorf("%s: verdict %s (%s), want pass", v.Name, v.Verdict, v.Detail)
			continue
		}
		if !slices.ContainsFunc(v.Subjects, func(s probe.Subject) bool { return s.GPU == "1" }) {
			t.Errorf("%s: subjects %+v, want gpu 1", v.Name, v.Subjects)
		}
		t.Logf("%s: time to detect %.3fs", v.Name, *v.TTDSeconds)
	}
}
