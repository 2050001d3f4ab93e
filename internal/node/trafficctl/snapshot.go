package trafficctl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
)

// Handle is a traffic-control handle or parent, major:minor in hex as tc
// prints it ("1:0", "ffff:fff2"), with "root" for the root parent.
type Handle uint32

// Well-known handles.
const (
	HandleRoot    Handle = netlink.HANDLE_ROOT
	HandleIngress Handle = netlink.HANDLE_INGRESS // also clsact's parent
	HandleClsact  Handle = 0xffff0000             // the clsact (and ingress) qdisc's own handle
)

// MakeHandle builds major:minor.
func MakeHandle(major, minor uint16) Handle { return Handle(uint32(major)<<16 | uint32(minor)) }

// Major returns the handle's major number.
func (h Handle) Major() uint16 { return uint16(h >> 16) }

func (h Handle) String() string {
	if h == HandleRoot {
		return "root"
	}
	return fmt.Sprintf("%x:%x", uint32(h)>>16, uint32(h)&0xffff)
}

// MarshalText writes the handle as String does.
func (h Handle) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText parses "root" or major:minor in hex, either part possibly
// empty ("1:" is 1:0, as tc reads it).
func (h *Handle) UnmarshalText(b []byte) error {
	s := string(b)
	if s == "root" {
		*h = HandleRoot
		return nil
	}
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return fmt.Errorf("handle %q: want major:minor in hex or root", s)
	}
	parse := func(part string) (uint64, error) {
		if part == "" {
			return 0, nil
		}
		return strconv.ParseUint(part, 16, 16)
	}
	hi, err := parse(maj)
	if err != nil {
		return fmt.Errorf("handle %q: major: %w", s, err)
	}
	lo, err := parse(min)
	if err != nil {
		return fmt.Errorf("handle %q: minor: %w", s, err)
	}
	*h = MakeHandle(uint16(hi), uint16(lo))
	return nil
}

// Snapshot is what an interface's traffic control looks like: every qdisc
// and every filter on the clsact or ingress hooks, with the options that
// decide their behaviour (not counters). Two snapshots of an untouched
// interface are Equal; Snapshot taken after Undo equals the one taken at
// planning.
type Snapshot struct {
	Interface string   `json:"interface"`
	Qdiscs    []Qdisc  `json:"qdiscs"`
	Filters   []Filter `json:"filters"`
}

// Qdisc is one queueing discipline. A Handle of 0 means the kernel created
// it as the interface's default and will create it again when the root
// qdisc above it is deleted.
type Qdisc struct {
	Kind   string `json:"kind"`
	Handle Handle `json:"handle"`
	Parent Handle `json:"parent"`
	// The options of the kinds this package can re-create or adds itself;
	// the zero value for other kinds.
	TBF     TBF     `json:"tbf,omitzero"`
	FQCodel FQCodel `json:"fq_codel,omitzero"`
	Prio    Prio    `json:"prio,omitzero"`
	Netem   Netem   `json:"netem,omitzero"`
}

// TBF are a token bucket filter's settings as the kernel keeps them:
// rates in bytes/s, Buffer and Minburst in scheduler ticks, Limit in bytes.
type TBF struct {
	Rate     uint64 `json:"rate"`
	Peakrate uint64 `json:"peakrate,omitempty"`
	Buffer   uint32 `json:"buffer"`
	Limit    uint32 `json:"limit"`
	Minburst uint32 `json:"minburst,omitempty"`
}

// FQCodel are fq_codel's settings (times in microseconds).
type FQCodel struct {
	Target        uint32 `json:"target"`
	Limit         uint32 `json:"limit"`
	Interval      uint32 `json:"interval"`
	ECN           uint32 `json:"ecn"`
	Flows         uint32 `json:"flows"`
	Quantum       uint32 `json:"quantum"`
	CEThreshold   uint32 `json:"ce_threshold,omitempty"`
	DropBatchSize uint32 `json:"drop_batch_size,omitempty"`
	MemoryLimit   uint32 `json:"memory_limit,omitempty"`
}

// Prio is the band map of pfifo_fast and prio.
type Prio struct {
	Bands       uint8     `json:"bands"`
	PriorityMap [16]uint8 `json:"priomap"`
}

// Netem are netem's settings as the kernel keeps them (Latency in ticks,
// Loss as a fraction of 2^32).
type Netem struct {
	Latency uint32 `json:"latency"`
	Limit   uint32 `json:"limit"`
	Loss    uint32 `json:"loss"`
}

// Filter is one classifier on a clsact or ingress hook.
type Filter struct {
	Kind     string `json:"kind"`
	Parent   Handle `json:"parent"`
	Handle   uint32 `json:"handle"`
	Priority uint16 `json:"priority"`
	// Protocol is the ethertype in host byte order (3 is every protocol).
	Protocol uint16 `json:"protocol"`
	BPF      BPF    `json:"bpf,omitzero"`
}

// BPF describes a cls_bpf filter's program.
type BPF struct {
	Name         string `json:"name"`
	Tag          string `json:"tag"`
	ProgID       int    `json:"prog_id"`
	DirectAction bool   `json:"direct_action"`
	ClassID      uint32 `json:"class_id,omitempty"`
}

// Equal reports whether two snapshots describe the same traffic control.
func (s Snapshot) Equal(o Snapshot) bool {
	return s.Interface == o.Interface && slices.Equal(s.Qdiscs, o.Qdiscs) && slices.Equal(s.Filters, o.Filters)
}

// Root returns the root qdisc, if the interface has one.
func (s Snapshot) Root() (Qdisc, bool) {
	for _, q := range s.Qdiscs {
		if q.Parent == HandleRoot {
			return q, true
		}
	}
	return Qdisc{}, false
}

// qdisc returns the qdisc of a kind, if any.
func (s Snapshot) qdisc(kind string) (Qdisc, bool) {
	for _, q := range s.Qdiscs {
		if q.Kind == kind {
			return q, true
		}
	}
	return Qdisc{}, false
}

// Take returns the snapshot of target's interface.
func Take(ctx context.Context, t Target) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", t.Interface, err)
	}
	c, err := dial(t.PID)
	if err != nil {
		return Snapshot{}, err
	}
	defer c.Close()
	l, err := c.link(t.Interface)
	if err != nil {
		return Snapshot{}, err
	}
	return c.snapshot(l)
}

// dumpRetries bounds the retries of a dump the kernel interrupted because
// the table changed under it; a few always suffice in practice.
const dumpRetries = 5

func (c *conn) snapshot(l netlink.Link) (Snapshot, error) {
	name := l.Attrs().Name
	s := Snapshot{Interface: name, Qdiscs: []Qdisc{}, Filters: []Filter{}}
	qs, err := retryDump(func() ([]netlink.Qdisc, error) { return c.h.QdiscList(l) })
	if err != nil {
		return Snapshot{}, fmt.Errorf("list qdiscs of %s in %s: %w", name, c.id, err)
	}
	for _, q := range qs {
		s.Qdiscs = append(s.Qdiscs, qdiscFrom(q))
	}
	for _, q := range s.Qdiscs {
		var parents []Handle
		switch q.Kind {
		case "clsact":
			parents = []Handle{Handle(netlink.HANDLE_MIN_INGRESS), Handle(netlink.HANDLE_MIN_EGRESS)}
		case "ingress":
			parents = []Handle{q.Handle}
		}
		for _, p := range parents {
			fs, err := retryDump(func() ([]netlink.Filter, error) { return c.h.FilterList(l, uint32(p)) })
			if err != nil {
				return Snapshot{}, fmt.Errorf("list filters of %s on %s in %s: %w", name, p, c.id, err)
			}
			for _, f := range fs {
				s.Filters = append(s.Filters, filterFrom(f))
			}
		}
	}
	slices.SortFunc(s.Qdiscs, func(a, b Qdisc) int {
		return cmp.Or(cmp.Compare(a.Parent, b.Parent), cmp.Compare(a.Handle, b.Handle), cmp.Compare(a.Kind, b.Kind))
	})
	slices.SortFunc(s.Filters, func(a, b Filter) int {
		return cmp.Or(cmp.Compare(a.Parent, b.Parent), cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Handle, b.Handle), cmp.Compare(a.Kind, b.Kind))
	})
	return s, nil
}

func retryDump[T any](list func() ([]T, error)) ([]T, error) {
	var (
		out []T
		err error
	)
	for range dumpRetries {
		out, err = list()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, err
}

func qdiscFrom(q netlink.Qdisc) Qdisc {
	a := q.Attrs()
	out := Qdisc{Kind: q.Type(), Handle: Handle(a.Handle), Parent: Handle(a.Parent)}
	switch q := q.(type) {
	case *netlink.Tbf:
		out.TBF = TBF{Rate: q.Rate, Peakrate: q.Peakrate, Buffer: q.Buffer, Limit: q.Limit, Minburst: q.Minburst}
	case *netlink.FqCodel:
		out.FQCodel = FQCodel{Target: q.Target, Limit: q.Limit, Interval: q.Interval, ECN: q.ECN, Flows: q.Flows,
			Quantum: q.Quantum, CEThreshold: q.CEThreshold, DropBatchSize: q.DropBatchSize, MemoryLimit: q.MemoryLimit}
	case *netlink.PfifoFast:
		out.Prio = Prio{Bands: q.Bands, PriorityMap: q.PriorityMap}
	case *netlink.Prio:
		out.Prio = Prio{Bands: q.Bands, PriorityMap: q.PriorityMap}
	case *netlink.Netem:
		out.Netem = Netem{Latency: q.Latency, Limit: q.Limit, Loss: q.Loss}
	}
	return out
}

func filterFrom(f netlink.Filter) Filter {
	a := f.Attrs()
	out := Filter{Kind: f.Type(), Parent: Handle(a.Parent), Handle: a.Handle, Priority: a.Priority, Protocol: a.Protocol}
	if b, ok := f.(*netlink.BpfFilter); ok {
		out.BPF = BPF{Name: b.Name, Tag: b.Tag, ProgID: b.Id, DirectAction: b.DirectAction, ClassID: b.ClassId}
	}
	return out
}

// recreatable says whether restore can build q again exactly, and why not.
// Classful qdiscs carry classes and filters this package does not read, so
// replacing one could not be undone.
func recreatable(q Qdisc, s Snapshot) error {
	switch q.Kind {
	case "tbf", "fq_codel", "pfifo_fast", "noqueue":
		return nil
	case "mq":
		// mq re-creates one default child per queue; children someone set
		// up by hand would be lost.
		for _, c := range s.Qdiscs {
			if c.Parent != HandleRoot && c.Parent.Major() == q.Handle.Major() && c.Handle != 0 {
				return fmt.Errorf("mq root has a configured child %s %s", c.Kind, c.Handle)
			}
		}
		return nil
	}
	return fmt.Errorf("root qdisc %s %s cannot be re-created exactly (tbf, fq_codel, pfifo_fast, noqueue and mq can)", q.Kind, q.Handle)
}

// toNetlink builds the netlink form of a re-creatable qdisc.
func (q Qdisc) toNetlink(index int) netlink.Qdisc {
	attrs := netlink.QdiscAttrs{LinkIndex: index, Handle: uint32(q.Handle), Parent: uint32(q.Parent)}
	switch q.Kind {
	case "tbf":
		return &netlink.Tbf{QdiscAttrs: attrs, Rate: q.TBF.Rate, Peakrate: q.TBF.Peakrate, Buffer: q.TBF.Buffer, Limit: q.TBF.Limit, Minburst: q.TBF.Minburst}
	case "fq_codel":
		o := q.FQCodel
		return &netlink.FqCodel{QdiscAttrs: attrs, Target: o.Target, Limit: o.Limit, Interval: o.Interval, ECN: o.ECN, Flows: o.Flows,
			Quantum: o.Quantum, CEThreshold: o.CEThreshold, DropBatchSize: o.DropBatchSize, MemoryLimit: o.MemoryLimit}
	case "pfifo_fast":
		return &netlink.PfifoFast{QdiscAttrs: attrs, Bands: q.Prio.Bands, PriorityMap: q.Prio.PriorityMap}
	case "netem":
		return &netlink.Netem{QdiscAttrs: attrs, Latency: q.Netem.Latency, Limit: q.Netem.Limit, Loss: q.Netem.Loss}
	}
	return &netlink.GenericQdisc{QdiscAttrs: attrs, QdiscType: q.Kind}
}
