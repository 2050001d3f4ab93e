package colltrace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// Options configure Start. Zero values take the documented defaults.
type Options struct {
	// Lib is the shared library (libnccl.so.2) or executable to probe. When
	// empty, it is found in the maps of PIDs; one of the two is required.
	Lib string
	// PIDs are the processes to trace, one rank each. Empty means every
	// process that calls the traced functions in Lib: uprobes attach to
	// the file, so any process mapping it is seen.
	PIDs []int
	// Symbols are the functions to trace; default DefaultSymbols(). Names
	// the library does not export are skipped (and listed by Skipped).
	Symbols []string
	// Analysis sets the verdict thresholds.
	Analysis AnalysisOptions
	// RingBytes is the ring buffer's size, a power of two multiple of the
	// page size; default 1 MiB (32,768 records).
	RingBytes int
	// ProcRoot is where /proc is mounted; default "/proc".
	ProcRoot string
	// Logger receives reader errors; nil means none are logged.
	Logger *slog.Logger
}

// Tracer traces NCCL entry points with uprobes and feeds a Tracker. It
// reads from Start until Close.
type Tracer struct {
	opts     Options
	tracker  *Tracker
	names    []string // attached symbols, indexed by symbol id
	skipped  []string
	libs     []string
	pids     map[int]bool // nil: every process
	events   *ebpf.Map
	lost     *ebpf.Map
	progs    []*ebpf.Program
	links    []link.Link
	reader   *ringbuf.Reader
	done     chan struct{}
	stopOnce sync.Once
	closeErr error

	mu   sync.Mutex
	seen map[int]bool
}

// Start resolves the library, loads one probe program per symbol, attaches
// them and starts reading events. It needs CAP_BPF and CAP_PERFMON (or
// root) and a kernel with uprobes and BPF ring buffers (5.8+). Close
// detaches everything; ctx ending stops the reader too.
func Start(ctx context.Context, opts Options) (*Tracer, error) {
	if opts.Lib == "" && len(opts.PIDs) == 0 {
		return nil, errors.New("start collective tracer: neither a library nor a pid given")
	}
	if len(opts.Symbols) == 0 {
		opts.Symbols = DefaultSymbols()
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = 1 << 20
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	var syms []Symbol
	for _, n := range opts.Symbols {
		s, ok := lookupSymbol(n)
		if !ok {
			return nil, fmt.Errorf("start collective tracer: %s is not an NCCL function the tracer knows", n)
		}
		syms = append(syms, s)
	}
	libs, err := resolveLibs(opts)
	if err != nil {
		return nil, fmt.Errorf("start collective tracer: %w", err)
	}
	t := &Tracer{opts: opts, tracker: NewTracker(opts.Analysis), libs: libs, done: make(chan struct{}), seen: map[int]bool{}}
	if len(opts.PIDs) > 0 {
		t.pids = map[int]bool{}
		for _, pid := range opts.PIDs {
			t.pids[pid] = true
			t.addRank(pid)
		}
	}
	if err := t.attach(syms); err != nil {
		t.release()
		return nil, fmt.Errorf("start collective tracer: %w", err)
	}
	go t.read(ctx)
	return t, nil
}

// resolveLibs returns the distinct library files to probe: Lib, or the
// library each pid maps, one path per inode. Uprobes attach to an inode,
// so two processes mapping the same file need one probe; processes in
// containers with their own copy need one each.
func resolveLibs(opts Options) ([]string, error) {
	var paths []string
	if opts.Lib != "" {
		paths = append(paths, opts.Lib)
	} else {
		for _, pid := range opts.PIDs {
			p, err := ProcLib(opts.ProcRoot, pid, "libnccl.so")
			if err != nil {
				return nil, err
			}
			paths = append(paths, p)
		}
	}
	type key struct{ dev, ino uint64 }
	seen := map[key]bool{}
	var out []string
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return nil, fmt.Errorf("stat %s: %w", p, err)
		}
		k := key{uint64(st.Dev), st.Ino}
		if !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	return out, nil
}

func (t *Tracer) attach(syms []Symbol) error {
	var err error
	t.events, err = ebpf.NewMap(&ebpf.MapSpec{Name: "coll_events", Type: ebpf.RingBuf, MaxEntries: uint32(t.opts.RingBytes)})
	if err != nil {
		return fmt.Errorf("create ring buffer: %w", err)
	}
	t.lost, err = ebpf.NewMap(&ebpf.MapSpec{Name: "coll_lost", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("create lost counter: %w", err)
	}
	exes := make([]*link.Executable, len(t.libs))
	for i, p := range t.libs {
		if exes[i], err = link.OpenExecutable(p); err != nil {
			return fmt.Errorf("open %s: %w", p, err)
		}
	}
	for _, s := range syms {
		id := uint32(len(t.names))
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "coll_entry",
			Type:         ebpf.Kprobe,
			License:      "Dual MIT/GPL",
			Instructions: entryProgram(t.events.FD(), t.lost.FD(), id, countOffset(s.CountArg)),
		})
		if err != nil {
			return fmt.Errorf("load probe for %s: %w", s.Name, err)
		}
		attached := false
		for i, exe := range exes {
			l, err := exe.Uprobe(s.Name, prog, nil)
			if errors.Is(err, link.ErrNoSymbol) {
				continue
			}
			if err != nil {
				prog.Close()
				return fmt.Errorf("attach uprobe %s in %s: %w", s.Name, t.libs[i], err)
			}
			t.links = append(t.links, l)
			attached = true
		}
		if !attached {
			prog.Close()
			t.skipped = append(t.skipped, s.Name)
			continue
		}
		t.progs = append(t.progs, prog)
		t.names = append(t.names, s.Name)
	}
	if len(t.names) == 0 {
		return fmt.Errorf("none of %v is exported by %v", t.opts.Symbols, t.libs)
	}
	t.reader, err = ringbuf.NewReader(t.events)
	if err != nil {
		return fmt.Errorf("open ring buffer reader: %w", err)
	}
	return nil
}

// entryProgram builds the probe run on every entry of one symbol: it
// reserves a record in the ring buffer and fills it with the entry time,
// thread and process ids, the symbol id and the count argument (read from
// the saved registers at countOff, or 0 when countOff is negative). When
// the ring is full it counts the loss instead.
func entryProgram(events, lost int, id uint32, countOff int16) asm.Instructions {
	count := asm.Mov.Imm(asm.R9, 0)
	if countOff >= 0 {
		count = asm.LoadMem(asm.R9, asm.R1, countOff, asm.DWord)
	}
	return asm.Instructions{
		count, // before any call: r1 holds the saved registers only until then
		asm.FnGetCurrentPidTgid.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.LoadMapPtr(asm.R1, events),
		asm.Mov.Imm(asm.R2, RecordSize),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JEq.Imm(asm.R0, 0, "full"),
		asm.StoreMem(asm.R0, 0, asm.R8, asm.DWord),
		asm.StoreMem(asm.R0, 8, asm.R7, asm.Word), // low half: thread id
		asm.RSh.Imm(asm.R7, 32),
		asm.StoreMem(asm.R0, 12, asm.R7, asm.Word), // high half: thread-group id
		asm.StoreImm(asm.R0, 16, int64(id), asm.Word),
		asm.StoreImm(asm.R0, 20, 0, asm.Word),
		asm.StoreMem(asm.R0, 24, asm.R9, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.Mov.Imm(asm.R2, 0),
		asm.FnRingbufSubmit.Call(),
		asm.Ja.Label("out"),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word).WithSymbol("full"),
		asm.LoadMapPtr(asm.R1, lost),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}
}

// countOffset is the offset in struct pt_regs of the n-th (1-based)
// integer argument under the platform's C calling convention, -1 when
// unknown (the count is then not read).
func countOffset(n int) int16 {
	if n <= 0 {
		return -1
	}
	switch runtime.GOARCH {
	case "amd64":
		// struct pt_regs: r15 r14 r13 r12 bp bx r11 r10 r9 r8 ax cx dx si di.
		offs := []int16{112, 104, 96, 88, 72, 64} // di si dx cx r8 r9
		if n <= len(offs) {
			return offs[n-1]
		}
	case "arm64":
		if n <= 8 {
			return int16(8 * (n - 1)) // regs[0..7]
		}
	}
	return -1
}

// read drains the ring buffer into the tracker until Close or ctx ends.
func (t *Tracer) read(ctx context.Context) {
	defer close(t.done)
	stop := context.AfterFunc(ctx, func() { t.reader.Close() })
	defer stop()
	var rec ringbuf.Record
	for {
		if err := t.reader.ReadInto(&rec); err != nil {
			if !errors.Is(err, os.ErrClosed) && t.opts.Logger != nil {
				t.opts.Logger.Error("read collective trace", "err", err)
			}
			return
		}
		r, err := DecodeRecord(rec.RawSample)
		if err != nil || int(r.Symbol) >= len(t.names) {
			if t.opts.Logger != nil {
				t.opts.Logger.Warn("skip malformed trace record", "err", err, "symbol", r.Symbol)
			}
			continue
		}
		pid := int(r.PID)
		if t.pids != nil && !t.pids[pid] {
			continue
		}
		t.addRank(pid)
		t.tracker.Add(Event{PID: pid, Symbol: t.names[r.Symbol], Time: time.Duration(r.Time), Count: r.Count})
	}
}

// addRank labels a process from its environment the first time it is
// seen.
func (t *Tracer) addRank(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen[pid] {
		return
	}
	t.seen[pid] = true
	// An unreadable environment leaves the pid label, which is all the
	// rank label adds to.
	r, _ := ProcRank(t.opts.ProcRoot, pid)
	t.tracker.AddRank(r)
}

// Attached returns the symbols probed, and Skipped those the library does
// not export.
func (t *Tracer) Attached() []string { return slices.Clone(t.names) }

// Skipped returns the requested symbols no probed file exports.
func (t *Tracer) Skipped() []string { return slices.Clone(t.skipped) }

// Libs returns the files probed, one per inode.
func (t *Tracer) Libs() []string { return slices.Clone(t.libs) }

// Report judges the events read so far at the current time.
func (t *Tracer) Report() Report {
	r := t.tracker.Report(Monotonic())
	var lost uint64
	if err := t.lost.Lookup(uint32(0), &lost); err == nil && lost > 0 {
		r.Lost = lost
		r.Notes = append(r.Notes, fmt.Sprintf("%d events were lost to a full ring buffer: call counts, and so the lining up of ranks, may be off", lost))
	}
	return r
}

// Close detaches the probes, stops the reader and frees the maps and
// programs. It is safe to call more than once.
func (t *Tracer) Close() error {
	t.stopOnce.Do(func() {
		// Detach first so no new records arrive, then stop the reader.
		var errs []error
		for _, l := range t.links {
			errs = append(errs, l.Close())
		}
		t.links = nil
		errs = append(errs, t.reader.Close())
		<-t.done
		t.release()
		t.closeErr = errors.Join(errs...)
	})
	return t.closeErr
}

// release frees what attach made, in any state of completion.
func (t *Tracer) release() {
	for _, l := range t.links {
		l.Close()
	}
	t.links = nil
	if t.reader != nil {
		t.reader.Close()
	}
	for _, p := range t.progs {
		p.Close()
	}
	t.progs = nil
	if t.events != nil {
		t.events.Close()
	}
	if t.lost != nil {
		t.lost.Close()
	}
}

// Monotonic returns CLOCK_MONOTONIC as a duration since boot, the clock
// of the events' times.
func Monotonic() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// CLOCK_MONOTONIC cannot fail on Linux; fall back to zero rather
		// than panic.
		return 0
	}
	return time.Duration(ts.Nano())
}
