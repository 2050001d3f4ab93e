package numafault

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/numa"
)

// cpuset is what a rank's cpuset group lets it use. The kernel narrows a
// CPU mask to the cpuset's CPUs (sched_setaffinity fails with EINVAL when
// nothing is left) and migrate_pages to its memory nodes (EINVAL when
// nothing is left, silently otherwise), so the remote node is chosen
// within it. A Kubernetes pod's container has one (the static CPU
// manager's exclusive CPUs, or the shared pool), and so may a local job.
// The cpuset is never widened: that would be the pod's placement changed,
// not the fault.
type cpuset struct {
	// Group is the rank's cpuset group and Mount its hierarchy; both
	// empty when no cpuset controller is mounted, in which case CPUs and
	// Mems are nil and nothing is restricted.
	Group, Mount string
	CPUs, Mems   []int
}

// cpusetOf reads the effective CPUs and memory nodes of pid's cpuset
// group: v1's cpuset.effective_cpus and cpuset.effective_mems, or on v2
// cpuset.cpus.effective and cpuset.mems.effective of the nearest group at
// or above it that has the controller enabled.
func cpusetOf(pid int) (cpuset, error) {
	h, err := cgroup.Find("cpuset")
	if errors.Is(err, cgroup.ErrNoController) {
		return cpuset{}, nil
	}
	if err != nil {
		return cpuset{}, err
	}
	g, err := cgroup.GroupOf(h, pid, pid)
	if err != nil {
		return cpuset{}, fmt.Errorf("cpuset of pid %d: %w", pid, err)
	}
	cs := cpuset{Group: g, Mount: h.Mount}
	cpusFile, memsFile := "cpuset.cpus.effective", "cpuset.mems.effective"
	if h.Version == cgroup.V1 {
		cpusFile, memsFile = "cpuset.effective_cpus", "cpuset.effective_mems"
	}
	for dir := g; ; dir = path.Dir(dir) {
		cpus, err := readList(filepath.Join(h.Mount, dir, cpusFile))
		if errors.Is(err, os.ErrNotExist) && dir != "/" && h.Version == cgroup.V2 {
			continue // the controller is not enabled for this group
		}
		if err != nil {
			return cpuset{}, fmt.Errorf("cpuset of pid %d: %w", pid, err)
		}
		mems, err := readList(filepath.Join(h.Mount, dir, memsFile))
		if err != nil {
			return cpuset{}, fmt.Errorf("cpuset of pid %d: %w", pid, err)
		}
		cs.CPUs, cs.Mems = cpus, mems
		return cs, nil
	}
}

func readList(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	l, err := numa.ParseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return l, nil
}

// restricted reports whether the cpuset limits anything.
func (cs cpuset) restricted() bool { return cs.Group != "" }

// cpusOn returns the CPUs of node n the cpuset allows.
func (cs cpuset) cpusOn(n numa.Node) []int {
	if !cs.restricted() {
		return n.CPUs
	}
	var out []int
	for _, c := range n.CPUs {
		if slices.Contains(cs.CPUs, c) {
			out = append(out, c)
		}
	}
	return out
}

// memOn reports whether the cpuset allows memory on node n.
func (cs cpuset) memOn(n numa.Node) bool {
	return !cs.restricted() || slices.Contains(cs.Mems, n.ID)
}

// describe names what the cpuset allows, for a refusal.
func (cs cpuset) describe(pid int) string {
	if !cs.restricted() {
		return ""
	}
	return fmt.Sprintf("pid %d's cpuset (group %s) allows cpus %s and memory nodes %s", pid, cs.Group, numa.FormatCPUList(cs.CPUs), numa.FormatCPUList(cs.Mems))
}
