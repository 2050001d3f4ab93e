package twin

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

const demoJob = "llm-pretrain"

// newTwin builds a twin or fails the test.
func newTwin(t testing.TB, opts Options) *Twin {
	t.Helper()
	tw, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tw
}

// oneNode is a single HGX H200 with one job on its eight GPUs, no
// variability and no checkpoint within a test's span, so step times and
// the GPUs' load are constant.
func oneNode() ClusterSpec {
	return ClusterSpec{
		Name:        "h200-1x8",
		Nodes:       NodesSpec{Count: 1, Model: "H200"},
		Variability: VariabilitySpec{Kind: "none"},
		Jobs:        []JobSpec{{Name: demoJob, GPUs: "all", CheckpointInterval: 24 * time.Hour}},
	}
}

func sleep(t testing.TB, tw *Twin, d time.Duration) {
	t.Helper()
	if err := tw.Sleep(context.Background(), d); err != nil {
		t.Fatalf("Sleep(%s): %v", d, err)
	}
}

func apply(t testing.TB, tw *Twin, key string, ref inventory.Ref, effects ...catalog.Effect) {
	t.Helper()
	if err := tw.Apply(key, ref, effects); err != nil {
		t.Fatalf("Apply(%s): %v", key, err)
	}
}

func revert(t testing.TB, tw *Twin, key string) {
	t.Helper()
	if err := tw.Revert(key); err != nil {
		t.Fatalf("Revert(%s): %v", key, err)
	}
}

func gpuRef(tw *Twin, node string, i int) inventory.Ref {
	g := tw.byNode[node].gpus[i]
	return inventory.Ref{Kind: catalog.ScopeGPU, Node: node, GPU: i, UUID: g.uuid, PCI: g.pci}
}

func rankRef(r int) inventory.Ref {
	return inventory.Ref{Kind: catalog.ScopeRank, Job: demoJob, Rank: r}
}

func jobRef() inventory.Ref { return inventory.Ref{Kind: catalog.ScopeJob, Job: demoJob} }

func nodeRef(n string) inventory.Ref { return inventory.Ref{Kind: catalog.ScopeNode, Node: n} }

func status(t testing.TB, tw *Twin) JobStatus {
	t.Helper()
	st, ok := tw.Job(demoJob)
	if !ok {
		t.Fatalf("job %s missing", demoJob)
	}
	return st
}

// gpuSeries returns the series of metric for one GPU, or nil.
func gpuSeries(tw *Twin, metric, node string, i int) *series.Series {
	for _, s := range tw.Select(metric) {
		if s.Labels.Get("Hostname") == node && s.Labels.Get("gpu") == strconv.Itoa(i) {
			return s
		}
	}
	return nil
}

// last returns the newest sample of a series (0 if none).
func last(s *series.Series) float64 {
	if s == nil || len(s.Samples) == 0 {
		return 0
	}
	return s.Samples[len(s.Samples)-1].V
}

func jobMetric(tw *Twin, metric string) float64 { return last(tw.Select(metric)[0]) }

// stepRate is steps per second over the next d of virtual time.
func stepRate(t testing.TB, tw *Twin, d time.Duration) float64 {
	t.Helper()
	before := status(t, tw).StepsComputed
	sleep(t, tw, d)
	return float64(status(t, tw).StepsComputed-before) / d.Seconds()
}

// nodeGPUAllocatable is the node's allocatable GPUs as kube-state-metrics
// exports them.
func nodeGPUAllocatable(t *testing.T, tw *Twin, node string) *series.Series {
	t.Helper()
	for _, s := range tw.Select("kube_node_status_allocatable") {
		if s.Labels.Get("node") == node && s.Labels.Get("resource") == "nvidia_com_gpu" {
			return s
		}
	}
	t.Fatalf("no allocatable GPUs of %s", node)
	return nil
}
