package numa

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

func TestAlign(t *testing.T) {
	t.Parallel()
	topo, err := ReadTopology(writeTree(t, twoSockets()))
	if err != nil {
		t.Fatal(err)
	}
	local0 := append(seq(0, 55), seq(112, 167)...)
	all := seq(0, 223)
	gib := uint64(1 << 30)
	cases := []struct {
		name       string
		gpuNode    int
		cpus       []int
		bytes      map[int]uint64
		remoteCPUs int
		memRatio   float64
		misaligned bool
	}{
		{name: "pinned to the gpu's socket, memory there", gpuNode: 0, cpus: local0, bytes: map[int]uint64{0: 4 * gib},
			memRatio: 0, misaligned: false},
		{name: "same process, gpu on the other socket", gpuNode: 1, cpus: local0, bytes: map[int]uint64{0: 4 * gib},
			remoteCPUs: 112, memRatio: 1, misaligned: true},
		{name: "unpinned: half its cpus are far", gpuNode: 0, cpus: all, bytes: map[int]uint64{0: 4 * gib},
			remoteCPUs: 112, memRatio: 0, misaligned: true},
		{name: "pinned right, memory migrated away", gpuNode: 0, cpus: local0, bytes: map[int]uint64{0: gib, 1: 3 * gib},
			memRatio: 0.75, misaligned: true},
		{name: "pinned right, a little memory far", gpuNode: 0, cpus: local0, bytes: map[int]uint64{0: 3 * gib, 1: gib},
			memRatio: 0.25, misaligned: false},
		{name: "nothing resident yet", gpuNode: 1, cpus: seq(56, 111), bytes: nil, memRatio: 0, misaligned: false},
		{name: "gpu on a node that is not online", gpuNode: 3, cpus: local0, bytes: map[int]uint64{0: gib},
			remoteCPUs: 112, memRatio: 1, misaligned: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := Align(topo, c.gpuNode, c.cpus, Placement{Bytes: c.bytes})
			if a.RemoteCPUs != c.remoteCPUs || a.CPUs != len(c.cpus) {
				t.Errorf("remote cpus %d of %d, want %d of %d", a.RemoteCPUs, a.CPUs, c.remoteCPUs, len(c.cpus))
			}
			if got := a.RemoteMemoryRatio(); got != c.memRatio {
				t.Errorf("remote memory ratio %v, want %v", got, c.memRatio)
			}
			if got := a.Misaligned(); got != c.misaligned {
				t.Errorf("misaligned %v, want %v (%+v)", got, c.misaligned, a)
			}
		})
	}
}

// TestCheckProcessReal judges a real process pinned to node 0's CPUs with
// its memory on node 0: aligned for a GPU on node 0, misaligned for a GPU
// said to be on node 1 (this machine has one node; the GPU's node is the
// detector's input, so claiming it is a fair test of the verdict).
func TestCheckProcessReal(t *testing.T) {
	t.Parallel()
	topo, err := ReadTopology("")
	if err != nil {
		t.Fatal(err)
	}
	n0, ok := topo.Node(0)
	if !ok {
		t.Skip("this machine has no node 0")
	}
	if len(topo.Nodes) > 1 {
		t.Skip("the claimed node 1 is real here; TestAlign covers the verdicts")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	set, err := SetOf(n0.CPUs)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SchedSetaffinity(cmd.Process.Pid, &set); err != nil {
		t.Fatal(err)
	}
	a, err := CheckProcess(topo, 0, cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if a.Misaligned() || a.RemoteCPUs != 0 || a.Bytes == 0 || a.RemoteBytes != 0 {
		t.Errorf("gpu on node 0: %+v, want aligned with memory on node 0", a)
	}
	a, err = CheckProcess(topo, 1, cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Misaligned() || a.RemoteCPURatio() != 1 || a.RemoteMemoryRatio() != 1 {
		t.Errorf("gpu said to be on node 1: %+v, want misaligned, every cpu and byte remote", a)
	}
	if _, err := CheckProcess(topo, -1, cmd.Process.Pid); err == nil {
		t.Error("an unknown gpu node was judged")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := CheckProcess(topo, 0, cmd.Process.Pid); err == nil {
		t.Error("a process that exited was judged")
	}
	if _, err := Affinity(os.Getpid()); err != nil {
		t.Errorf("own affinity: %v", err)
	}
}
