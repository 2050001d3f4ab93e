package numafault

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Flags of get_mempolicy(2).
const (
	mpolFNode = 1 // with mpolFAddr: return the node of the page at addr
	mpolFAddr = 2 // the policy of the mapping at addr, not the thread's
)

// placement is where the kernel says a mapping's memory is, read with
// get_mempolicy(2) from inside the process that owns it: the mapping's
// policy and node set, and the node of each sampled page.
type placement struct {
	Mode  int
	Nodes []int
	// PageNodes counts sampled pages per node.
	PageNodes map[int]int
}

// placementOf asks the kernel about mem: its policy, and the node of up to
// samples of its pages spread evenly, every one already touched (the
// kernel reports an untouched page's node only by faulting it in).
func placementOf(mem []byte, samples int) (placement, error) {
	var p placement
	if len(mem) == 0 || samples < 1 {
		return p, fmt.Errorf("placement: %d bytes, %d samples", len(mem), samples)
	}
	var mask nodeMask
	var mode int32
	if _, _, e := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&mode)), uintptr(unsafe.Pointer(&mask[0])),
		nodeMaskWords*64, uintptr(unsafe.Pointer(&mem[0])), mpolFAddr, 0); e != 0 {
		return p, fmt.Errorf("get_mempolicy of the mapping: %w", e)
	}
	p.Mode = int(mode)
	for n := range nodeMaskWords * 64 {
		if mask[n/64]&(1<<(n%64)) != 0 {
			p.Nodes = append(p.Nodes, n)
		}
	}
	page := os.Getpagesize()
	pages := len(mem) / page
	p.PageNodes = map[int]int{}
	for i := range min(samples, pages) {
		addr := &mem[i*(pages/min(samples, pages))*page]
		var node int32
		if _, _, e := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&node)), 0, 0,
			uintptr(unsafe.Pointer(addr)), mpolFNode|mpolFAddr, 0); e != 0 {
			return p, fmt.Errorf("get_mempolicy of page %d: %w", i, e)
		}
		p.PageNodes[int(node)]++
	}
	return p, nil
}

// checkBound reports whether p is a bind to node alone with every sampled
// page there, and what is wrong otherwise.
func (p placement) checkBound(node int) error {
	if p.Mode != mpolBind || len(p.Nodes) != 1 || p.Nodes[0] != node {
		return fmt.Errorf("the kernel reports policy %d on nodes %v for the held memory, want a bind (%d) to node %d", p.Mode, p.Nodes, mpolBind, node)
	}
	for n, c := range p.PageNodes {
		if n != node {
			return fmt.Errorf("the kernel reports %d of the sampled pages on node %d, want all on node %d", c, n, node)
		}
	}
	return nil
}
