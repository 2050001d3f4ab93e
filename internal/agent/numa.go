package agent

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/gpu"
	"github.com/gpuchaos/gpuchaos/internal/numa"
	"github.com/gpuchaos/gpuchaos/internal/textformat"
)

// DefaultNUMAInterval is the NUMA alignment interval the agent command
// uses: reading a large rank's /proc/PID/numa_maps walks its page tables,
// which is too dear for every second, and a misplacement lasts for minutes.
const DefaultNUMAInterval = 15 * time.Second

// numaState is the newest NUMA alignment pass, keyed by rendered labels.
// Guarded by Agent.mu.
type numaState struct {
	misaligned, remoteMemory, remoteCPU map[string]float64
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
	next := numaState{misaligned: map[string]float64{}, remoteMemory: map[string]float64{}, remoteCPU: map[string]float64{}}
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
			k := textformat.Labels("gpu", strconv.Itoa(d.Index), "pid", strconv.Itoa(p.PID), "comm", comm(p.PID))
			next.misaligned[k] = 0
			if al.Misaligned() {
				next.misaligned[k] = 1
			}
			next.remoteMemory[k] = al.RemoteMemoryRatio()
			next.remoteCPU[k] = al.RemoteCPURatio()
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
