package exporter

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/exposition"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/numa"
)

// DefaultNUMAInterval is the NUMA alignment interval the agent command
// uses: reading a large rank's /proc/PID/numa_maps walks its page tables,
// which is too dear for every second, and a misplacement lasts for minutes.
const DefaultNUMAInterval = 15 * time.Second

// numaState is the newest NUMA alignment pass; each Vec's labels are gpu,
// pid, comm. The zero value is no pass yet. Guarded by Agent.mu.
type numaState struct {
	misaligned, remoteMemory, remoteCPU *exposition.Vec
}

// collectNUMA judges every compute process on every GPU with a known NUMA
// node against that node, when NUMAInterval has passed since the last
// pass. A process that exits mid-pass is left out; a GPU that cannot list
// its processes keeps no series.
func (a *Agent) collectNUMA(ctx context.Context) {
	lister, ok := a.src.(gpu.ProcessLister)
	if a.numaEvery <= 0 || !ok {
		return
	}
	a.numaMu.Lock()
	defer a.numaMu.Unlock()
	now := time.Now()
	if !a.numaLast.IsZero() && now.Sub(a.numaLast) < a.numaEvery {
		return
	}
	a.numaLast = now
	topo, err := numa.ReadTopology(a.numaRoot)
	if err != nil {
		a.log.Warn("numa alignment: read topology", "err", err)
		return
	}
	names := []string{"gpu", "pid", "comm"}
	next := numaState{misaligned: exposition.NewVec(names...), remoteMemory: exposition.NewVec(names...), remoteCPU: exposition.NewVec(names...)}
	for _, d := range a.devs {
		if d.NUMANode < 0 {
			continue
		}
		procs, err := lister.Processes(ctx, d.Index)
		if err != nil {
			continue
		}
		for _, p := range procs {
			al, err := numa.CheckProcess(topo, d.NUMANode, p.PID)
			if err != nil {
				continue
			}
			k := []string{strconv.Itoa(d.Index), strconv.Itoa(p.PID), comm(p.PID)}
			misaligned := 0.0
			if al.Misaligned() {
				misaligned = 1
			}
			next.misaligned.Set(misaligned, k...)
			next.remoteMemory.Set(al.RemoteMemoryRatio(), k...)
			next.remoteCPU.Set(al.RemoteCPURatio(), k...)
		}
	}
	a.mu.Lock()
	a.numa = next
	a.mu.Unlock()
}

// comm is the process's command name, "" when it has gone.
func comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
