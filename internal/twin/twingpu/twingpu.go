// Package twingpu reads a twin node's GPUs through gpu.Source, so the
// agent serves a twin exactly as it serves NVML.
package twingpu

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/series"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// Access runs fn with exclusive access to a twin, which is not safe
// for concurrent use. (*live.Runner).WithTwin is one; Locked makes one
// for a twin that nothing else drives.
type Access func(fn func(*twin.Twin))

// Locked returns a Access that guards tw with a mutex of its own.
// Use it only when every other user of tw goes through the same access.
func Locked(tw *twin.Twin) Access {
	var mu sync.Mutex
	return func(fn func(*twin.Twin)) {
		mu.Lock()
		defer mu.Unlock()
		fn(tw)
	}
}

// twinField says where one dcgm-exporter series of the twin lands in a
// Sample. Every series the twin exports is already in dcgm-exporter's
// unit, so values are copied as they are.
type twinField struct {
	metric string
	set    func(s *gpu.Sample, v float64)
}

func twinFields() []twinField {
	return []twinField{
		{"DCGM_FI_DEV_SM_CLOCK", func(s *gpu.Sample, v float64) { s.SMClockMHz = v }},
		{"DCGM_FI_DEV_MEM_CLOCK", func(s *gpu.Sample, v float64) { s.MemClockMHz = v }},
		{"DCGM_FI_DEV_GPU_TEMP", func(s *gpu.Sample, v float64) { s.TempC = v }},
		{"DCGM_FI_DEV_MEMORY_TEMP", func(s *gpu.Sample, v float64) { s.MemTempC = v }},
		{"DCGM_FI_DEV_POWER_USAGE", func(s *gpu.Sample, v float64) { s.PowerW = v }},
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", func(s *gpu.Sample, v float64) { s.EnergyMJ = v }},
		{"DCGM_FI_DEV_GPU_UTIL", func(s *gpu.Sample, v float64) { s.UtilGPU = v }},
		{"DCGM_FI_DEV_MEM_COPY_UTIL", func(s *gpu.Sample, v float64) { s.UtilMem = v }},
		{"DCGM_FI_DEV_FB_USED", func(s *gpu.Sample, v float64) { s.FBUsedMiB = v }},
		{"DCGM_FI_DEV_FB_FREE", func(s *gpu.Sample, v float64) { s.FBFreeMiB = v }},
		{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", func(s *gpu.Sample, v float64) { s.PCIeReplays = v }},
		{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", func(s *gpu.Sample, v float64) { s.RemappedCorrectable = v }},
		{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", func(s *gpu.Sample, v float64) { s.RemappedUncorrectable = v }},
		{"DCGM_FI_DEV_ROW_REMAP_FAILURE", func(s *gpu.Sample, v float64) { s.RemapFailure = v }},
		{"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", func(s *gpu.Sample, v float64) {
			s.ClockEventReasons, s.HasClockEventReasons = uint64(v), true
		}},
	}
}

// twinSource is the Source over one node of a twin. devs and series are
// fixed at construction: the twin creates every series when it is built.
type twinSource struct {
	access Access
	fields []twinField
	devs   []gpu.Device
	// series[i][f] is device i's series of fields[f], nil when the twin's
	// exporter does not export that field.
	series [][]*series.Series
	closed atomic.Bool
}

// New returns a Source that reads node's GPUs off the twin behind
// access: each Sample is the newest value the twin's exporter scraped, in
// the twin's virtual time. A GPU the twin has put off the bus (its series
// stale) is lost; a field the twin's exporter does not export is missing.
// Close does nothing to the twin.
func New(access Access, node string) (gpu.Source, error) {
	if access == nil {
		return nil, fmt.Errorf("twin gpu source: nil twin access")
	}
	s := &twinSource{access: access, fields: twinFields()}
	var err error
	access(func(tw *twin.Twin) { err = s.build(tw, node) })
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *twinSource) build(tw *twin.Twin, node string) error {
	spec := tw.Spec()
	var ns *twin.NodeSpec
	for i := range spec.Nodes.List {
		if spec.Nodes.List[i].Name == node {
			ns = &spec.Nodes.List[i]
		}
	}
	if ns == nil {
		return fmt.Errorf("twin gpu source: node %q: %w", node, twin.ErrUnknownTarget)
	}
	memMiB := math.NaN()
	if m, err := twin.Preset(ns.Model); err == nil {
		memMiB = m.MemoryMiB
	}
	for _, n := range tw.Inventory().Nodes {
		if n.Name != node {
			continue
		}
		// The spec splits a node's GPUs evenly over its sockets, lowest
		// indices on socket 0 (NodesSpec.NUMASockets).
		perSocket := max(1, (len(n.GPUs)+ns.NUMASockets-1)/max(1, ns.NUMASockets))
		for _, g := range n.GPUs {
			s.devs = append(s.devs, gpu.Device{
				Index: g.Index, UUID: g.UUID, PCI: g.PCI, Name: g.Model,
				MemoryTotalMiB: memMiB, NUMANode: g.Index / perSocket,
			})
		}
	}
	s.series = make([][]*series.Series, len(s.devs))
	for i, d := range s.devs {
		s.series[i] = make([]*series.Series, len(s.fields))
		idx := strconv.Itoa(d.Index)
		for f, fl := range s.fields {
			for _, se := range tw.Select(fl.metric) {
				if se.Labels.Get("Hostname") == node && se.Labels.Get("gpu") == idx {
					s.series[i][f] = se
					break
				}
			}
		}
	}
	return nil
}

func (s *twinSource) Devices(ctx context.Context) ([]gpu.Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, gpu.ErrClosed
	}
	out := make([]gpu.Device, len(s.devs))
	copy(out, s.devs)
	return out, nil
}

func (s *twinSource) Sample(ctx context.Context, index int) (gpu.Sample, error) {
	if err := ctx.Err(); err != nil {
		return gpu.Sample{}, err
	}
	if s.closed.Load() {
		return gpu.Sample{}, gpu.ErrClosed
	}
	pos := -1
	for i, d := range s.devs {
		if d.Index == index {
			pos = i
		}
	}
	if pos < 0 {
		return gpu.Sample{}, fmt.Errorf("sample twin gpu %d: %w", index, gpu.ErrNoDevice)
	}
	// The time is the newest scrape among the fields, set below.
	smp := gpu.BlankSample(time.Time{})
	exported, fresh := 0, 0
	s.access(func(*twin.Twin) {
		for f, se := range s.series[pos] {
			if se == nil {
				continue
			}
			exported++
			n := len(se.Samples)
			if n == 0 || series.IsStale(se.Samples[n-1].V) {
				continue
			}
			last := se.Samples[n-1]
			fresh++
			s.fields[f].set(&smp, last.V)
			if t := last.Time(); t.After(smp.Time) {
				smp.Time = t
			}
		}
	})
	if exported > 0 && fresh == 0 {
		return gpu.Sample{}, fmt.Errorf("sample twin gpu %d: %w", index, gpu.ErrGPULost)
	}
	return smp, nil
}

func (s *twinSource) Close() error {
	s.closed.Store(true)
	return nil
}

// Processes lists no process: the twin's GPUs run simulated jobs, not
// processes of this machine.
func (s *twinSource) Processes(ctx context.Context, index int) ([]gpu.Process, error) {
	devs, err := s.Devices(ctx)
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		if d.Index == index {
			return nil, nil
		}
	}
	return nil, fmt.Errorf("list processes of gpu %d: %w", index, gpu.ErrNoDevice)
}
