package xidfault

import (
	"context"
	"fmt"
	"sync"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
)

// Entries lists the kernel-log mechanism for the registry
// (internal/fault/nodeall). It serves every fault of the catalogue that
// has the mechanism, so a new hardware fault with a kernel-log mechanism
// and an XID in its signature needs nothing here; New refuses a fault
// without a line.
func Entries() []fault.Entry {
	return []fault.Entry{{Mechanism: catalog.MechanismKernelLog, Targets: fault.NodeTargets(), New: newFromEnv}}
}

func newFromEnv(f *catalog.Fault, m *catalog.Mechanism, env fault.Env) (fault.Injector, error) {
	if env.Kmsg == nil {
		return nil, fmt.Errorf("mechanism %s of %s needs the kernel log of a local node", m.Name, f.ID)
	}
	in, err := New(f, env.Kmsg)
	if err != nil {
		return nil, err
	}
	return in, nil
}

// Level is the syslog level the driver prints XID lines at: KERN_ERR.
const Level = kmsg.LevelErr

// line says what one fault writes: the code, and the pid and process the
// line names (-1 and "" print <unknown>, as the driver does for errors no
// channel owns).
type line struct {
	code    int
	pid     int
	process string
}

// lineFor returns the line a fault's kernel-log mechanism writes for the
// resolved values, and false for a fault this package does not inject.
// hardware.xid writes the code, pid and process it is given; every other
// fault the code of its signature (catalog.Signature.XID), which no
// channel owns.
func lineFor(f *catalog.Fault, v catalog.Values) (line, bool) {
	if f.ID == "hardware.xid" {
		return line{code: int(v.Int("code")), pid: int(v.Int("pid")), process: v.String("process")}, true
	}
	if code := f.Signature.XID; code != 0 {
		return line{code: code, pid: -1}, true
	}
	return line{}, false
}

// Injector writes a fault's XID line to the kernel log.
type Injector struct {
	fault *catalog.Fault
	w     fault.KmsgWriter

	// mu serialises injections so that two Injects of one key cannot both
	// write; it is held across the write, which takes microseconds (or a
	// few milliseconds where a serial console prints KERN_ERR lines).
	mu      sync.Mutex
	written map[string]bool
}

// New returns the kernel-log injector for f, writing through w. It fails
// for a fault whose kernel-log mechanism this package does not know.
func New(f *catalog.Fault, w fault.KmsgWriter) (*Injector, error) {
	if _, ok := lineFor(f, catalog.Values{}); !ok {
		return nil, fmt.Errorf("fault %s has no kernel-log XID line", f.ID)
	}
	return &Injector{fault: f, w: w, written: map[string]bool{}}, nil
}

// Line returns the exact text Inject writes for ref and v, without the
// priority prefix.
func (in *Injector) Line(ref inventory.Ref, v catalog.Values) (string, error) {
	l, _ := lineFor(in.fault, v)
	if _, ok := xid.Lookup(l.code); !ok {
		return "", fmt.Errorf("XID code %d is not in the XID table", l.code)
	}
	pci, ok := xid.NormalizePCI(ref.PCI)
	if !ok {
		return "", fmt.Errorf("target GPU %d has no usable PCI bus id (%q)", ref.GPU, ref.PCI)
	}
	return xid.FormatLine(pci, l.code, l.pid, l.process, ""), nil
}

// Inject writes the fault's line for the GPU ref names, once per key: a
// second Inject of a key already injected writes nothing. Across process
// restarts the engine's ledger keeps the promise: it records the key before
// Inject and, after a crash, recovers pending keys instead of injecting
// them again.
func (in *Injector) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inject %s on gpu %d: %w", in.fault.ID, ref.GPU, err)
	}
	text, err := in.Line(ref, v)
	if err != nil {
		return fmt.Errorf("inject %s: %w", in.fault.ID, err)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.written[key] {
		return nil
	}
	if err := in.w.Write(Level, text); err != nil {
		return fmt.Errorf("inject %s on gpu %d (%s): %w", in.fault.ID, ref.GPU, ref.PCI, err)
	}
	in.written[key] = true
	return nil
}

// Recover forgets key and succeeds. It cannot undo anything: the line
// stays in the kernel log, and a watcher that acted on it must be recovered
// through its own means.
func (in *Injector) Recover(_ context.Context, key string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.written, key)
	return nil
}
