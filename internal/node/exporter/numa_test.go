package exporter

import (
	"context"
	"math"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/numa"
)

// placedSource is a gpu.Source and gpu.ProcessLister whose GPUs sit on
// the NUMA nodes given and all run the same processes. Only the GPU
// side is made up: the processes are real, and their placement is read
// from /proc.
type placedSource struct {
	nodes []int
	pids  []int
	lists atomic.Int32
}

func (s *placedSource) Devices(ctx context.Context) ([]gpu.Device, error) {
	out := make([]gpu.Device, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = gpu.Device{Index: i, UUID: "GPU-" + strconv.Itoa(i), PCI: "00000000:1" + strconv.Itoa(i) + ":00.0", Name: "NVIDIA H200", NUMANode: n}
	}
	return out, nil
}

func (s *placedSource) Sample(ctx context.Context, i int) (gpu.Sample, error) {
	return gpu.Sample{Time: time.Now(), TempC: 40, SMClockMHz: math.NaN()}, nil
}

func (s *placedSource) Processes(ctx context.Context, i int) ([]gpu.Process, error) {
	s.lists.Add(1)
	out := make([]gpu.Process, len(s.pids))
	for k, p := range s.pids {
		out[k] = gpu.Process{PID: p, UsedMiB: 1024}
	}
	return out, nil
}

func (s *placedSource) Close() error { return nil }

// TestNUMAAlignment runs a real process pinned to node 0 with its memory
// there, and lists it on three GPUs: one on node 0 (aligned), one said to
// be on node 1 (misaligned: the GPU's node is the detector's input, and
// this machine may have one node only), and one whose node is unknown (no
// series). A pid that has exited is left out.
func TestNUMAAlignment(t *testing.T) {
	t.Parallel()
	topo, err := numa.ReadTopology("")
	if err != nil {
		t.Fatal(err)
	}
	n0, ok := topo.Node(0)
	if !ok || len(topo.Nodes) != 1 {
		t.Skipf("written for a one-node machine; this one has nodes %v", topo.IDs())
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	set, err := numa.SetOf(n0.CPUs)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SchedSetaffinity(cmd.Process.Pid, &set); err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	src := &placedSource{nodes: []int{0, 1, -1}, pids: []int{cmd.Process.Pid, gone.Process.Pid}}
	a := newAgent(t, Options{Source: src, Hostname: "n", NUMAInterval: time.Hour})
	a.Collect(context.Background())
	fams := scrape(t, a)
	pid := strconv.Itoa(cmd.Process.Pid)
	cases := []struct {
		gpu                     string
		misaligned, memory, cpu float64
	}{
		{gpu: "0", misaligned: 0, memory: 0, cpu: 0},
		{gpu: "1", misaligned: 1, memory: 1, cpu: 1},
	}
	for _, c := range cases {
		want := map[string]string{"gpu": c.gpu, "pid": pid, "comm": "sleep"}
		for name, v := range map[string]float64{
			"gpuchaos_numa_misaligned":          c.misaligned,
			"gpuchaos_numa_remote_memory_ratio": c.memory,
			"gpuchaos_numa_remote_cpu_ratio":    c.cpu,
		} {
			m, ok := find(fams, name, want)
			if !ok {
				t.Errorf("no %s%v", name, want)
				continue
			}
			if got := value(m); got != v {
				t.Errorf("%s%v = %v, want %v", name, want, got, v)
			}
			if l := joined(labelNames(m)); l != "comm,gpu,pid" {
				t.Errorf("%s labels %s, want comm,gpu,pid", name, l)
			}
		}
	}
	if n := len(fams["gpuchaos_numa_misaligned"].GetMetric()); n != 2 {
		t.Errorf("%d misalignment series, want 2 (gpu 2's node is unknown, pid %d has exited)", n, gone.Process.Pid)
	}
	// The next pass waits for the interval: the processes are not listed
	// again on every sample.
	lists := src.lists.Load()
	a.Collect(context.Background())
	if src.lists.Load() != lists {
		t.Error("a second Collect within NUMAInterval listed the processes again")
	}
}

func TestNUMAAlignmentOff(t *testing.T) {
	t.Parallel()
	src := &placedSource{nodes: []int{0}, pids: []int{1}}
	a := newAgent(t, Options{Source: src, Hostname: "n"})
	a.Collect(context.Background())
	fams := scrape(t, a)
	if _, ok := fams["gpuchaos_numa_misaligned"]; ok || src.lists.Load() != 0 {
		t.Errorf("NUMA series without NUMAInterval (lists %d)", src.lists.Load())
	}
}
