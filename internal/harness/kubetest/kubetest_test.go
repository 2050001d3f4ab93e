package kubetest_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// The folder Assets looks in is named from the package's versions, so
// they must be the versions scripts/setup-kube builds.
func TestVersionsMatchSetupScript(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("../../../scripts/setup-kube")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, variable, want string }{
		{"kubernetes", "kube_version", kubetest.KubeVersion},
		{"etcd", "etcd_version", kubetest.EtcdVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := regexp.MustCompile(`(?m)^` + tc.variable + `=(\S+)$`).FindSubmatch(script)
			if m == nil {
				t.Fatalf("scripts/setup-kube sets no %s", tc.variable)
			}
			if got := string(m[1]); got != tc.want {
				t.Errorf("scripts/setup-kube builds %s %s, kubetest expects %s", tc.name, got, tc.want)
			}
		})
	}
}

// Assets prefers KUBEBUILDER_ASSETS, falls back on the folder setup-kube
// builds into under GPUCHAOS_CACHE, and names every binary it lacks.
func TestAssets(t *testing.T) {
	cache := t.TempDir()
	built := filepath.Join(cache, "kube", "kubernetes-"+kubetest.KubeVersion+"-etcd-"+kubetest.EtcdVersion, "bin")
	other := t.TempDir()
	for _, dir := range []string{built, other} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range []string{"kube-apiserver", "etcd", "kube-controller-manager"} {
			if err := os.WriteFile(filepath.Join(dir, b), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	partial := t.TempDir()
	if err := os.WriteFile(filepath.Join(partial, "etcd"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "kube-apiserver"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, assets, cache string
		want                string
		wantErr             string
	}{
		{name: "setup-kube folder", cache: cache, want: built},
		{name: "KUBEBUILDER_ASSETS first", assets: other, cache: cache, want: other},
		{name: "not executable and missing", assets: partial, want: partial,
			wantErr: "kube-apiserver, kube-controller-manager missing in " + partial},
		{name: "nothing built", cache: t.TempDir(), wantErr: "kube-apiserver, etcd, kube-controller-manager missing in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBEBUILDER_ASSETS", tc.assets)
			t.Setenv("GPUCHAOS_CACHE", tc.cache)
			got, err := kubetest.Assets()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Assets() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Assets() = %s, want %s", got, tc.want)
			}
		})
	}
}

// A GPU node as a kubelet with the NVIDIA device plugin registers it,
// read back through a real client and watched as it is cordoned.
func TestNodeThroughRealAPIServer(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t, kubetest.Options{})
	ctx := t.Context()

	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if v.GitVersion != kubetest.KubeVersion {
		t.Errorf("API server is %s, want %s", v.GitVersion, kubetest.KubeVersion)
	}

	gpus := resource.MustParse("8")
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "gpu-node-0",
			Labels: map[string]string{
				"nvidia.com/gpu.product": "NVIDIA-H200",
				"nvidia.com/gpu.count":   "8",
			},
		},
		// A kubelet registers its node with status in the one create.
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{"nvidia.com/gpu": gpus, corev1.ResourceCPU: resource.MustParse("96")},
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": gpus, corev1.ResourceCPU: resource.MustParse("96")},
		},
	}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatalf("create node: %v", err)
	}

	var nodes corev1.NodeList
	if err := env.Client.List(ctx, &nodes, client.MatchingLabels{"nvidia.com/gpu.product": "NVIDIA-H200"}); err != nil {
		t.Fatalf("list nodes by label: %v", err)
	}
	if len(nodes.Items) != 1 {
		t.Fatalf("listed %d H200 nodes, want 1", len(nodes.Items))
	}
	got := nodes.Items[0]
	if q := got.Status.Capacity["nvidia.com/gpu"]; q.Cmp(gpus) != 0 {
		t.Errorf("capacity nvidia.com/gpu = %s, want %s", q.String(), gpus.String())
	}
	if q := got.Status.Allocatable["nvidia.com/gpu"]; q.Cmp(gpus) != 0 {
		t.Errorf("allocatable nvidia.com/gpu = %s, want %s", q.String(), gpus.String())
	}
	if got.Spec.Unschedulable {
		t.Fatal("a new node is unschedulable")
	}

	// Watch from the version read, so the cordon cannot slip in between.
	w, err := env.Client.Watch(ctx, &corev1.NodeList{}, &client.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", got.Name),
		Raw:           &metav1.ListOptions{ResourceVersion: nodes.ResourceVersion},
	})
	if err != nil {
		t.Fatalf("watch node: %v", err)
	}
	defer w.Stop()

	// kubectl cordon sends this merge patch.
	cordon := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`))
	if err := env.Client.Patch(ctx, &got, cordon); err != nil {
		t.Fatalf("cordon: %v", err)
	}
	deadline := time.After(30 * time.Second)
	for cordoned := false; !cordoned; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed before the cordon arrived")
			}
			if ev.Type == watch.Error {
				t.Fatalf("watch error: %v", apierrors.FromObject(ev.Object))
			}
			n, isNode := ev.Object.(*corev1.Node)
			cordoned = ev.Type == watch.Modified && isNode && n.Spec.Unschedulable
		case <-deadline:
			t.Fatal("the cordon did not arrive on the watch within 30 s")
		}
	}
}

// Garbage collection is kube-controller-manager's, not the API server's:
// a foreground deletion leaves the owner waiting on its dependents until
// the garbage collector runs, then both go.
func TestGarbageCollectionNeedsControllerManager(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t, kubetest.Options{})
	ctx := t.Context()

	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "owner"}}
	if err := env.Client.Create(ctx, owner); err != nil {
		t.Fatalf("create owner: %v", err)
	}
	yes := true
	owned := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default",
		Name:      "owned",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion:         "v1",
			Kind:               "ConfigMap",
			Name:               owner.Name,
			UID:                owner.UID,
			BlockOwnerDeletion: &yes,
		}},
	}}
	if err := env.Client.Create(ctx, owned); err != nil {
		t.Fatalf("create owned: %v", err)
	}
	if err := env.Client.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatalf("delete owner: %v", err)
	}

	// The API server alone only marks the owner: deletion timestamp and
	// the foregroundDeletion finalizer, dependents untouched.
	var cm corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(owner), &cm); err != nil {
		t.Fatalf("owner after a foreground delete without a garbage collector: %v", err)
	}
	if cm.DeletionTimestamp == nil || len(cm.Finalizers) != 1 || cm.Finalizers[0] != metav1.FinalizerDeleteDependents {
		t.Fatalf("owner after a foreground delete: deletionTimestamp %v, finalizers %v; want set and [%s]",
			cm.DeletionTimestamp, cm.Finalizers, metav1.FinalizerDeleteDependents)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(owned), &cm); err != nil {
		t.Fatalf("owned object without a garbage collector: %v", err)
	}

	env.StartControllerManager(t, "garbage-collector-controller")
	for _, obj := range []*corev1.ConfigMap{owned, owner} {
		testutil.Eventually(t, 60*time.Second, "the garbage collector to delete configmap "+obj.Name, func() bool {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), &cm)
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("get configmap %s: %v", obj.Name, err)
			}
			return apierrors.IsNotFound(err)
		})
	}
}

// Stopping the API server makes requests fail; starting it again brings
// back the same objects on the same address, and the kubeconfig a process
// was given still reaches it.
func TestRestartAPIServer(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t, kubetest.Options{})
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "survives"}, Data: map[string]string{"k": "v"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatalf("create: %v", err)
	}
	host := env.Config.Host

	env.StopAPIServer(t)
	var got corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), &got); err == nil {
		t.Fatal("a stopped API server answered a get")
	}

	env.StartAPIServer(t)
	if env.Config.Host != host {
		t.Errorf("host moved from %s to %s", host, env.Config.Host)
	}
	// A fresh client from the kubeconfig file, as a process under test
	// would build, proves the certificates and port unchanged.
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatalf("read the kubeconfig: %v", err)
	}
	fresh, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []client.Client{env.Client, fresh} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
			t.Fatalf("get after restart: %v", err)
		}
		if got.Data["k"] != "v" {
			t.Fatalf("after restart data = %v, want k=v (same etcd)", got.Data)
		}
	}
}
