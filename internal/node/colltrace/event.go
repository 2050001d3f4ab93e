package colltrace

import (
	"encoding/binary"
	"fmt"
	"time"
)

// RecordSize is the size in bytes of one ring-buffer record as the probe
// programs write it:
//
//	offset 0  u64 entry time, ktime_get_ns (CLOCK_MONOTONIC)
//	offset 8  u32 thread id
//	offset 12 u32 thread-group id (the process id user space sees)
//	offset 16 u32 symbol id (the program's immediate)
//	offset 20 u32 zero padding
//	offset 24 u64 the call's element-count argument, 0 when not read
//
// Fields are in the host's byte order, as the kernel wrote them.
const RecordSize = 32

// Record is one decoded ring-buffer record.
type Record struct {
	// Time is the entry time in nanoseconds of CLOCK_MONOTONIC.
	Time uint64
	TID  uint32
	// PID is the thread-group id: the process.
	PID uint32
	// Symbol indexes the tracer's list of attached symbols.
	Symbol uint32
	// Count is the call's element-count argument (0 when not read).
	Count uint64
}

// DecodeRecord decodes one ring-buffer record. It refuses a record of any
// other size than RecordSize or with non-zero padding, either of which
// means the reader and the programs disagree on the layout.
func DecodeRecord(b []byte) (Record, error) {
	if len(b) != RecordSize {
		return Record{}, fmt.Errorf("decode record: %d bytes, want %d", len(b), RecordSize)
	}
	o := binary.NativeEndian
	if pad := o.Uint32(b[20:]); pad != 0 {
		return Record{}, fmt.Errorf("decode record: padding is %#x, want 0", pad)
	}
	return Record{
		Time:   o.Uint64(b[0:]),
		TID:    o.Uint32(b[8:]),
		PID:    o.Uint32(b[12:]),
		Symbol: o.Uint32(b[16:]),
		Count:  o.Uint64(b[24:]),
	}, nil
}

// Event is one entry into a traced NCCL function by one process.
type Event struct {
	// PID is the process (thread-group) id.
	PID int
	// Symbol is the function entered, e.g. "ncclAllReduce".
	Symbol string
	// Time is the entry time on CLOCK_MONOTONIC, the clock bpf_ktime_get_ns
	// reads.
	Time time.Duration
	// Count is the element-count argument of the call (0 when not read):
	// the same collective carries the same count on every rank, which is
	// what lines ranks up when tracing starts mid-run.
	Count uint64
}

// Symbol describes one traceable NCCL entry point.
type Symbol struct {
	Name string
	// CountArg is the 1-based position of the element-count argument in
	// the C signature, 0 when the function has none.
	CountArg int
	// Collective is true when every rank of a communicator calls the
	// function in the same order, which the k-th-call matching relies on.
	Collective bool
}

// Symbols lists the NCCL entry points the tracer knows, with their
// signatures' count position (nccl.h, NCCL 2.x).
func Symbols() []Symbol {
	return []Symbol{
		{Name: "ncclAllReduce", CountArg: 3, Collective: true},     // (send, recv, count, type, op, comm, stream)
		{Name: "ncclAllGather", CountArg: 3, Collective: true},     // (send, recv, sendcount, type, comm, stream)
		{Name: "ncclReduceScatter", CountArg: 3, Collective: true}, // (send, recv, recvcount, type, op, comm, stream)
		{Name: "ncclBroadcast", CountArg: 3, Collective: true},     // (send, recv, count, type, root, comm, stream)
		{Name: "ncclReduce", CountArg: 3, Collective: true},        // (send, recv, count, type, op, root, comm, stream)
		{Name: "ncclBcast", CountArg: 2, Collective: true},         // (buff, count, type, root, comm, stream)
		{Name: "ncclSend", CountArg: 2},                            // (send, count, type, peer, comm, stream)
		{Name: "ncclRecv", CountArg: 2},                            // (recv, count, type, peer, comm, stream)
		{Name: "ncclGroupStart"},
		{Name: "ncclGroupEnd"},
	}
}

// DefaultSymbols are the functions traced when none are named: the
// collectives, which every rank calls in the same order. Send, Recv and
// the group calls are left out because ranks call them asymmetrically
// (pipeline stages send to their neighbours only), so the k-th call of one
// rank is not the k-th call of another.
func DefaultSymbols() []string {
	var out []string
	for _, s := range Symbols() {
		if s.Collective {
			out = append(out, s.Name)
		}
	}
	return out
}

// lookupSymbol returns the known symbol called name.
func lookupSymbol(name string) (Symbol, bool) {
	for _, s := range Symbols() {
		if s.Name == name {
			return s, true
		}
	}
	return Symbol{}, false
}
