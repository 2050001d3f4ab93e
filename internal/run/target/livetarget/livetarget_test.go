package livetarget_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
	"github.com/gpuchaos/gpuchaos/internal/run/target/livetarget"
	"github.com/gpuchaos/gpuchaos/internal/twin"
	"github.com/gpuchaos/gpuchaos/internal/twin/live"
)

// alertServer answers instant queries like Prometheus would while the
// alert fires (firing is true) for gpu-node-0: the real server is in
// internal/harness/e2e, this test checks the wiring of the live target.
func alertServer(t *testing.T, firing *atomic.Bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" || !strings.Contains(r.FormValue("query"), `alertname="GpuMissing"`) {
			http.Error(w, `{"status":"error","errorType":"bad_data","error":"unexpected"}`, http.StatusBadRequest)
			return
		}
		result := `[]`
		if firing.Load() {
			result = `[{"metric":{"__name__":"ALERTS","alertname":"GpuMissing","alertstate":"firing","Hostname":"gpu-node-0"},"value":[1767225600,"1"]}]`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":` + result + `}}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

const liveXID79 = `
apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata: {name: live-xid-79}
spec:
  selector: {nodes: [gpu-node-0], gpus: ["3"], mode: one}
  faults: [{id: hardware.fallen-off-bus}]
  duration: 1500ms
  expectations:
    - {detector: kmsg-xid, within: 1s}
    - {name: gpu-missing, within: 1s, probe: {prometheus: {alert: GpuMissing}}}
`

func TestLiveTarget(t *testing.T) {
	t.Parallel()
	r, err := live.New(t.Context(), live.Options{Warmup: time.Minute, Tick: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()

	var firing atomic.Bool
	srv := alertServer(t, &firing)
	tgt := livetarget.New(r, srv.URL)
	tgt.Client = srv.Client()
	e := engine.New(engine.Options{
		Target: tgt, PollInterval: 100 * time.Millisecond, RecoveryWindow: -1,
		// The alert starts firing once the fault is in.
		OnEvent: func(ev engine.Event) {
			if ev.Kind == "inject" {
				firing.Store(true)
			}
		},
	})
	start := time.Now()
	rec, err := e.Run(t.Context(), load(t, liveXID79))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(start); took < 1500*time.Millisecond || took > 10*time.Second {
		t.Errorf("a 1.5s experiment took %s of wall time", took)
	}
	for _, v := range rec.Verdicts {
		if v.Verdict != engine.Pass || v.TTDSeconds == nil || *v.TTDSeconds > 0.5 {
			t.Errorf("%s: %s, ttd %v (%s), want pass at once", v.Name, v.Verdict, v.TTDSeconds, v.Detail)
		}
	}
	r.WithTwin(func(tw *twin.Twin) {
		if a := tw.Active(); len(a) != 0 {
			t.Errorf("still applied after the run: %v", a)
		}
	})
}

func TestLiveTargetSleep(t *testing.T) {
	t.Parallel()
	tgt := livetarget.New(nil, "")
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := tgt.Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Sleep past the deadline: %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Sleep returned %s after its context ended", took)
	}
	if err := tgt.Sleep(t.Context(), 20*time.Millisecond); err != nil {
		t.Errorf("Sleep: %v", err)
	}
	if tgt.Kind() != target.Live || tgt.Kind().Mechanisms() != "twin" {
		t.Errorf("Kind = %q with mechanisms of %q, want live with the twin's, so the twin mechanisms apply", tgt.Kind(), tgt.Kind().Mechanisms())
	}
}

func load(t *testing.T, doc string) *v1alpha1.Experiment {
	t.Helper()
	exp, err := v1alpha1.Load([]byte(doc), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exp.Default()
	return exp
}
