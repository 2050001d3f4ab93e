package v1alpha1_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
)

// TestCRDsOnRealAPIServer installs the generated CRDs on a real
// kube-apiserver and holds them to the Go types: every example experiment
// is stored and read back unchanged (the schema prunes nothing the loader
// accepts), and the CEL rules refuse what they promise to.
func TestCRDsOnRealAPIServer(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	ctx := context.Background()
	c := env.Client

	files, err := filepath.Glob("../../examples/*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	top, _ := filepath.Glob("../../examples/*.yaml")
	files = append(files, top...)
	n := 0
	var last *v1alpha1.ExperimentSpec
	for _, f := range files {
		if strings.Contains(f, "/rules/") {
			continue
		}
		exp, err := v1alpha1.LoadFile(f)
		if err != nil {
			continue // not an experiment (cluster specs live beside them)
		}
		n++
		exp.Namespace = "default"
		want := exp.Spec.DeepCopy()
		last = want
		if err := c.Create(ctx, exp); err != nil {
			t.Errorf("%s: create: %v", f, err)
			continue
		}
		var got v1alpha1.Experiment
		if err := c.Get(ctx, client.ObjectKeyFromObject(exp), &got); err != nil {
			t.Fatalf("%s: get: %v", f, err)
		}
		if !reflect.DeepEqual(&got.Spec, want) {
			a, _ := json.Marshal(want)
			b, _ := json.Marshal(got.Spec)
			t.Errorf("%s: the API server changed the spec\n sent: %s\n  got: %s", f, a, b)
		}
	}
	if n < 10 {
		t.Fatalf("only %d example experiments found", n)
	}

	gpu := 3
	nf := &v1alpha1.NodeFault{
		ObjectMeta: metav1.ObjectMeta{Name: "nf-1"},
		Spec: v1alpha1.NodeFaultSpec{
			NodeName: "gpu-node-0", Fault: "hardware.xid", Mechanism: "kmsg",
			Params: map[string]string{"code": "79"},
			Target: v1alpha1.NodeFaultTarget{Kind: "gpu", GPU: &gpu, Key: "gpu-node-0/3"},
			Action: v1alpha1.ActionApply, ExpiresAt: metav1.NewTime(time.Now().Add(time.Minute)),
		},
	}
	if err := c.Create(ctx, nf); err != nil {
		t.Fatalf("create NodeFault: %v", err)
	}
	moved := nf.DeepCopy()
	moved.Spec.NodeName = "gpu-node-1"
	if err := c.Update(ctx, moved); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("moving a NodeFault to another node: got %v, want the immutability rule", err)
	}
	nf.Spec.Action = v1alpha1.ActionRecover
	if err := c.Update(ctx, nf); err != nil {
		t.Fatalf("recover NodeFault: %v", err)
	}
	nf.Spec.Action = v1alpha1.ActionApply
	if err := c.Update(ctx, nf); !apierrors.IsInvalid(err) {
		t.Errorf("re-applying a recovered NodeFault: got %v, want Invalid", err)
	}
	bad := nf.DeepCopy()
	bad.ResourceVersion = ""
	bad.Name = "nf-2"
	bad.Spec.Action = "Explode"
	if err := c.Create(ctx, bad); !apierrors.IsInvalid(err) {
		t.Errorf("action Explode: got %v, want Invalid", err)
	}

	s := &v1alpha1.Schedule{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "default"},
		Spec:       v1alpha1.ScheduleSpec{Schedule: "0 3 * * *", Experiment: *last},
	}
	if err := c.Create(ctx, s); err != nil {
		t.Fatalf("create Schedule: %v", err)
	}
	if s.Spec.ConcurrencyPolicy != v1alpha1.ForbidConcurrent {
		t.Errorf("concurrencyPolicy defaulted to %q, want Forbid", s.Spec.ConcurrencyPolicy)
	}
}
