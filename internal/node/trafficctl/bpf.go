package trafficctl

import (
	"errors"
	"fmt"
	"math"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
)

// Hook is a clsact hook: packets leaving (egress) or arriving at (ingress)
// the interface.
type Hook string

// The clsact hooks.
const (
	Egress  Hook = "egress"
	Ingress Hook = "ingress"
)

func (h Hook) parent() (Handle, error) {
	switch h {
	case Egress:
		return Handle(netlink.HANDLE_MIN_EGRESS), nil
	case Ingress:
		return Handle(netlink.HANDLE_MIN_INGRESS), nil
	}
	return 0, fmt.Errorf("hook %q: want egress or ingress", string(h))
}

// Drop says which packets a cls_bpf filter drops: those that Match (every
// packet when Match is nil), each with Probability.
type Drop struct {
	// Probability that a matching packet is dropped, in [0, 1].
	Probability float64 `json:"probability"`
	Match       *Match  `json:"match,omitempty"`
}

// Match selects IPv4 packets by the peer's address and port: the
// destination on egress, the source on ingress. Packets that are not IPv4
// over Ethernet never match.
type Match struct {
	// Prefix holds the peer addresses; /0 matches every IPv4 address.
	Prefix netip.Prefix `json:"prefix"`
	// PortMin and PortMax bound the port (inclusive); both 0 match any
	// packet of any protocol.
	PortMin uint16 `json:"port_min,omitempty"`
	PortMax uint16 `json:"port_max,omitempty"`
	// TCPOnly limits port matching to TCP; otherwise TCP and UDP match.
	TCPOnly bool `json:"tcp_only,omitempty"`
	// EitherPort matches the source or the destination port, whichever
	// the direction, instead of only the peer's (a port range blackholes
	// connections whichever end listens).
	EitherPort bool `json:"either_port,omitempty"`
}

// validate says what is wrong with d, in one line.
func (d Drop) validate() error {
	if math.IsNaN(d.Probability) || d.Probability < 0 || d.Probability > 1 {
		return fmt.Errorf("drop probability %v is outside [0, 1]", d.Probability)
	}
	m := d.Match
	if m == nil {
		return nil
	}
	if !m.Prefix.IsValid() {
		return errors.New("match prefix is not a valid CIDR")
	}
	if !m.Prefix.Addr().Is4() {
		return fmt.Errorf("match prefix %s is not IPv4 (IPv6 is not parsed by the program)", m.Prefix)
	}
	if m.PortMax < m.PortMin {
		return fmt.Errorf("port range %d-%d is empty", m.PortMin, m.PortMax)
	}
	if m.PortMin == 0 && m.PortMax != 0 {
		return fmt.Errorf("port range %d-%d starts at 0; use 0-0 for any port", m.PortMin, m.PortMax)
	}
	return nil
}

// Offsets into struct __sk_buff (include/uapi/linux/bpf.h) and the packet.
const (
	skbData    = 76
	skbDataEnd = 80

	ethLen    = 14
	ethProto  = 12
	ipv4Proto = 0x0800
	ipMinLen  = 20
	ipFrag    = ethLen + 6
	ipProto   = ethLen + 9
	ipSrc     = ethLen + 12
	ipDst     = ethLen + 16

	protoTCP = 6
	protoUDP = 17

	// Direct-action verdicts (include/uapi/linux/pkt_cls.h). UNSPEC, not
	// OK, for packets we keep: it lets the next filter on the hook (someone
	// else's) still see them.
	actUnspec = -1
	actShot   = 2
)

// threshold is p scaled to the range of bpf_get_prandom_u32: a packet is
// dropped when the random number is below it. p = 1 gives 2^32, above every
// u32, so the comparison is done on 64 bits.
func threshold(p float64) int64 {
	return int64(math.Round(p * (1 << 32)))
}

// program assembles the filter for hook. Register use: R1 the context, R2
// the packet cursor, R3 data_end, R4 bounds checks, R5 the loaded field,
// R7 wide constants.
func (d Drop) program(h Hook) (asm.Instructions, error) {
	if err := d.validate(); err != nil {
		return nil, err
	}
	if _, err := h.parent(); err != nil {
		return nil, err
	}
	var in asm.Instructions
	if m := d.Match; m != nil {
		in = append(in, m.instructions(h)...)
	}
	// The verifier refuses unreachable instructions, so each verdict is
	// emitted only where something reaches it: the check below falls
	// through to one verdict, and the other follows only when jumped to.
	pass := asm.Instructions{asm.Mov.Imm(asm.R0, actUnspec).WithSymbol("pass"), asm.Return()}
	drop := asm.Instructions{asm.Mov.Imm(asm.R0, actShot).WithSymbol("drop"), asm.Return()}
	first, second := pass, drop
	switch t := threshold(d.Probability); {
	case t >= 1<<32:
		first, second = drop, pass
	case t > 0:
		in = append(in,
			asm.FnGetPrandomU32.Call(),
			asm.LoadImm(asm.R7, t, asm.DWord),
			asm.JLT.Reg(asm.R0, asm.R7, "drop"),
		)
	}
	in = append(in, first...)
	label := second[0].Symbol()
	for _, ins := range in {
		if ins.Reference() == label {
			in = append(in, second...)
			break
		}
	}
	return in, nil
}

// instructions match the packet or jump to "pass"; a match falls through.
// Every packet read is preceded by a check against data_end, as the
// verifier demands for direct packet access.
func (m *Match) instructions(h Hook) asm.Instructions {
	addrOff, peerPort, ownPort := int16(ipDst), int16(2), int16(0)
	if h == Ingress {
		addrOff, peerPort, ownPort = ipSrc, 0, 2
	}
	in := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, skbData, asm.Word),
		asm.LoadMem(asm.R3, asm.R1, skbDataEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, ethLen+ipMinLen),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, ethProto, asm.Half),
		// Header fields are big-endian; a byte swap on a little-endian
		// host (none on a big-endian one) gives their value.
		asm.HostTo(asm.BE, asm.R5, asm.Half),
		asm.JNE.Imm(asm.R5, ipv4Proto, "pass"),
	}
	if bits := m.Prefix.Bits(); bits > 0 {
		a := m.Prefix.Masked().Addr().As4()
		network := int64(a[0])<<24 | int64(a[1])<<16 | int64(a[2])<<8 | int64(a[3])
		mask := int64(uint32(math.MaxUint32) << (32 - bits))
		in = append(in,
			asm.LoadMem(asm.R5, asm.R2, addrOff, asm.Word),
			asm.HostTo(asm.BE, asm.R5, asm.Word),
			asm.LoadImm(asm.R7, mask, asm.DWord),
			asm.And.Reg(asm.R5, asm.R7),
			asm.LoadImm(asm.R7, network, asm.DWord),
			asm.JNE.Reg(asm.R5, asm.R7, "pass"),
		)
	}
	if m.PortMin == 0 && m.PortMax == 0 {
		return in
	}
	in = append(in, asm.LoadMem(asm.R5, asm.R2, ipProto, asm.Byte))
	if m.TCPOnly {
		in = append(in, asm.JNE.Imm(asm.R5, protoTCP, "pass"))
	} else {
		in = append(in,
			asm.JEq.Imm(asm.R5, protoTCP, "l4"),
			asm.JNE.Imm(asm.R5, protoUDP, "pass"),
		)
	}
	in = append(in,
		// A non-first fragment carries no ports.
		asm.LoadMem(asm.R5, asm.R2, ipFrag, asm.Half).WithSymbol("l4"),
		asm.HostTo(asm.BE, asm.R5, asm.Half),
		asm.And.Imm(asm.R5, 0x1fff),
		asm.JNE.Imm(asm.R5, 0, "pass"),
		// The transport header starts after IHL 32-bit words; the mask and
		// shift bound the offset to [0, 60] for the verifier.
		asm.LoadMem(asm.R5, asm.R2, ethLen, asm.Byte),
		asm.And.Imm(asm.R5, 0x0f),
		asm.LSh.Imm(asm.R5, 2),
		asm.JLT.Imm(asm.R5, ipMinLen, "pass"),
		asm.Add.Reg(asm.R2, asm.R5),
		asm.Add.Imm(asm.R2, ethLen),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 4),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
	)
	portIn := func(off int16, next string) asm.Instructions {
		return asm.Instructions{
			asm.LoadMem(asm.R5, asm.R2, off, asm.Half),
			asm.HostTo(asm.BE, asm.R5, asm.Half),
			asm.JLT.Imm(asm.R5, int32(m.PortMin), next),
			asm.JGT.Imm(asm.R5, int32(m.PortMax), next),
			asm.Ja.Label("matched"),
		}
	}
	in = append(in, portIn(peerPort, "other")...)
	if m.EitherPort {
		other := portIn(ownPort, "pass")
		other[0] = other[0].WithSymbol("other")
		in = append(in, other...)
	} else {
		in = append(in, asm.Ja.Label("pass").WithSymbol("other"))
	}
	// A no-op carries the label the matching paths jump to; after it the
	// probability check follows.
	return append(in, asm.Mov.Reg(asm.R1, asm.R1).WithSymbol("matched"))
}

// load loads the program for hook into the kernel.
func (d Drop) load(h Hook) (*ebpf.Program, error) {
	insns, err := d.program(h)
	if err != nil {
		return nil, err
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "gpuchaos_drop",
		Type:         ebpf.SchedCLS,
		Instructions: insns,
		// The program calls no GPL-only helper; the licence string still
		// has to be one the kernel accepts.
		License: "Dual MIT/GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("load %s drop program: %w", h, err)
	}
	return p, nil
}
