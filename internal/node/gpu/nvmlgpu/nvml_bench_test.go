//go:build cgo

package nvmlgpu

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"
)

// openRealNVML opens the machine's NVML or skips: these benchmarks measure
// the driver, so there is nothing to measure without one. Build them for a
// GPU machine with `go test -c -o bin/gpu.test ./internal/node/gpu/nvmlgpu`
// and run `bin/gpu.test -test.run '^$' -test.bench NVML -test.benchtime
// 200x`.
func openRealNVML(b *testing.B) *nvmlSource {
	b.Helper()
	s, err := newNVML(nvml.New(), nil)
	if err != nil {
		b.Skipf("no NVML on this machine: %v", err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// threadCPU is the CPU time (user, system) the calling OS thread has used.
func threadCPU(b *testing.B) (user, sys time.Duration) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// cpuPerOp runs fn b.N times on one locked OS thread and reports the
// thread's CPU time per call, split into user (libnvidia-ml itself) and
// system (the ioctls into the driver), beside the wall time the harness
// reports. The agent's cost is CPU time, not wall time: a call that waits
// on the GPU costs the agent nothing.
func cpuPerOp(b *testing.B, fn func() nvml.Return) {
	b.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if ret := fn(); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
		b.Skipf("call fails here: %v", ret)
	}
	u0, s0 := threadCPU(b)
	b.ResetTimer()
	for b.Loop() {
		fn()
	}
	b.StopTimer()
	u1, s1 := threadCPU(b)
	n := float64(b.N)
	b.ReportMetric(float64(u1-u0)/n, "user-ns/op")
	b.ReportMetric(float64(s1-s0)/n, "sys-ns/op")
}

// BenchmarkNVMLCall measures each NVML call one agent sample makes, on
// GPU 0, to find where the agent's CPU goes.
func BenchmarkNVMLCall(b *testing.B) {
	s := openRealNVML(b)
	h := s.devs[0].h
	fields := []uint32{nvml.FI_DEV_MEMORY_TEMP, nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION, nvml.FI_DEV_PCIE_REPLAY_COUNTER,
		nvml.FI_DEV_REMAPPED_COR, nvml.FI_DEV_REMAPPED_UNC, nvml.FI_DEV_REMAPPED_FAILURE}
	calls := []struct {
		name string
		fn   func() nvml.Return
	}{
		{"ClockSM", func() nvml.Return { _, r := h.GetClockInfo(nvml.CLOCK_SM); return r }},
		{"ClockMem", func() nvml.Return { _, r := h.GetClockInfo(nvml.CLOCK_MEM); return r }},
		{"Temperature", func() nvml.Return { _, r := h.GetTemperature(nvml.TEMPERATURE_GPU); return r }},
		{"PowerUsage", func() nvml.Return { _, r := h.GetPowerUsage(); return r }},
		{"Utilization", func() nvml.Return { _, r := h.GetUtilizationRates(); return r }},
		{"MemoryInfoV2", func() nvml.Return { _, r := h.GetMemoryInfo_v2(); return r }},
		{"ClocksEventReasons", func() nvml.Return { _, r := h.GetCurrentClocksEventReasons(); return r }},
		{"FieldValues6", func() nvml.Return {
			fv := make([]nvml.FieldValue, len(fields))
			for i, id := range fields {
				fv[i].FieldId = id
			}
			return h.GetFieldValues(fv)
		}},
	}
	for _, c := range calls {
		b.Run(c.name, func(b *testing.B) { cpuPerOp(b, c.fn) })
	}
}

// BenchmarkNVMLSample measures one whole agent sample of GPU 0, the unit
// the agent repeats every interval for every GPU.
func BenchmarkNVMLSample(b *testing.B) {
	s := openRealNVML(b)
	ctx := context.Background()
	cpuPerOp(b, func() nvml.Return {
		if _, err := s.Sample(ctx, 0); err != nil {
			b.Fatalf("sample: %v", err)
		}
		return nvml.SUCCESS
	})
}

// BenchmarkNVMLField measures each field of the agent's one
// nvmlDeviceGetFieldValues call alone, and the direct calls that read the
// same things, to find the costly one.
func BenchmarkNVMLField(b *testing.B) {
	s := openRealNVML(b)
	h := s.devs[0].h
	fields := []struct {
		name string
		id   uint32
	}{
		{"MemoryTemp", nvml.FI_DEV_MEMORY_TEMP},
		{"TotalEnergy", nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION},
		{"PCIeReplay", nvml.FI_DEV_PCIE_REPLAY_COUNTER},
		{"RemappedCor", nvml.FI_DEV_REMAPPED_COR},
		{"RemappedUnc", nvml.FI_DEV_REMAPPED_UNC},
		{"RemappedFailure", nvml.FI_DEV_REMAPPED_FAILURE},
	}
	for _, f := range fields {
		b.Run("Field"+f.name, func(b *testing.B) {
			cpuPerOp(b, func() nvml.Return {
				fv := []nvml.FieldValue{{FieldId: f.id}}
				return h.GetFieldValues(fv)
			})
		})
	}
	b.Run("CallTotalEnergy", func(b *testing.B) {
		cpuPerOp(b, func() nvml.Return { _, r := h.GetTotalEnergyConsumption(); return r })
	})
	b.Run("CallRemappedRows", func(b *testing.B) {
		cpuPerOp(b, func() nvml.Return { _, _, _, _, r := h.GetRemappedRows(); return r })
	})
	b.Run("CallPcieReplay", func(b *testing.B) {
		cpuPerOp(b, func() nvml.Return { _, r := h.GetPcieReplayCounter(); return r })
	})
}
