package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
)

// BenchmarkInject200 measures, on the test API server with the simulated
// agent, how long one Experiment of 200 GPU faults on 200 nodes takes from
// its creation until every NodeFault is reported applied (condition
// Injected). The simulated agent acknowledges one NodeFault at a time, so
// this bounds the controller's side from above. The kwok benchmark of 500
// nodes belongs to the scale work.
func BenchmarkInject200(b *testing.B) {
	const nodes = 200
	env := kubetest.Start(b, kubetest.Options{CRDs: true})
	ctx := context.Background()
	for i := range nodes {
		name := fmt.Sprintf("gpu-node-%03d", i)
		gpus, _ := json.Marshal([]v1alpha1.GPUReport{{Index: 0, UUID: "GPU-" + name}})
		if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "h200"}, Annotations: map[string]string{v1alpha1.AnnotationGPUs: string(gpus)}}}); err != nil {
			b.Fatal(err)
		}
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsChaos, Labels: map[string]string{v1alpha1.LabelChaos: v1alpha1.ChaosEnabled}}}); err != nil {
		b.Fatal(err)
	}
	startAgent(b, env)
	startController(b, env, prometheus(b, env))
	b.ResetTimer()
	for i := range b.N {
		exp := experiment(nsChaos, fmt.Sprintf("scale-%d", i), 10*time.Minute)
		exp.Spec.Selector.NodeSelector = map[string]string{"pool": "h200"}
		exp.Spec.BlastRadius = v1alpha1.BlastRadius{MaxNodes: nodes, MaxGPUs: nodes}
		began := time.Now()
		if err := env.Client.Create(ctx, exp); err != nil {
			b.Fatal(err)
		}
		for {
			e, err := getB(env, nsChaos, exp.Name)
			if err == nil && meta.IsStatusConditionTrue(e.Status.Conditions, v1alpha1.ConditionInjected) {
				break
			}
			if err == nil && e.Status.Phase.Final() {
				b.Fatalf("%s: %+v", e.Status.Phase, e.Status.Conditions)
			}
			if time.Since(began) > 90*time.Second {
				b.Fatalf("not injected in 90 s: %+v %v", e.Status.Conditions, e.Status.Phase)
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.ReportMetric(time.Since(began).Seconds(), "s-to-injected")
		b.StopTimer()
		if err := env.Client.Delete(ctx, exp); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func getB(env *kubetest.Env, ns, name string) (*v1alpha1.Experiment, error) {
	var e v1alpha1.Experiment
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &e)
	return &e, err
}
