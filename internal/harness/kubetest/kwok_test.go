package kubetest_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// KWOKBinary looks in the folder named after KWOKVersion, so the version
// must be the one scripts/setup-kwok builds.
func TestKWOKVersionMatchesSetupScript(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("../../../scripts/setup-kwok")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^kwok_version=(\S+)$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/setup-kwok sets no kwok_version")
	}
	if got := string(m[1]); got != kubetest.KWOKVersion {
		t.Errorf("scripts/setup-kwok builds kwok %s, kubetest expects %s", got, kubetest.KWOKVersion)
	}
}

func TestKWOKBinary(t *testing.T) {
	cache := t.TempDir()
	built := filepath.Join(cache, "kube", "kwok-"+kubetest.KWOKVersion, "bin", "kwok")
	if err := os.MkdirAll(filepath.Dir(built), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(built, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(t.TempDir(), "kwok")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, env, cache, want string
		wantErr                bool
	}{
		{name: "setup-kwok folder", cache: cache, want: built},
		{name: "GPUCHAOS_KWOK first", env: built, cache: t.TempDir(), want: built},
		{name: "not executable", env: plain, cache: cache, want: plain, wantErr: true},
		{name: "not built", cache: t.TempDir(), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(kubetest.KWOKEnv, tc.env)
			t.Setenv("GPUCHAOS_CACHE", tc.cache)
			got, err := kubetest.KWOKBinary()
			if (err != nil) != tc.wantErr {
				t.Fatalf("KWOKBinary() = %q, %v; want error %v", got, err, tc.wantErr)
			}
			if tc.want != "" && got != tc.want {
				t.Errorf("KWOKBinary() = %q, want %q", got, tc.want)
			}
		})
	}
}

// FakeGPUNode carries what the controller's inventory reads: 8 GPUs of
// capacity and allocatable, and a GPU report with 8 distinct GPUs.
func TestFakeGPUNode(t *testing.T) {
	t.Parallel()
	n := kubetest.FakeGPUNode("gpu-7", 8)
	for _, rl := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		if q := rl[kubetest.GPUResource]; q.Value() != 8 {
			t.Errorf("%s = %s, want 8", kubetest.GPUResource, q.String())
		}
	}
	var reports []v1alpha1.GPUReport
	if err := json.Unmarshal([]byte(n.Annotations[v1alpha1.AnnotationGPUs]), &reports); err != nil {
		t.Fatalf("annotation %s: %v", v1alpha1.AnnotationGPUs, err)
	}
	uuids := map[string]bool{}
	for i, r := range reports {
		if r.Index != i || r.UUID == "" {
			t.Errorf("report %d = %+v", i, r)
		}
		uuids[r.UUID] = true
	}
	if len(reports) != 8 || len(uuids) != 8 {
		t.Errorf("%d reports, %d distinct UUIDs; want 8 and 8", len(reports), len(uuids))
	}
	if n.Annotations[kubetest.KWOKAnnotation] != "fake" {
		t.Errorf("annotation %s = %q, want fake", kubetest.KWOKAnnotation, n.Annotations[kubetest.KWOKAnnotation])
	}
}

// kwok turns the 50 fake nodes Ready, which nothing else in a bare control
// plane would, and leaves a node without its annotation alone; a pod bound
// to a fake node runs, and a deleted one goes away instead of staying
// Terminating with no kubelet to finish it.
func TestKWOKManagesFakeNodes(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	env.StartKWOK(t, kubetest.KWOKOptions{})
	ctx := context.Background()

	real := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "not-fake"}}
	if err := env.Client.Create(ctx, real); err != nil {
		t.Fatal(err)
	}
	names, took := env.CreateFakeGPUNodes(t, "gpu", 50)
	t.Logf("created %d fake nodes in %s", len(names), took.Round(time.Millisecond))
	env.WaitNodesReady(t, names, 60*time.Second)

	var list corev1.NodeList
	if err := env.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		n := &list.Items[i]
		if n.Name == real.Name {
			if kubetest.NodeReady(n) {
				t.Errorf("node %s has no %s annotation but kwok made it Ready", n.Name, kubetest.KWOKAnnotation)
			}
			continue
		}
		// kwok patches status; what the agent reported must survive it.
		if q := n.Status.Allocatable[kubetest.GPUResource]; q.Value() != 8 {
			t.Errorf("node %s allocatable %s = %s after kwok, want 8", n.Name, kubetest.GPUResource, q.String())
		}
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer-0", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   names[3],
			Containers: []corev1.Container{{Name: "train", Image: "example.invalid/train:1"}},
		},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(pod)
	testutil.Eventually(t, 60*time.Second, "the pod on a fake node to run", func() bool {
		if err := env.Client.Get(ctx, key, pod); err != nil {
			t.Fatal(err)
		}
		return pod.Status.Phase == corev1.PodRunning
	})
	if err := env.Client.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the deleted pod to be gone", func() bool {
		err := env.Client.Get(ctx, key, pod)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return apierrors.IsNotFound(err)
	})
}
