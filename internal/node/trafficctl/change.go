package trafficctl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The marks that make what this package adds recognisable as its own.
const (
	// RootMajor is the major number of the root qdisc a change puts in
	// place ("gc" in ASCII).
	RootMajor uint16 = 0x6763
	// FilterPriority is the priority of our cls_bpf filters. Filters of a
	// lower number run first; one of those that returns a verdict (rather
	// than TC_ACT_UNSPEC) decides before ours see the packet.
	FilterPriority uint16 = 0x6763
	// FilterNamePrefix starts the name of every filter we add; the rest is
	// the change's ID, so one change never deletes another's filter.
	FilterNamePrefix = "gpuchaos-"
)

// Change kinds.
const (
	KindTBF   = "tbf"
	KindNetem = "netem"
	KindBPF   = "bpf"
)

// ErrKernelFeature reports that the kernel lacks a module a change needs;
// the error's text names the module and its config option.
var ErrKernelFeature = errors.New("kernel feature missing")

// Change is one planned fault on one interface: where, what was there
// before, and exactly what it adds. It is plain data that survives a JSON
// round trip, so a change planned and applied by one process can be undone
// by another.
type Change struct {
	// ID is random and names the change's filters.
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	NS        Namespace `json:"ns"`
	Interface string    `json:"interface"`
	Index     int       `json:"index"`
	// Before is the interface as the change found it.
	Before Snapshot `json:"before"`
	// Root is the root qdisc a tbf or netem change puts in place; its
	// handle's major is RootMajor.
	Root *Qdisc `json:"root,omitempty"`
	// AddClsact is set when the interface had no clsact qdisc: the change
	// adds one, and Undo deletes it once no filter is left on it.
	AddClsact bool        `json:"add_clsact,omitempty"`
	Filters   []BPFFilter `json:"filters,omitempty"`
}

// BPFFilter is one cls_bpf filter a change adds.
type BPFFilter struct {
	Hook     Hook   `json:"hook"`
	Priority uint16 `json:"priority"`
	Handle   uint32 `json:"handle"`
	Name     string `json:"name"`
	Drop     Drop   `json:"drop"`
}

// Validate checks that a change (loaded from a file, say) is one this
// package could have planned, so Undo never acts on foreign handles.
func (ch *Change) Validate() error {
	if ch.ID == "" || ch.Interface == "" || ch.Index <= 0 || ch.NS.PID < 0 {
		return errors.New("change lacks its id, interface, index or namespace")
	}
	switch ch.Kind {
	case KindTBF, KindNetem:
		if ch.Root == nil || ch.Root.Kind != ch.Kind || ch.Root.Handle != MakeHandle(RootMajor, 0) || ch.Root.Parent != HandleRoot {
			return fmt.Errorf("%s change's root qdisc is not %s %s at root", ch.Kind, ch.Kind, MakeHandle(RootMajor, 0))
		}
		if len(ch.Filters) > 0 || ch.AddClsact {
			return fmt.Errorf("%s change adds filters", ch.Kind)
		}
	case KindBPF:
		if ch.Root != nil || len(ch.Filters) == 0 {
			return errors.New("bpf change must add filters and no root qdisc")
		}
		for _, f := range ch.Filters {
			if _, err := f.Hook.parent(); err != nil {
				return err
			}
			if f.Name != FilterNamePrefix+ch.ID || f.Priority != FilterPriority || f.Handle == 0 {
				return fmt.Errorf("filter %q (priority %d, handle %d) does not carry the change's marks", f.Name, f.Priority, f.Handle)
			}
			if err := f.Drop.validate(); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown change kind %q", ch.Kind)
	}
	return nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b[:])
}

// begin resolves t and snapshots its interface.
func begin(ctx context.Context, t Target, kind string) (*Change, *conn, netlink.Link, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("plan %s: %w", kind, err)
	}
	c, err := dial(t.PID)
	if err != nil {
		return nil, nil, nil, err
	}
	l, err := c.link(t.Interface)
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	snap, err := c.snapshot(l)
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	ch := &Change{ID: newID(), Kind: kind, NS: c.id, Interface: l.Attrs().Name, Index: l.Attrs().Index, Before: snap}
	return ch, c, l, nil
}

// planRoot checks that the root qdisc can be replaced and put back.
func (ch *Change) planRoot(q Qdisc) error {
	if prev, ok := ch.Before.Root(); ok {
		if prev.Handle.Major() == RootMajor {
			return fmt.Errorf("%s on %s already has gpuchaos' root qdisc %s %s: another fault is in effect", ch.NS, ch.Interface, prev.Kind, prev.Handle)
		}
		if prev.Handle != 0 {
			if err := recreatable(prev, ch.Before); err != nil {
				return fmt.Errorf("%s on %s: %w, so it could not be restored", ch.NS, ch.Interface, err)
			}
		}
	}
	ch.Root = &q
	return nil
}

// ethHeader is the bytes tbf counts per frame beyond the MTU.
const ethHeader = 14

// tbfShape picks the bucket and queue for a rate in bytes/s.
//
// The bucket (burst) must hold at least one full frame, or tbf drops every
// frame larger than it; two frames leave room for the kernel's rounding of
// the bucket into scheduler ticks. Beyond that it holds 25 ms of traffic:
// tbf dequeues from a timer run in softirq context, and on a busy host
// (exactly where GPU jobs run) softirqs are deferred to ksoftirqd and run
// milliseconds late; tokens that arrive while the bucket is full are lost,
// so a bucket of a few milliseconds caps the flow below the rate. A 25 ms
// burst at line rate is too short to change what a job sees over a step. GSO packets larger than the bucket are
// segmented by tbf itself.
//
// The queue (limit) holds the bucket plus 50 ms of traffic: enough for a
// TCP sender to keep the link full through its window growth, so the flow
// runs at the rate rather than collapsing on tail drops, and short enough
// not to add more delay than a congested switch would.
func tbfShape(rate uint64, mtu int) (burst, limit uint32) {
	frame := uint64(max(mtu, 68) + ethHeader)
	b := max(rate/40, 2*frame)
	q := b + rate/20
	return uint32(min(b, math.MaxUint32/2)), uint32(min(q, math.MaxUint32))
}

// PlanRateLimit plans replacing the root qdisc of t's interface by a tbf
// at bytesPerSecond. The previous root qdisc must be the kernel's default
// or one that can be re-created exactly.
func PlanRateLimit(ctx context.Context, t Target, bytesPerSecond uint64) (*Change, error) {
	if bytesPerSecond == 0 {
		return nil, errors.New("rate limit of 0 bytes/s: use a partition to stop traffic")
	}
	ch, c, l, err := begin(ctx, t, KindTBF)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	burst, limit := tbfShape(bytesPerSecond, l.Attrs().MTU)
	q := Qdisc{Kind: "tbf", Handle: MakeHandle(RootMajor, 0), Parent: HandleRoot,
		TBF: TBF{Rate: bytesPerSecond, Buffer: netlink.Xmittime(bytesPerSecond, burst), Limit: limit}}
	if err := ch.planRoot(q); err != nil {
		return nil, err
	}
	return ch, nil
}

// PlanNetem plans replacing the root qdisc of t's interface by a netem
// with a one-way delay and a loss probability. Apply fails with
// ErrKernelFeature where the kernel lacks sch_netem.
func PlanNetem(ctx context.Context, t Target, delay time.Duration, loss float64) (*Change, error) {
	if delay < 0 || delay > time.Duration(math.MaxUint32)*time.Microsecond {
		return nil, fmt.Errorf("netem delay %s is outside [0, %s]", delay, time.Duration(math.MaxUint32)*time.Microsecond)
	}
	if math.IsNaN(loss) || loss < 0 || loss > 1 {
		return nil, fmt.Errorf("netem loss probability %v is outside [0, 1]", loss)
	}
	if delay == 0 && loss == 0 {
		return nil, errors.New("netem with neither delay nor loss does nothing")
	}
	ch, c, _, err := begin(ctx, t, KindNetem)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	n := netlink.NewNetem(netlink.QdiscAttrs{}, netlink.NetemQdiscAttrs{
		Latency: uint32(delay / time.Microsecond),
		Loss:    float32(loss * 100),
	})
	q := Qdisc{Kind: "netem", Handle: MakeHandle(RootMajor, 0), Parent: HandleRoot,
		Netem: Netem{Latency: n.Latency, Limit: n.Limit, Loss: n.Loss}}
	if err := ch.planRoot(q); err != nil {
		return nil, err
	}
	return ch, nil
}

// PlanDrop plans a cls_bpf filter on each hook of t's interface that drops
// packets as d says. An interface without a clsact qdisc gets one.
func PlanDrop(ctx context.Context, t Target, hooks []Hook, d Drop) (*Change, error) {
	if len(hooks) == 0 {
		return nil, errors.New("drop on no hook: name egress, ingress or both")
	}
	for i, h := range hooks {
		if _, err := d.program(h); err != nil {
			return nil, err
		}
		for _, o := range hooks[:i] {
			if o == h {
				return nil, fmt.Errorf("hook %s named twice", h)
			}
		}
	}
	ch, c, l, err := begin(ctx, t, KindBPF)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if d.Match != nil && l.Attrs().EncapType != "ether" {
		return nil, fmt.Errorf("%s in %s is %s, not Ethernet: address and port matching parse Ethernet frames", ch.Interface, ch.NS, l.Attrs().EncapType)
	}
	if _, ok := ch.Before.qdisc("ingress"); ok {
		return nil, fmt.Errorf("%s in %s has an ingress qdisc, which excludes the clsact qdisc cls-bpf needs", ch.Interface, ch.NS)
	}
	_, has := ch.Before.qdisc("clsact")
	ch.AddClsact = !has
	for _, h := range hooks {
		parent, _ := h.parent()
		ch.Filters = append(ch.Filters, BPFFilter{Hook: h, Priority: FilterPriority, Handle: ch.Before.freeHandle(parent), Name: FilterNamePrefix + ch.ID, Drop: d})
	}
	return ch, nil
}

// freeHandle is the lowest filter handle unused at our priority on parent.
func (s Snapshot) freeHandle(parent Handle) uint32 {
	used := map[uint32]bool{}
	for _, f := range s.Filters {
		if f.Parent == parent && f.Priority == FilterPriority {
			used[f.Handle] = true
		}
	}
	h := uint32(1)
	for used[h] {
		h++
	}
	return h
}

// Apply makes the change. On failure it undoes whatever it did, so the
// interface is as it was. Applying a change twice fails on its handles.
func (ch *Change) Apply(ctx context.Context) error {
	if err := ch.Validate(); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("apply %s on %s: %w", ch.Kind, ch.Interface, err)
	}
	c, err := redial(ch.NS)
	if err != nil {
		return err
	}
	defer c.Close()
	l, err := c.linkAt(ch.Index, ch.Interface)
	if err != nil {
		return err
	}
	if err := ch.apply(ctx, c, l); err != nil {
		if uerr := ch.undo(c, l); uerr != nil {
			err = errors.Join(err, fmt.Errorf("undo the partial change: %w", uerr))
		}
		return fmt.Errorf("apply %s on %s in %s: %w", ch.Kind, ch.Interface, ch.NS, err)
	}
	return nil
}

func missing(err error, module, config string) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%w: %s (%s): %w", ErrKernelFeature, module, config, err)
	}
	return err
}

func (ch *Change) apply(ctx context.Context, c *conn, l netlink.Link) error {
	idx := l.Attrs().Index
	if ch.Root != nil {
		err := c.h.QdiscReplace(ch.Root.toNetlink(idx))
		if err != nil && ch.Kind == KindNetem {
			return fmt.Errorf("add netem root qdisc: %w", missing(err, "sch_netem", "CONFIG_NET_SCH_NETEM"))
		}
		if err != nil {
			return fmt.Errorf("replace root qdisc by tbf: %w", missing(err, "sch_tbf", "CONFIG_NET_SCH_TBF"))
		}
		return nil
	}
	if ch.AddClsact {
		err := c.h.QdiscAdd(&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: uint32(HandleClsact), Parent: netlink.HANDLE_CLSACT}})
		// EEXIST: someone added one since planning; Undo deletes it only
		// once it carries no filter.
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add clsact qdisc: %w", missing(err, "clsact", "CONFIG_NET_SCH_INGRESS"))
		}
	}
	for _, f := range ch.Filters {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := addFilter(c, idx, f); err != nil {
			return err
		}
	}
	return nil
}

func addFilter(c *conn, idx int, f BPFFilter) error {
	prog, err := f.Drop.load(f.Hook)
	if err != nil {
		return err
	}
	// The filter holds its own reference to the program.
	defer prog.Close()
	parent, _ := f.Hook.parent()
	err = c.h.FilterAdd(&netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: uint32(parent), Handle: f.Handle,
			Priority: f.Priority, Protocol: unix.ETH_P_ALL},
		Fd: prog.FD(), Name: f.Name, DirectAction: true,
	})
	if err != nil {
		return fmt.Errorf("attach cls_bpf filter on %s: %w", f.Hook, missing(err, "cls_bpf", "CONFIG_NET_CLS_BPF"))
	}
	return nil
}

// Undo removes what the change added and puts back the root qdisc it
// replaced. It is safe to repeat and succeeds when nothing of the change
// is in effect (never applied, or already undone). It fails with ErrGone
// when the namespace or the interface no longer exists.
func (ch *Change) Undo(ctx context.Context) error {
	if err := ch.Validate(); err != nil {
		return fmt.Errorf("undo: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("undo %s on %s: %w", ch.Kind, ch.Interface, err)
	}
	c, err := redial(ch.NS)
	if err != nil {
		return fmt.Errorf("undo %s on %s: %w", ch.Kind, ch.Interface, err)
	}
	defer c.Close()
	l, err := c.linkAt(ch.Index, ch.Interface)
	if err != nil {
		return fmt.Errorf("undo %s: %w", ch.Kind, err)
	}
	if err := ch.undo(c, l); err != nil {
		return fmt.Errorf("undo %s on %s in %s: %w", ch.Kind, ch.Interface, ch.NS, err)
	}
	return nil
}

func (ch *Change) undo(c *conn, l netlink.Link) error {
	now, err := c.snapshot(l)
	if err != nil {
		return err
	}
	if ch.Root != nil {
		return ch.undoRoot(c, l, now)
	}
	for _, f := range ch.Filters {
		parent, _ := f.Hook.parent()
		for _, g := range now.Filters {
			if g.Parent != parent || g.Priority != f.Priority || g.Handle != f.Handle || g.Kind != "bpf" || g.BPF.Name != f.Name {
				continue
			}
			err := c.h.FilterDel(&netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: l.Attrs().Index,
				Parent: uint32(parent), Handle: g.Handle, Priority: g.Priority, Protocol: g.Protocol}})
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("delete filter %s on %s: %w", f.Name, f.Hook, err)
			}
		}
	}
	if !ch.AddClsact {
		return nil
	}
	after, err := c.snapshot(l)
	if err != nil {
		return err
	}
	if _, ok := after.qdisc("clsact"); !ok || len(after.Filters) > 0 {
		return nil
	}
	err = c.h.QdiscDel(&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: uint32(HandleClsact), Parent: netlink.HANDLE_CLSACT}})
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("delete clsact qdisc: %w", err)
	}
	return nil
}

func (ch *Change) undoRoot(c *conn, l netlink.Link, now Snapshot) error {
	root, ok := now.Root()
	if !ok || root.Handle != ch.Root.Handle || root.Kind != ch.Root.Kind {
		return nil // never applied, or already undone
	}
	idx := l.Attrs().Index
	prev, had := ch.Before.Root()
	if !had || prev.Handle == 0 {
		// Deleting the root makes the kernel attach its default again.
		if err := c.h.QdiscDel(root.toNetlink(idx)); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete root qdisc %s %s: %w", root.Kind, root.Handle, err)
		}
	} else if err := c.h.QdiscReplace(prev.toNetlink(idx)); err != nil {
		return fmt.Errorf("restore root qdisc %s %s: %w", prev.Kind, prev.Handle, err)
	}
	after, err := c.snapshot(l)
	if err != nil {
		return err
	}
	if got, _ := after.Root(); had && got != prev {
		return fmt.Errorf("root qdisc after restore is %s %s (%+v), want %s %s (%+v)", got.Kind, got.Handle, got, prev.Kind, prev.Handle, prev)
	}
	return nil
}

// String describes the change in one line.
func (ch *Change) String() string {
	var what []string
	if ch.Root != nil {
		what = append(what, fmt.Sprintf("root %s %s", ch.Root.Kind, ch.Root.Handle))
	}
	for _, f := range ch.Filters {
		what = append(what, fmt.Sprintf("%s filter %s", f.Hook, f.Name))
	}
	return fmt.Sprintf("%s on %s in %s: %s", ch.Kind, ch.Interface, ch.NS, strings.Join(what, ", "))
}
