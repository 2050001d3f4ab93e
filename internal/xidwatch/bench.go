package xidwatch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/kmsg"
	"github.com/gpuchaos/gpuchaos/internal/xid"
)

// BenchOptions configure Bench. Zero values take the defaults in brackets.
type BenchOptions struct {
	// PCI is the bus id the lines name (required), in any form
	// xid.NormalizePCI reads.
	PCI string
	// Code is the XID written [13: an application error, which implies
	// no reset to anything that acts on it].
	Code int
	// Injections is how many single lines are timed [200], one every
	// Interval [10ms].
	Injections int
	Interval   time.Duration
	// Burst is how many lines are written over BurstOver [1000 over 1s].
	Burst     int
	BurstOver time.Duration
	// Level is the syslog level the lines are written at [3, KERN_ERR,
	// the driver's]. Levels below the console log level (usually 4) are
	// also printed on the console, synchronously: on a serial console
	// that costs milliseconds per line, for the driver's lines too.
	Level int
	// Kmsg is where the watcher reads; Writer where lines are written
	// [both /dev/kmsg].
	Kmsg   kmsg.Options
	Writer kmsg.Writer
	// Sink, when set, is called with each event inside the timed path, as
	// the agent's exporter would be (RecordXID).
	Sink func(Event)
}

// BenchResult is what Bench measured.
type BenchResult struct {
	Level      int `json:"level"`
	Injections int `json:"injections"`
	Seen       int `json:"seen"`
	// Latencies from just before the write to the watcher's callback
	// (after Sink returned).
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
	// Burst: lines written, lines the watcher saw, and how long writing
	// them took.
	Burst      int           `json:"burst"`
	BurstSeen  int           `json:"burst_seen"`
	BurstWrite time.Duration `json:"burst_write_ns"`
	// Lost is the kernel log records the watcher lost over the whole run.
	Lost uint64 `json:"lost"`
}

// benchPID is the first pid the bench lines name; each line names its own,
// so that each is recognised by a field a real line has rather than by a
// marker no driver would print.
const benchPID = 4000000

// Bench measures how fast XID lines written to the kernel log reach a
// watcher, and whether a burst loses any. It writes real XID lines, so it
// needs root and should name code 13 on a machine others use.
func Bench(ctx context.Context, o BenchOptions) (BenchResult, error) {
	if o.Code == 0 {
		o.Code = 13
	}
	if o.Level == 0 {
		o.Level = kmsg.LevelErr
	}
	if o.Injections <= 0 {
		o.Injections = 200
	}
	if o.Interval <= 0 {
		o.Interval = 10 * time.Millisecond
	}
	if o.Burst <= 0 {
		o.Burst = 1000
	}
	if o.BurstOver <= 0 {
		o.BurstOver = time.Second
	}
	pci, ok := xid.NormalizePCI(o.PCI)
	if !ok {
		return BenchResult{}, fmt.Errorf("xid bench: %q is not a PCI bus id", o.PCI)
	}
	total := o.Injections + o.Burst

	var mu sync.Mutex
	seenAt := make(map[int]time.Time, total)
	got := make(chan struct{}, total)
	w, err := Start(ctx, Options{Kmsg: o.Kmsg, OnXID: func(ev Event) {
		if ev.PCI != pci || ev.Code != o.Code || ev.PID == nil {
			return
		}
		i := *ev.PID - benchPID
		if i < 0 || i >= total {
			return
		}
		if o.Sink != nil {
			o.Sink(ev)
		}
		now := time.Now()
		mu.Lock()
		if _, dup := seenAt[i]; !dup {
			seenAt[i] = now
			got <- struct{}{}
		}
		mu.Unlock()
	}})
	if err != nil {
		return BenchResult{}, err
	}
	defer w.Stop()

	line := func(i int) string { return xid.FormatLine(pci, o.Code, benchPID+i, "python3", "") }
	res := BenchResult{Level: o.Level, Injections: o.Injections, Burst: o.Burst}
	lat := make([]time.Duration, 0, o.Injections)
	for i := range o.Injections {
		t0 := time.Now()
		if err := o.Writer.Write(o.Level, line(i)); err != nil {
			return res, fmt.Errorf("xid bench: %w", err)
		}
		select {
		case <-got:
		case <-time.After(time.Second):
			// Counted as missing; a late arrival is drained below.
		case <-ctx.Done():
			return res, ctx.Err()
		}
		mu.Lock()
		if t1, ok := seenAt[i]; ok {
			lat = append(lat, t1.Sub(t0))
		}
		mu.Unlock()
		if err := sleep(ctx, o.Interval); err != nil {
			return res, err
		}
	}
	res.Seen = len(lat)
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		res.P50 = lat[(n-1)*50/100]
		res.P99 = lat[(n-1)*99/100]
		res.Max = lat[n-1]
	}

	start := time.Now()
	for j := range o.Burst {
		// Pace the burst evenly over BurstOver.
		if d := time.Until(start.Add(o.BurstOver * time.Duration(j) / time.Duration(o.Burst))); d > 0 {
			if err := sleep(ctx, d); err != nil {
				return res, err
			}
		}
		if err := o.Writer.Write(o.Level, line(o.Injections+j)); err != nil {
			return res, fmt.Errorf("xid bench: burst line %d: %w", j, err)
		}
	}
	res.BurstWrite = time.Since(start)
	deadline := time.After(2 * time.Second)
wait:
	for {
		mu.Lock()
		n := 0
		for i := o.Injections; i < total; i++ {
			if _, ok := seenAt[i]; ok {
				n++
			}
		}
		mu.Unlock()
		res.BurstSeen = n
		if n == o.Burst {
			break
		}
		select {
		case <-got:
		case <-deadline:
			break wait
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	res.Lost = w.Lost()
	return res, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
