package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// KWOKVersion is the kwok scripts/setup-kwok builds; [KWOKBinary] looks in
// the folder named after it.
const KWOKVersion = "v0.8.0"

// KWOKEnv names a kwok binary to use instead of the setup-kwok build.
const KWOKEnv = "GPUCHAOS_KWOK"

// KWOKAnnotation marks a Node as fake: [Env.StartKWOK]'s kwok manages
// exactly the Nodes carrying it with the value "fake" and leaves every
// other Node alone, so a test may mix fake nodes with ones it drives
// itself.
const KWOKAnnotation = "kwok.x-k8s.io/node"

// GPUResource is the extended resource NVIDIA's device plugin advertises.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// KWOKBinary returns the kwok binary: $GPUCHAOS_KWOK when set, otherwise
// the one scripts/setup-kwok builds into
// ${GPUCHAOS_CACHE:-$HOME/.cache/gpuchaos}/kube/kwok-V/bin.
func KWOKBinary() (string, error) {
	path := os.Getenv(KWOKEnv)
	if path == "" {
		cache, err := cacheDir()
		if err != nil {
			return "", err
		}
		path = filepath.Join(cache, "kube", "kwok-"+KWOKVersion, "bin", "kwok")
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return path, fmt.Errorf("kwok missing at %s", path)
	}
	return path, nil
}

// kwokStages is kwok's configuration: without stages kwok changes
// nothing. A fake node turns Ready once, as a kubelet that registered
// would report it, and stays so: these tests run no node lifecycle
// controller by default, so no heartbeat is needed and the API server's
// load is the code under test's, not thousands of status updates. A pod
// bound to a fake node starts running, and one being deleted is removed,
// as a kubelet would once its containers stopped; without that a pod on
// a fake node would stay Terminating forever.
const kwokStages = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodePlayStageParallelism: %[1]d
  podPlayStageParallelism: %[1]d
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpuchaos-node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select(.type == "Ready") | .status'
      operator: NotIn
      values: ["True"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      conditions:
      - type: Ready
        status: "True"
        reason: KubeletReady
        message: "fake node, kept by kwok for gpuchaos tests"
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: {{ printf "kwok-%%s" Version | Quote }}
        containerRuntimeVersion: {{ printf "kwok-%%s" Version | Quote }}
        kernelVersion: ""
        kubeProxyVersion: ""
        osImage: ""
        bootID: ""
        machineID: ""
        systemUUID: ""
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpuchaos-pod-running
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: NotIn
      values: ["Running", "Succeeded", "Failed"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      startTime: {{ $now | Quote }}
      conditions:
      {{ range list "PodScheduled" "Initialized" "ContainersReady" "Ready" }}
      - type: {{ . }}
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        imageID: ""
        ready: true
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpuchaos-pod-gone
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
  next:
    finalizers:
      empty: true
    delete: true
`

// KWOKOptions configure [Env.StartKWOK]. The zero value suits most tests.
type KWOKOptions struct {
	// Parallelism is how many nodes, and how many pods, kwok moves through
	// a stage at once; 0 means 16.
	Parallelism int
}

// StartKWOK runs kwok against e's API server, managing the Nodes that
// carry [KWOKAnnotation]=fake: they turn Ready and pods bound to them run.
// kwok serves no port (no --server-address, no --node-port), so it only
// talks to the API server on loopback. It is stopped (SIGTERM, then
// SIGKILL) when t ends; if it exits before then, t fails. Without the
// binary t is skipped, or fails when [RequireEnv] is set.
func (e *Env) StartKWOK(t testing.TB, opts KWOKOptions) {
	t.Helper()
	bin, err := KWOKBinary()
	if err != nil {
		Missing(t, fmt.Sprintf("fake nodes need kwok: %v (run scripts/setup-kwok, which scripts/setup-kube runs)", err))
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = 16
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "kwok.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, kwokStages, opts.Parallelism), 0o600); err != nil {
		t.Fatalf("write kwok's configuration: %v", err)
	}
	args := []string{
		"--config=" + config,
		"--kubeconfig=" + e.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KWOKAnnotation + "=fake",
	}
	out, _, err := e.logFile(t, "kwok")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// kwok reads $HOME/.kwok/kwok.yaml before --config when it exists; a
	// HOME of its own keeps a developer's file out of the tests.
	cmd.Env = append(os.Environ(), "HOME="+dir)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start kwok: %v", err)
	}
	exited := make(chan struct{})
	stopping := make(chan struct{})
	go func() {
		err := cmd.Wait()
		select {
		case <-stopping:
		default:
			t.Errorf("kwok exited while the test ran: %v (its log follows the test's)", err)
		}
		close(exited)
	}()
	t.Cleanup(func() {
		close(stopping)
		cancel()
		<-exited
	})
	e.kwokExited = exited
}

// FakeGPUNode returns a Node as a GPU node would register it with the
// agent running: gpus nvidia.com/gpu in capacity and allocatable, the
// usual instance labels, gpuchaos's GPU report annotation with one
// GPUReport per GPU, and [KWOKAnnotation] so kwok manages it. The caller
// may change it before creating it.
func FakeGPUNode(name string, gpus int) *corev1.Node {
	reports := make([]v1alpha1.GPUReport, gpus)
	for i := range reports {
		reports[i] = v1alpha1.GPUReport{
			Index: i,
			UUID:  fmt.Sprintf("GPU-%s-%d", name, i),
			BusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+i),
			Model: "NVIDIA H100 80GB HBM3",
		}
	}
	gpuJSON, err := json.Marshal(reports)
	if err != nil {
		panic(err) // a slice of plain structs always encodes
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("96"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("110"),
		GPUResource:           *resource.NewQuantity(int64(gpus), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname":           name,
				"kubernetes.io/os":                 "linux",
				"kubernetes.io/arch":               "amd64",
				"node.kubernetes.io/instance-type": "p5.48xlarge",
				"nvidia.com/gpu.present":           "true",
				"nvidia.com/gpu.count":             strconv.Itoa(gpus),
				"nvidia.com/gpu.product":           "NVIDIA-H100-80GB-HBM3",
				"type":                             "kwok",
			},
			Annotations: map[string]string{
				KWOKAnnotation:          "fake",
				v1alpha1.AnnotationGPUs: string(gpuJSON),
			},
		},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res.DeepCopy()},
	}
}

// FakeNodeNames returns n node names, prefix-00000 up, zero-padded so
// they sort in creation order.
func FakeNodeNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return names
}

// CreateNodes creates every node with at most parallel creates in flight
// (0 means 32): one at a time, 5,000 nodes would take minutes of round
// trips; unbounded, they would queue in the API server's inflight limit
// and fail.
func CreateNodes(ctx context.Context, c client.Client, nodes []*corev1.Node, parallel int) error {
	return Parallel(ctx, len(nodes), parallel, func(ctx context.Context, i int) error {
		if err := c.Create(ctx, nodes[i]); err != nil {
			return fmt.Errorf("create node %s: %w", nodes[i].Name, err)
		}
		return nil
	})
}

// Parallel calls fn for 0..n-1 with at most limit calls running (0 means
// 32), as a controller writes many objects. The first error cancels the
// context the other calls get; Parallel returns it once every call has
// returned.
func Parallel(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	if limit <= 0 {
		limit = 32
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
		slots    = make(chan struct{}, limit)
	)
	fail := func(err error) {
		once.Do(func() {
			firstErr = err
			cancel()
		})
	}
	for i := range n {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			fail(ctx.Err())
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := fn(ctx, i); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	return firstErr
}

// CreateFakeGPUNodes creates n [FakeGPUNode]s of 8 GPUs named
// [FakeNodeNames](prefix, n), failing t on any error, and returns their
// names and how long creating them took.
func (e *Env) CreateFakeGPUNodes(t testing.TB, prefix string, n int) ([]string, time.Duration) {
	t.Helper()
	names := FakeNodeNames(prefix, n)
	nodes := make([]*corev1.Node, n)
	for i, name := range names {
		nodes[i] = FakeGPUNode(name, 8)
	}
	began := time.Now()
	if err := CreateNodes(context.Background(), e.Client, nodes, 0); err != nil {
		t.Fatal(err)
	}
	return names, time.Since(began)
}

// WaitNodesReady waits, up to within, until every named Node reports
// Ready=True, and fails t naming how many are not. It lists the Nodes
// rather than getting each, so polling thousands costs one request a
// round.
func (e *Env) WaitNodesReady(t testing.TB, names []string, within time.Duration) {
	t.Helper()
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	notReady := len(names)
	testutil.Eventually(t, within, fmt.Sprintf("%d nodes to be Ready", len(names)), func() bool {
		if e.kwokExited != nil {
			select {
			case <-e.kwokExited:
				t.Fatalf("kwok exited with %d of %d nodes not Ready", notReady, len(names))
			default:
			}
		}
		var list corev1.NodeList
		if err := e.Client.List(context.Background(), &list); err != nil {
			t.Fatalf("list nodes: %v", err)
		}
		notReady = len(names)
		for i := range list.Items {
			if want[list.Items[i].Name] && NodeReady(&list.Items[i]) {
				notReady--
			}
		}
		return notReady == 0
	})
}

// NodeReady says whether n's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
