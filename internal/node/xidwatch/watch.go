package xidwatch

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/xid"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
)

// Resolver maps a PCI bus id in the kernel's form (0000:18:00) to the GPU's
// index and UUID, reporting false for a bus id it does not know. It is
// called from the watcher's goroutine and must not block.
type Resolver func(pci string) (index int, uuid string, ok bool)

// Source is a stream of kernel log records. *kmsg.Follower is the real one;
// Run calls fn for each record until ctx is done and returns nil then.
type Source interface {
	Run(ctx context.Context, fn func(kmsg.Record)) error
	Lost() uint64
}

// Event is one XID read from the kernel log.
type Event struct {
	// Time is when the watcher read the record (wall clock).
	Time time.Time `json:"time"`
	// Uptime is the kernel's stamp on the record, time since boot.
	Uptime time.Duration `json:"uptime"`
	// Seq is the record's sequence number in the kernel log.
	Seq uint64 `json:"seq"`
	// GPU is the GPU's index, or -1 when the resolver does not know the
	// bus id.
	GPU  int    `json:"gpu"`
	UUID string `json:"uuid,omitempty"`
	// PCI is the bus id in the kernel's form, 0000:18:00.
	PCI    string     `json:"pci"`
	Code   int        `json:"code"`
	Action xid.Action `json:"action"`
	// PID and Process are the process the driver named; nil when it
	// printed <unknown>.
	PID     *int    `json:"pid"`
	Process *string `json:"process"`
	// Line is the record's text.
	Line string `json:"line"`
}

// Options configure a Watcher. The zero value follows /dev/kmsg and leaves
// every XID's GPU unresolved.
type Options struct {
	// Kmsg says where to read the kernel log when Source is nil.
	Kmsg kmsg.Options
	// Source, when set, replaces the kernel log (tests, replays).
	Source Source
	// Resolve maps bus ids to GPUs; nil resolves none (GPU -1).
	Resolve Resolver
	// OnXID, when set, is called for each XID from the watcher's
	// goroutine, in log order, before Wait and probes see it. It must not
	// block: records keep arriving, and the kernel drops the oldest when
	// a reader falls behind.
	OnXID func(Event)
	// History is how many recent events are kept for probes and Events;
	// 0 means 4096.
	History int
	// Now is the clock stamping events; nil means time.Now.
	Now func() time.Time
}

// Watcher follows the kernel log for XIDs. Its methods are safe for
// concurrent use.
type Watcher struct {
	opts Options
	src  Source

	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done closes

	mu      sync.Mutex
	counts  map[int]uint64
	last    map[int]Event    // by GPU index, resolved events only
	lastPCI map[string]Event // by bus id, every event
	history []Event          // ring, oldest first once full
	waiters map[*waiter]struct{}
}

type waiter struct {
	match func(Event) bool
	ch    chan Event // buffered 1
}

// Start opens the kernel log positioned at its end and follows it in a
// goroutine until ctx is done or Stop is called. Every XID logged after
// Start returns is seen.
func Start(ctx context.Context, opts Options) (*Watcher, error) {
	if opts.History <= 0 {
		opts.History = 4096
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	src := opts.Source
	if src == nil {
		f, err := kmsg.Open(opts.Kmsg)
		if err != nil {
			return nil, fmt.Errorf("start XID watcher: %w", err)
		}
		src = f
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watcher{
		opts: opts, src: src, cancel: cancel, done: make(chan struct{}),
		counts: map[int]uint64{}, last: map[int]Event{}, lastPCI: map[string]Event{},
		waiters: map[*waiter]struct{}{},
	}
	go func() {
		defer close(w.done)
		if err := src.Run(ctx, w.handle); err != nil {
			w.err = fmt.Errorf("XID watcher: %w", err)
		}
	}()
	return w, nil
}

// Stop stops following and waits for the goroutine to end. It returns the
// error that ended the watch early, if any.
func (w *Watcher) Stop() error {
	w.cancel()
	<-w.done
	return w.err
}

// Done is closed when the watcher has stopped.
func (w *Watcher) Done() <-chan struct{} { return w.done }

// handle turns one record into an event, when it holds an XID.
func (w *Watcher) handle(r kmsg.Record) {
	x, ok := xid.ParseLine(r.Message)
	if !ok || x.Kind != xid.KindXID {
		return
	}
	ev := Event{
		Time: w.opts.Now(), Uptime: r.Time, Seq: r.Seq, GPU: -1, PCI: x.PCI,
		Code: x.Code, Action: x.Action, PID: x.PID, Process: x.Process, Line: r.Message,
	}
	if w.opts.Resolve != nil {
		if idx, uuid, ok := w.opts.Resolve(x.PCI); ok {
			ev.GPU, ev.UUID = idx, uuid
		}
	}
	if w.opts.OnXID != nil {
		w.opts.OnXID(ev)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[ev.Code]++
	w.lastPCI[ev.PCI] = ev
	if ev.GPU >= 0 {
		w.last[ev.GPU] = ev
	}
	if len(w.history) == w.opts.History {
		w.history = append(w.history[:0], w.history[1:]...)
	}
	w.history = append(w.history, ev)
	for wt := range w.waiters {
		if wt.match == nil || wt.match(ev) {
			wt.ch <- ev
			delete(w.waiters, wt)
		}
	}
}

// Lost returns how many kernel log records were lost before the watcher
// read them (ring buffer overruns); an XID among them was missed.
func (w *Watcher) Lost() uint64 { return w.src.Lost() }

// Counts returns how many XIDs of each code were seen.
func (w *Watcher) Counts() map[int]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.counts)
}

// Last returns the last XID seen on GPU index gpu, as DCGM's
// DCGM_FI_DEV_XID_ERRORS field reports it.
func (w *Watcher) Last(gpu int) (Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev, ok := w.last[gpu]
	return ev, ok
}

// LastByPCI returns the last XID seen for a bus id in the kernel's form,
// resolved or not.
func (w *Watcher) LastByPCI(pci string) (Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev, ok := w.lastPCI[pci]
	return ev, ok
}

// Now reads the watcher's clock (Options.Now), the one its events are
// stamped with, so that whoever compares an event's time with a moment of
// its own (a probe's start) reads the same clock.
func (w *Watcher) Now() time.Time { return w.opts.Now() }

// Events returns the recent events, oldest first (at most Options.History).
func (w *Watcher) Events() []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.history)
}

// Wait blocks until an XID for which match reports true (any XID when
// match is nil) is read after Wait was called, and returns it. It returns
// ctx's error when ctx ends first, and an error when the watcher stops.
// To catch an XID caused by an action, call Wait from a goroutine started
// before the action, or look in Events.
func (w *Watcher) Wait(ctx context.Context, match func(Event) bool) (Event, error) {
	wt := &waiter{match: match, ch: make(chan Event, 1)}
	w.mu.Lock()
	w.waiters[wt] = struct{}{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.waiters, wt)
		w.mu.Unlock()
	}()
	select {
	case ev := <-wt.ch:
		return ev, nil
	case <-ctx.Done():
		return Event{}, ctx.Err()
	case <-w.done:
		// An event delivered just before the stop still counts.
		select {
		case ev := <-wt.ch:
			return ev, nil
		default:
		}
		if w.err != nil {
			return Event{}, w.err
		}
		return Event{}, fmt.Errorf("XID watcher stopped")
	}
}
