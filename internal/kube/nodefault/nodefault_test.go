package nodefault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ledger"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
)

// These tests hold the applier's decisions to what a NodeFault asks, on
// an API server that keeps one object and applies merge patches as the
// real one does (resourceVersion preconditions included). The real API
// server runs the same paths in the node agent's and the controller's
// tests (internal/kube/nodeagent, internal/kube/controller).

// server is one NodeFault as the API server holds it, as JSON.
type server struct {
	mu     sync.Mutex
	obj    map[string]any
	rv     int
	writes int
}

func newServer(t *testing.T, nf *v1alpha1.NodeFault) *server {
	t.Helper()
	s := &server{rv: 1}
	nf.ResourceVersion = "1"
	m, err := jsonObject(nf)
	if err != nil {
		t.Fatal(err)
	}
	s.obj = m
	return s
}

// applyMerge applies merge patch p to obj (RFC 7386).
func applyMerge(obj, p map[string]any) {
	for k, v := range p {
		switch pv := v.(type) {
		case nil:
			delete(obj, k)
		case map[string]any:
			sub, ok := obj[k].(map[string]any)
			if !ok {
				sub = map[string]any{}
				obj[k] = sub
			}
			applyMerge(sub, pv)
		default:
			obj[k] = v
		}
	}
}

func (s *server) patch(nf *v1alpha1.NodeFault, raw []byte, status bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p map[string]any
	if err := json.Unmarshal(raw, &p); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if md, ok := p["metadata"].(map[string]any); ok {
		if rv, ok := md["resourceVersion"]; ok && rv != strconv.Itoa(s.rv) {
			return apierrors.NewConflict(schema.GroupResource{Group: v1alpha1.Group, Resource: "nodefaults"}, nf.Name, errors.New("the object has been modified"))
		}
		delete(md, "resourceVersion")
	}
	// The status subresource takes the status alone; the object all but
	// the status.
	if status {
		p = map[string]any{"status": p["status"]}
	} else {
		delete(p, "status")
	}
	applyMerge(s.obj, p)
	s.rv++
	s.writes++
	s.obj["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(s.rv)
	b, _ := json.Marshal(s.obj)
	*nf = v1alpha1.NodeFault{}
	return json.Unmarshal(b, nf)
}

func (s *server) Patch(_ context.Context, nf *v1alpha1.NodeFault, p []byte) error {
	return s.patch(nf, p, false)
}

func (s *server) PatchStatus(_ context.Context, nf *v1alpha1.NodeFault, p []byte) error {
	return s.patch(nf, p, true)
}

// current is the NodeFault as the server holds it now.
func (s *server) current() (*v1alpha1.NodeFault, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := json.Marshal(s.obj)
	if err != nil {
		return nil, err
	}
	var nf v1alpha1.NodeFault
	return &nf, json.Unmarshal(b, &nf)
}

func (s *server) get(t *testing.T) *v1alpha1.NodeFault {
	t.Helper()
	nf, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	return nf
}

// edit changes the held NodeFault as a user would: a new resourceVersion,
// and a new generation for a spec change.
func (s *server) edit(t *testing.T, spec bool, fn func(*v1alpha1.NodeFault)) {
	t.Helper()
	nf := s.get(t)
	fn(nf)
	if spec {
		nf.Generation++
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	nf.ResourceVersion = strconv.Itoa(s.rv)
	m, err := jsonObject(nf)
	if err != nil {
		t.Fatal(err)
	}
	s.obj = m
}

// injector records what it is asked, with whether the finalizer and the
// journal record were in place when Inject came.
type injector struct {
	mu       sync.Mutex
	srv      *server
	journal  ledger.Ledger
	injects  []string
	recovers []string
	// hadFinalizer and recorded are read at each Inject.
	hadFinalizer, recorded []bool
	injectErr, recoverErr  error
	ref                    inventory.Ref
}

func (in *injector) Inject(ctx context.Context, key string, ref inventory.Ref, _ catalog.Values) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.injects = append(in.injects, key)
	in.ref = ref
	nf, err := in.srv.current()
	if err != nil {
		return err
	}
	in.hadFinalizer = append(in.hadFinalizer, slices.Contains(nf.Finalizers, v1alpha1.FinalizerRecover))
	rec := false
	if in.journal != nil {
		p, _ := in.journal.Pending(ctx)
		rec = slices.ContainsFunc(p, func(e ledger.Entry) bool { return e.Key == key })
	}
	in.recorded = append(in.recorded, rec)
	return in.injectErr
}

func (in *injector) Recover(_ context.Context, key string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.recovers = append(in.recovers, key)
	return in.recoverErr
}

type fixture struct {
	srv     *server
	inj     *injector
	journal *ledger.Memory
	a       *Applier
	now     time.Time
}

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func newFault(expires time.Time) *v1alpha1.NodeFault {
	gpu1 := 1
	return &v1alpha1.NodeFault{
		ObjectMeta: metav1.ObjectMeta{Name: "nf", UID: "u1", Generation: 1},
		Spec: v1alpha1.NodeFaultSpec{
			NodeName: "n1", Fault: "hardware.xid", Mechanism: "kernel-log", Params: map[string]string{"code": "79"},
			Target: v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &gpu1, Key: "n1/1"},
			Action: v1alpha1.ActionApply, ExpiresAt: metav1.NewTime(expires),
		},
	}
}

// setup is an applier over one NodeFault; withJournal gives it a memory
// journal, mutate changes its options.
func setup(t *testing.T, nf *v1alpha1.NodeFault, withJournal bool, mutate ...func(*Options)) *fixture {
	t.Helper()
	fx := &fixture{srv: newServer(t, nf), now: t0}
	fx.inj = &injector{srv: fx.srv}
	opts := Options{
		API: fx.srv, Agent: "test-agent",
		Injector: func(*catalog.Fault, *catalog.Mechanism) (fault.Injector, error) { return fx.inj, nil },
		Now:      func() time.Time { return fx.now },
		GPUs:     []gpu.Device{{Index: 1, UUID: "GPU-1", PCI: "00000000:18:00.0"}},
	}
	if withJournal {
		fx.journal = &ledger.Memory{}
		fx.inj.journal = fx.journal
		opts.Journal = fx.journal
	}
	for _, m := range mutate {
		m(&opts)
	}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	fx.a = a
	return fx
}

// reconcile runs one Reconcile on the NodeFault as the server holds it.
func (fx *fixture) reconcile(t *testing.T) (Result, error) {
	t.Helper()
	return fx.a.Reconcile(context.Background(), fx.srv.get(t))
}

func (fx *fixture) mustReconcile(t *testing.T) Result {
	t.Helper()
	r, err := fx.reconcile(t)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return r
}

func hasFinalizer(nf *v1alpha1.NodeFault) bool {
	return slices.Contains(nf.Finalizers, v1alpha1.FinalizerRecover)
}

func TestApply(t *testing.T) {
	for _, journal := range []bool{false, true} {
		t.Run(fmt.Sprintf("journal=%v", journal), func(t *testing.T) {
			fx := setup(t, newFault(t0.Add(time.Hour)), journal)
			res := fx.mustReconcile(t)
			if res.RequeueAfter != time.Hour {
				t.Errorf("RequeueAfter %s, want the hour until ExpiresAt", res.RequeueAfter)
			}
			got := fx.srv.get(t)
			s := got.Status
			if s.Phase != v1alpha1.NodeFaultApplied || s.AppliedAt == nil || !s.AppliedAt.Time.Equal(t0) ||
				s.Agent != "test-agent" || s.ObservedGeneration != 1 || s.Message != "" || s.RecoveredAt != nil {
				t.Errorf("status %+v: want Applied at t0 by test-agent for generation 1", s)
			}
			if !hasFinalizer(got) {
				t.Errorf("finalizers %v, want %s", got.Finalizers, v1alpha1.FinalizerRecover)
			}
			if !slices.Equal(fx.inj.injects, []string{"nf"}) || !fx.inj.hadFinalizer[0] || fx.inj.recorded[0] != journal {
				t.Errorf("injects %v (finalizer first %v, recorded first %v); want one, after the finalizer and the record", fx.inj.injects, fx.inj.hadFinalizer, fx.inj.recorded)
			}
			if want := (inventory.Ref{Kind: catalog.ScopeGPU, Node: "n1", GPU: 1, UUID: "GPU-1", PCI: "00000000:18:00.0"}); fx.inj.ref != want {
				t.Errorf("ref %+v, want %+v", fx.inj.ref, want)
			}

			// Resyncs and restarts inject nothing again.
			fx.now = t0.Add(time.Minute)
			fx.mustReconcile(t)
			fx.mustReconcile(t)
			if len(fx.inj.injects) != 1 {
				t.Errorf("%d injects after resyncs, want 1", len(fx.inj.injects))
			}
		})
	}
}

// Applied once per generation: without a journal the status is the
// record, so a new generation is applied again; with one, the journal
// is, and a lost report is written again without injecting twice.
func TestAppliedOncePerGeneration(t *testing.T) {
	fx := setup(t, newFault(t0.Add(time.Hour)), false)
	fx.mustReconcile(t)
	fx.srv.edit(t, true, func(nf *v1alpha1.NodeFault) { nf.Spec.Params["code"] = "48" })
	fx.mustReconcile(t)
	if len(fx.inj.injects) != 2 {
		t.Errorf("without a journal, %d injects over two generations, want 2", len(fx.inj.injects))
	}

	fx = setup(t, newFault(t0.Add(time.Hour)), true)
	fx.mustReconcile(t)
	fx.srv.edit(t, false, func(nf *v1alpha1.NodeFault) { nf.Status = v1alpha1.NodeFaultStatus{} })
	fx.now = t0.Add(time.Minute)
	fx.mustReconcile(t)
	s := fx.srv.get(t).Status
	if len(fx.inj.injects) != 1 || s.Phase != v1alpha1.NodeFaultApplied || !s.AppliedAt.Time.Equal(t0) {
		t.Errorf("with a journal and the report lost: %d injects, status %+v; want one inject and Applied again at the recorded time", len(fx.inj.injects), s)
	}
}

func TestRecover(t *testing.T) {
	tests := []struct {
		name    string
		journal bool
		undo    func(fx *fixture, t *testing.T)
		want    string
	}{
		{"action Recover", false, func(fx *fixture, t *testing.T) {
			fx.srv.edit(t, true, func(nf *v1alpha1.NodeFault) { nf.Spec.Action = v1alpha1.ActionRecover })
		}, "recovered on action Recover"},
		{"action Recover, journal", true, func(fx *fixture, t *testing.T) {
			fx.srv.edit(t, true, func(nf *v1alpha1.NodeFault) { nf.Spec.Action = v1alpha1.ActionRecover })
		}, "recovered on action Recover"},
		{"expiry", false, func(fx *fixture, _ *testing.T) { fx.now = t0.Add(2 * time.Hour) }, "recovered on expiry"},
		{"expiry, journal", true, func(fx *fixture, _ *testing.T) { fx.now = t0.Add(2 * time.Hour) }, "recovered on expiry"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := setup(t, newFault(t0.Add(time.Hour)), tc.journal)
			fx.mustReconcile(t)
			tc.undo(fx, t)
			fx.mustReconcile(t)
			got := fx.srv.get(t)
			if got.Status.Phase != v1alpha1.NodeFaultRecovered || got.Status.Message != tc.want || got.Status.RecoveredAt == nil || !got.Status.AppliedAt.Time.Equal(t0) {
				t.Errorf("status %+v: want Recovered, %q, both times", got.Status, tc.want)
			}
			if hasFinalizer(got) {
				t.Error("the finalizer stayed after recovery")
			}
			if !slices.Equal(fx.inj.recovers, []string{"nf"}) {
				t.Errorf("recovers %v, want one", fx.inj.recovers)
			}
			if fx.journal != nil {
				if p, _ := fx.journal.Pending(context.Background()); len(p) != 0 {
					t.Errorf("journal still holds %v", p)
				}
			}
			fx.mustReconcile(t)
			if len(fx.inj.recovers) != 1 || len(fx.inj.injects) != 1 {
				t.Errorf("a finished NodeFault was touched again: %d injects, %d recovers", len(fx.inj.injects), len(fx.inj.recovers))
			}
		})
	}
}

// A NodeFault past its expiry that was never applied: without a journal
// nothing says it was not, so it is recovered (safe by the contract);
// with one, it is reported Failed without injecting.
func TestExpiredBeforeApplied(t *testing.T) {
	fx := setup(t, newFault(t0.Add(-time.Minute)), false)
	fx.mustReconcile(t)
	if s := fx.srv.get(t).Status; s.Phase != v1alpha1.NodeFaultRecovered || s.Message != "recovered on expiry" || len(fx.inj.injects) != 0 {
		t.Errorf("without a journal: status %+v, %d injects; want Recovered on expiry, none", s, len(fx.inj.injects))
	}
	fx = setup(t, newFault(t0.Add(-time.Minute)), true)
	fx.mustReconcile(t)
	if s := fx.srv.get(t).Status; s.Phase != v1alpha1.NodeFaultFailed || !strings.Contains(s.Message, "expired at") || len(fx.inj.injects) != 0 {
		t.Errorf("with a journal: status %+v, %d injects; want Failed, expired, none", s, len(fx.inj.injects))
	}
}

func TestRecoveryFails(t *testing.T) {
	for _, failRecovery := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailRecovery=%v", failRecovery), func(t *testing.T) {
			fx := setup(t, newFault(t0.Add(time.Hour)), !failRecovery, func(o *Options) { o.FailRecovery = failRecovery })
			fx.mustReconcile(t)
			fx.inj.recoverErr = errors.New("tc busy")
			fx.srv.edit(t, true, func(nf *v1alpha1.NodeFault) { nf.Spec.Action = v1alpha1.ActionRecover })
			if _, err := fx.reconcile(t); err == nil || !strings.Contains(err.Error(), "tc busy") {
				t.Fatalf("Reconcile: %v, want the recovery's error, so that the caller retries", err)
			}
			got := fx.srv.get(t)
			phase, msg := v1alpha1.NodeFaultApplied, "recovery pending: tc busy"
			if failRecovery {
				phase, msg = v1alpha1.NodeFaultFailed, "recover: tc busy"
			}
			if got.Status.Phase != phase || got.Status.Message != msg || !hasFinalizer(got) {
				t.Errorf("status %+v, finalizers %v: want %s %q, the finalizer kept", got.Status, got.Finalizers, phase, msg)
			}
			fx.inj.recoverErr = nil
			fx.mustReconcile(t)
			if got := fx.srv.get(t); got.Status.Phase != v1alpha1.NodeFaultRecovered || hasFinalizer(got) {
				t.Errorf("after a retry that worked: status %+v, finalizers %v; want Recovered, no finalizer", got.Status, got.Finalizers)
			}
		})
	}
}

func TestInjectFails(t *testing.T) {
	for _, journal := range []bool{false, true} {
		t.Run(fmt.Sprintf("journal=%v", journal), func(t *testing.T) {
			fx := setup(t, newFault(t0.Add(time.Hour)), journal)
			fx.inj.injectErr = errors.New("no such process")
			fx.mustReconcile(t)
			got := fx.srv.get(t)
			if got.Status.Phase != v1alpha1.NodeFaultFailed || got.Status.Message != "inject: no such process" {
				t.Errorf("status %+v: want Failed with the error", got.Status)
			}
			if len(fx.inj.recovers) != 1 {
				t.Errorf("%d recovers after a failed inject, want the one that cleans up", len(fx.inj.recovers))
			}
			fx.mustReconcile(t)
			if got := fx.srv.get(t); hasFinalizer(got) || len(fx.inj.injects) != 1 {
				t.Errorf("finalizers %v, %d injects; want none left and no retry of a Failed NodeFault", got.Finalizers, len(fx.inj.injects))
			}
		})
	}
}

func TestPartial(t *testing.T) {
	errHeld := errors.New("2 pods stayed")
	fx := setup(t, newFault(t0.Add(time.Hour)), false, func(o *Options) { o.Partial = func(err error) bool { return errors.Is(err, errHeld) } })
	fx.inj.injectErr = errHeld
	fx.mustReconcile(t)
	if s := fx.srv.get(t).Status; s.Phase != v1alpha1.NodeFaultApplied || s.Message != errHeld.Error() || len(fx.inj.recovers) != 0 {
		t.Errorf("status %+v, %d recovers: want Applied, saying what stayed, nothing undone", s, len(fx.inj.recovers))
	}
}

func TestRefusals(t *testing.T) {
	gpu7 := 7
	tests := []struct {
		name   string
		mutate func(*v1alpha1.NodeFault)
		want   string
	}{
		{"unknown fault", func(nf *v1alpha1.NodeFault) { nf.Spec.Fault = "hardware.nope" }, "spec.fault: hardware.nope is not in the catalogue"},
		{"unknown mechanism", func(nf *v1alpha1.NodeFault) { nf.Spec.Mechanism = "node-cordon" }, "spec.mechanism: node-cordon is not a mechanism of hardware.xid"},
		{"bad params", func(nf *v1alpha1.NodeFault) { nf.Spec.Params = map[string]string{"code": "x"} }, "spec.params: "},
		{"no such GPU", func(nf *v1alpha1.NodeFault) { nf.Spec.Target.GPU = &gpu7 }, "spec.target.gpu: node n1 has no GPU 7 (it has 1)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nf := newFault(t0.Add(time.Hour))
			tc.mutate(nf)
			fx := setup(t, nf, true)
			fx.mustReconcile(t)
			got := fx.srv.get(t)
			if got.Status.Phase != v1alpha1.NodeFaultFailed || !strings.HasPrefix(got.Status.Message, tc.want) || hasFinalizer(got) || len(fx.inj.injects) != 0 {
				t.Errorf("status %+v, finalizers %v, %d injects: want Failed %q, no finalizer, nothing injected", got.Status, got.Finalizers, len(fx.inj.injects), tc.want)
			}
		})
	}
}

func TestDeletion(t *testing.T) {
	for _, journal := range []bool{false, true} {
		t.Run(fmt.Sprintf("journal=%v", journal), func(t *testing.T) {
			fx := setup(t, newFault(t0.Add(time.Hour)), journal)
			fx.mustReconcile(t)
			writes := fx.srv.writes
			fx.srv.edit(t, false, func(nf *v1alpha1.NodeFault) { nf.DeletionTimestamp = &metav1.Time{Time: t0} })
			fx.mustReconcile(t)
			got := fx.srv.get(t)
			if hasFinalizer(got) || len(fx.inj.recovers) != 1 {
				t.Errorf("finalizers %v, %d recovers: want it recovered and let go", got.Finalizers, len(fx.inj.recovers))
			}
			if fx.srv.writes != writes+1 {
				t.Errorf("%d writes on deletion, want the finalizer's alone", fx.srv.writes-writes)
			}
		})
	}
}

// A write made from a stale copy is refused, not written over newer state.
func TestStaleCopy(t *testing.T) {
	fx := setup(t, newFault(t0.Add(time.Hour)), false)
	stale := fx.srv.get(t)
	fx.srv.edit(t, false, func(nf *v1alpha1.NodeFault) { nf.Labels = map[string]string{"x": "y"} })
	if _, err := fx.a.Reconcile(context.Background(), stale); !apierrors.IsConflict(err) {
		t.Fatalf("Reconcile of a stale copy: %v, want a conflict", err)
	}
	if len(fx.inj.injects) != 0 {
		t.Error("injected from a stale copy")
	}
}

// With the API server away, RecoverExpired recovers from the journal at
// ExpiresAt; the report is owed, and written with the recovery's own time
// by the next Reconcile.
func TestRecoverExpired(t *testing.T) {
	fx := setup(t, newFault(t0.Add(time.Hour)), true)
	fx.mustReconcile(t)
	if next, recovered := fx.a.RecoverExpired(context.Background()); recovered || !next.Equal(t0.Add(time.Hour)) {
		t.Errorf("RecoverExpired before expiry = %s, %v; want the expiry next, nothing recovered", next, recovered)
	}
	fx.now = t0.Add(time.Hour + time.Second)
	if next, recovered := fx.a.RecoverExpired(context.Background()); !recovered || !next.IsZero() {
		t.Errorf("RecoverExpired at expiry = %s, %v; want recovered, nothing next", next, recovered)
	}
	at := fx.now
	fx.now = at.Add(10 * time.Minute) // the API server comes back
	fx.mustReconcile(t)
	got := fx.srv.get(t)
	if got.Status.Phase != v1alpha1.NodeFaultRecovered || !got.Status.RecoveredAt.Time.Equal(at) || got.Status.Message != "recovered on expiry" || hasFinalizer(got) {
		t.Errorf("status %+v, finalizers %v: want Recovered at %s on expiry, no finalizer", got.Status, got.Finalizers, at)
	}
	if len(fx.inj.recovers) != 1 {
		t.Errorf("%d recovers, want 1", len(fx.inj.recovers))
	}
}

func TestRecoverGone(t *testing.T) {
	fx := setup(t, newFault(t0.Add(time.Hour)), true)
	fx.mustReconcile(t)
	if err := fx.a.RecoverGone(context.Background(), func(string) bool { return true }); err != nil || len(fx.inj.recovers) != 0 {
		t.Fatalf("RecoverGone with the NodeFault live: %v, %d recovers", err, len(fx.inj.recovers))
	}
	if err := fx.a.RecoverGone(context.Background(), func(string) bool { return false }); err != nil || len(fx.inj.recovers) != 1 {
		t.Fatalf("RecoverGone with it gone: %v, %d recovers; want it recovered", err, len(fx.inj.recovers))
	}
	if _, owed := fx.a.owedReport("nf"); owed {
		t.Error("a report is still owed to a NodeFault that is gone")
	}
}

func TestRef(t *testing.T) {
	gpu1, gpu2, rank := 1, 2, 3
	devs := []gpu.Device{{Index: 1, UUID: "GPU-1", PCI: "00000000:18:00.0"}}
	tests := []struct {
		name    string
		target  v1alpha1.NodeFaultTarget
		gpus    []gpu.Device
		want    inventory.Ref
		wantErr string
	}{
		{"node", v1alpha1.NodeFaultTarget{Kind: "node"}, devs, inventory.Ref{Kind: catalog.ScopeNode, Node: "n1"}, ""},
		{"gpu on the node", v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &gpu1}, devs, inventory.Ref{Kind: catalog.ScopeGPU, Node: "n1", GPU: 1, UUID: "GPU-1", PCI: "00000000:18:00.0"}, ""},
		{"gpu off the node", v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &gpu2, UUID: "GPU-x"}, nil, inventory.Ref{Kind: catalog.ScopeGPU, Node: "n1", GPU: 2, UUID: "GPU-x"}, ""},
		{"rank", v1alpha1.NodeFaultTarget{Kind: "rank", GPU: &gpu1, Job: "j", Rank: &rank}, devs, inventory.Ref{Kind: catalog.ScopeRank, Node: "n1", GPU: 1, UUID: "GPU-1", PCI: "00000000:18:00.0", Job: "j", Rank: 3}, ""},
		{"no such gpu", v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &gpu2}, devs, inventory.Ref{}, "spec.target.gpu: node n1 has no GPU 2 (it has 1)"},
		{"no gpus at all", v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &gpu1}, []gpu.Device{}, inventory.Ref{}, "spec.target.gpu: node n1 has no GPU 1 (it has 0)"},
		{"another uuid", v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &gpu1, UUID: "GPU-9"}, devs, inventory.Ref{}, "spec.target.uuid: GPU 1 of node n1 is GPU-1, not GPU-9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nf := &v1alpha1.NodeFault{Spec: v1alpha1.NodeFaultSpec{NodeName: "n1", Target: tc.target}}
			got, err := Ref(nf, tc.gpus)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("Ref: %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Ref = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestMergePatch(t *testing.T) {
	tests := []struct {
		name      string
		orig, mod string
		want      string
	}{
		{"same", `{"a":1,"b":{"c":"x"}}`, `{"a":1,"b":{"c":"x"}}`, `{}`},
		{"changed", `{"a":1}`, `{"a":2}`, `{"a":2}`},
		{"added", `{}`, `{"a":{"b":1}}`, `{"a":{"b":1}}`},
		{"removed", `{"a":1,"b":2}`, `{"b":2}`, `{"a":null}`},
		{"nested", `{"s":{"phase":"Applied","message":"x"}}`, `{"s":{"phase":"Recovered"}}`, `{"s":{"message":null,"phase":"Recovered"}}`},
		{"list replaced whole", `{"f":["a","b"]}`, `{"f":["a"]}`, `{"f":["a"]}`},
		{"object to scalar", `{"a":{"b":1}}`, `{"a":3}`, `{"a":3}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var orig, mod map[string]any
			if err := json.Unmarshal([]byte(tc.orig), &orig); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.mod), &mod); err != nil {
				t.Fatal(err)
			}
			p := mergePatch(orig, mod)
			b, _ := json.Marshal(p)
			if string(b) != tc.want {
				t.Errorf("mergePatch = %s, want %s", b, tc.want)
			}
			applyMerge(orig, p)
			if a, m := fmt.Sprint(orig), fmt.Sprint(mod); a != m {
				t.Errorf("orig patched = %s, want %s", a, m)
			}
		})
	}
}
