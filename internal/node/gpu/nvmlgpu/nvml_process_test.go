//go:build cgo

package nvmlgpu

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
)

func TestNVMLProcesses(t *testing.T) {
	t.Parallel()
	s := newH200(t, busyGPU)
	answers := map[int]struct {
		infos []nvml.ProcessInfo
		ret   nvml.Return
	}{
		0: {infos: []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 2 << 30}, {Pid: 4243, UsedGpuMemory: math.MaxUint64}}},
		1: {infos: nil},
		2: {ret: nvml.ERROR_GPU_IS_LOST},
		3: {ret: nvml.ERROR_UNKNOWN},
	}
	for i, d := range s.Devices {
		a := answers[i]
		d.(*server.Device).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return a.infos, a.ret }
	}
	src := openMock(t, s)
	ctx := context.Background()
	cases := []struct {
		name  string
		index int
		want  []gpu.Process
		err   error
		fails bool
	}{
		{name: "two ranks, one without a memory figure", index: 0, want: []gpu.Process{{PID: 4242, UsedMiB: 2048}, {PID: 4243, UsedMiB: math.NaN()}}},
		{name: "idle gpu", index: 1, want: []gpu.Process{}},
		{name: "lost gpu", index: 2, err: gpu.ErrGPULost, fails: true},
		{name: "driver error", index: 3, fails: true},
		{name: "no such gpu", index: 99, err: gpu.ErrNoDevice, fails: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := src.Processes(ctx, c.index)
			if c.fails {
				if err == nil || (c.err != nil && !errors.Is(err, c.err)) {
					t.Fatalf("Processes(%d) = %v, %v, want error %v", c.index, got, err, c.err)
				}
				return
			}
			if err != nil || len(got) != len(c.want) {
				t.Fatalf("Processes(%d) = %v, %v, want %v", c.index, got, err, c.want)
			}
			for i, p := range got {
				w := c.want[i]
				if p.PID != w.PID || !(p.UsedMiB == w.UsedMiB || math.IsNaN(p.UsedMiB) && math.IsNaN(w.UsedMiB)) {
					t.Errorf("process %d: %+v, want %+v", i, p, w)
				}
			}
		})
	}
	var _ gpu.ProcessLister = src
	_ = src.Close()
	if _, err := src.Processes(ctx, 0); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
