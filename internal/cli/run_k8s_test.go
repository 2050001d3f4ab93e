package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
)

// TestRunK8sDryRunListsPods: a dry run against a real API server names
// the pods a network fault narrowed to a job would act in, in the table
// and in the JSON.
func TestRunK8sDryRunListsPods(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	ctx := context.Background()
	for _, n := range []string{"n1", "n2"} {
		if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "train"}}); err != nil {
		t.Fatal(err)
	}
	for i, node := range []string{"n1", "n1", "n2"} {
		name := "llm-worker-" + string(rune('0'+i))
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: name, Labels: map[string]string{
				"training.kubeflow.org/job-name": "llm", "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": string(rune('0' + i))}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "train"}}},
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "net.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata:
  name: net-delay
  namespace: train
spec:
  selector:
    jobs: [llm]
    mode: all
  blastRadius:
    maxNodes: 2
  faults:
    - id: network.delay
      mechanism: netem
      params:
        delay: 10ms
  duration: 1m
  expectations:
    - name: slow
      within: 1m
      probe:
        prometheus:
          query: up
          op: ">"
          value: 0
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "", "run", file, "--target", "k8s", "--dry-run", "--kubeconfig", env.Kubeconfig)
	if code != 0 {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	t.Logf("dry run:\n%s", out)
	for _, want := range []string{
		"Pods reached:",
		"network.delay on n1: train/llm-worker-0 on n1 (llm rank 0), train/llm-worker-1 on n1 (llm rank 1)",
		"network.delay on n2: train/llm-worker-2 on n2 (llm rank 2)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run does not say %q:\n%s", want, out)
		}
	}
	code, out, errs = runCLI(t, "", "run", file, "--target", "k8s", "--dry-run", "--format", "json", "--kubeconfig", env.Kubeconfig)
	if code != 0 {
		t.Fatalf("json: exit %d; stderr:\n%s", code, errs)
	}
	var plan struct {
		Injections []struct {
			Key string `json:"key"`
		} `json:"injections"`
		Pods map[string][]struct {
			Node, Pod, PodUID string
		} `json:"pods"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(plan.Injections) != 2 || len(plan.Pods[plan.Injections[0].Key]) != 2 || len(plan.Pods[plan.Injections[1].Key]) != 1 || plan.Pods[plan.Injections[1].Key][0].PodUID == "" {
		t.Errorf("JSON plan %+v, want 2 injections reaching 2 and 1 pods with their uids", plan)
	}
}
