package netfault

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	nf "github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
)

// planner turns a fault's resolved values into a planned change.
type planner func(ctx context.Context, t nf.Target, v catalog.Values) (*nf.Change, error)

// Entries lists the mechanisms this package runs, each with the faults
// planners has code for, for the registry (internal/fault/nodeall): a
// fault and mechanism added to planners is registered with it.
func Entries() []fault.Entry {
	faults := map[string][]string{}
	for key := range planners() {
		id, mechanism, _ := strings.Cut(key, "/")
		faults[mechanism] = append(faults[mechanism], id)
	}
	var entries []fault.Entry
	for _, mechanism := range slices.Sorted(maps.Keys(faults)) {
		slices.Sort(faults[mechanism])
		entries = append(entries, fault.Entry{Mechanism: mechanism, Faults: faults[mechanism], Targets: fault.NodeTargets(), New: newFromEnv})
	}
	return entries
}

func newFromEnv(f *catalog.Fault, m *catalog.Mechanism, env fault.Env) (fault.Injector, error) {
	dir, err := env.StateSubdir(f, m, "net")
	if err != nil {
		return nil, err
	}
	in, err := New(f, m.Name, dir)
	if err != nil {
		return nil, err
	}
	return in, nil
}

// planners lists every fault and mechanism this package injects, keyed
// fault/mechanism.
func planners() map[string]planner {
	both := []nf.Hook{nf.Egress, nf.Ingress}
	return map[string]planner{
		"network.rate-limit/tc-tbf": func(ctx context.Context, t nf.Target, v catalog.Values) (*nf.Change, error) {
			rate := v.Int("rate")
			if rate <= 0 {
				return nil, fmt.Errorf("rate %d bytes/s is not positive", rate)
			}
			return nf.PlanRateLimit(ctx, t, uint64(rate))
		},
		"network.loss/cls-bpf": func(ctx context.Context, t nf.Target, v catalog.Values) (*nf.Change, error) {
			return nf.PlanDrop(ctx, t, []nf.Hook{nf.Egress}, nf.Drop{Probability: v.Float("probability")})
		},
		"ebpf.packet-drop/cls-bpf": func(ctx context.Context, t nf.Target, v catalog.Values) (*nf.Change, error) {
			hooks := map[string][]nf.Hook{"egress": {nf.Egress}, "ingress": {nf.Ingress}, "both": both}[v.String("direction")]
			if hooks == nil {
				return nil, fmt.Errorf("direction %q: want egress, ingress or both", v.String("direction"))
			}
			return nf.PlanDrop(ctx, t, hooks, nf.Drop{Probability: v.Float("probability")})
		},
		"network.partition/cls-bpf": func(ctx context.Context, t nf.Target, v catalog.Values) (*nf.Change, error) {
			port := v.Int("port")
			if port < 0 || port > 65535 {
				return nil, fmt.Errorf("port %d is outside [0, 65535]", port)
			}
			return nf.PlanDrop(ctx, t, both, nf.Drop{Probability: 1, Match: &nf.Match{
				Prefix: v.Prefix("cidr"), PortMin: uint16(port), PortMax: uint16(port)}})
		},
		"ebpf.port-blackhole/cls-bpf": func(ctx context.Context, t nf.Target, v catalog.Values) (*nf.Change, error) {
			lo, hi := v.Int("min-port"), v.Int("max-port")
			if lo < 1 || hi > 65535 || hi < lo {
				return nil, fmt.Errorf("port range %d-%d is not within [1, 65535]", lo, hi)
			}
			return nf.PlanDrop(ctx, t, both, nf.Drop{Probability: 1, Match: &nf.Match{
				Prefix: netip.MustParsePrefix("0.0.0.0/0"), PortMin: uint16(lo), PortMax: uint16(hi), TCPOnly: true, EitherPort: true}})
		},
		"network.delay/netem": func(ctx context.Context, t nf.Target, v catalog.Values) (*nf.Change, error) {
			return nf.PlanNetem(ctx, t, v.Duration("delay"), 0)
		},
		"network.loss/netem": func(ctx context.Context, t nf.Target, v catalog.Values) (*nf.Change, error) {
			return nf.PlanNetem(ctx, t, 0, v.Float("probability"))
		},
	}
}

// Injector injects one fault through one mechanism on interfaces of this
// node. It is safe for concurrent use; one mutex serialises its injections
// and recoveries, each a few netlink round trips.
type Injector struct {
	fault     *catalog.Fault
	mechanism string
	plan      planner
	dir       string

	mu sync.Mutex
}

// New returns the injector of f's mechanism, keeping its records under
// stateDir (created on first use). Every injector of one node must share
// the directory, so that one process recovers what another injected.
func New(f *catalog.Fault, mechanism, stateDir string) (*Injector, error) {
	p, ok := planners()[f.ID+"/"+mechanism]
	if !ok {
		return nil, fmt.Errorf("fault %s has no %s mechanism in this package", f.ID, mechanism)
	}
	if stateDir == "" {
		return nil, fmt.Errorf("mechanism %s of %s needs a state directory to recover from a crash", mechanism, f.ID)
	}
	return &Injector{fault: f, mechanism: mechanism, plan: p, dir: stateDir}, nil
}

// Inject plans the change, records it, then applies it. A key already
// recorded is a no-op. When applying fails, what was applied is undone and
// the record removed; if undoing fails too, the record stays for Recover.
func (in *Injector) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	what := fmt.Sprintf("inject %s via %s on %s", in.fault.ID, in.mechanism, where(ref, v))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	path := in.path(key)
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", what, err)
	}
	ch, err := in.plan(ctx, nf.Target{PID: int(v.Int("pid")), Interface: v.String("interface")}, v)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	rec := Record{Version: recordVersion, Key: key, Fault: in.fault.ID, Mechanism: in.mechanism, Change: ch}
	if err := writeRecord(in.dir, path, rec); err != nil {
		return fmt.Errorf("%s: record before acting: %w", what, err)
	}
	if err := ch.Apply(ctx); err != nil {
		// Apply undid its own partial work; undoing again confirms it, with
		// a context that a cancelled inject cannot stop.
		if uerr := ch.Undo(context.WithoutCancel(ctx)); uerr != nil {
			return fmt.Errorf("%s: %w (left for recovery: %w)", what, err, uerr)
		}
		if rerr := os.Remove(path); rerr != nil {
			return fmt.Errorf("%s: %w (record not removed: %w)", what, err, rerr)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Recover undoes the change recorded for key and removes the record. It
// succeeds when nothing is recorded. When the namespace or interface is
// gone (nothing holds the namespace, no device has the interface's index)
// the record is removed too and the error wraps fault.ErrTargetGone; when
// that cannot be proved the record stays and the error wraps
// fault.ErrUnproven.
func (in *Injector) Recover(ctx context.Context, key string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	path := in.path(key)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recover %s: read record: %w", in.fault.ID, err)
	}
	rec, err := DecodeRecord(b)
	if err != nil {
		return fmt.Errorf("recover %s: record %s: %w", in.fault.ID, path, err)
	}
	if rec.Key != key {
		return fmt.Errorf("recover %s: record %s holds key %q, not %q", in.fault.ID, path, rec.Key, key)
	}
	err = rec.Change.Undo(ctx)
	if errors.Is(err, nf.ErrUnproven) {
		return fmt.Errorf("recover %s: %w: %w", in.fault.ID, fault.ErrUnproven, err)
	}
	if errors.Is(err, nf.ErrGone) {
		if rerr := os.Remove(path); rerr != nil {
			return fmt.Errorf("recover %s: remove record: %w", in.fault.ID, rerr)
		}
		return fmt.Errorf("recover %s: %w: %w", in.fault.ID, fault.ErrTargetGone, err)
	}
	if err != nil {
		return fmt.Errorf("recover %s: %w", in.fault.ID, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("recover %s: remove record: %w", in.fault.ID, err)
	}
	return nil
}

func where(ref inventory.Ref, v catalog.Values) string {
	iface := v.String("interface")
	if iface == "" {
		iface = "the default route's interface"
	}
	ns := "this namespace"
	if pid := v.Int("pid"); pid != 0 {
		ns = fmt.Sprintf("the namespace of pid %d", pid)
	}
	if ref.Node != "" {
		return fmt.Sprintf("%s in %s on node %s", iface, ns, ref.Node)
	}
	return fmt.Sprintf("%s in %s", iface, ns)
}

// path is the record file of key. Keys are free text; the hash keeps the
// name safe and fixed-length, and the record holds the key itself.
func (in *Injector) path(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(in.dir, "netfault-"+hex.EncodeToString(sum[:16])+".json")
}

// recordVersion is the layout of Record; a reader refuses other versions
// rather than guess.
const recordVersion = 1

// Record is what Inject persists for one key.
type Record struct {
	Version   int        `json:"version"`
	Key       string     `json:"key"`
	Fault     string     `json:"fault"`
	Mechanism string     `json:"mechanism"`
	Change    *nf.Change `json:"change"`
}

// DecodeRecord parses a record file and checks that it describes a change
// this package could have made, so Recover never acts on a damaged or
// foreign file.
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	if err := statedir.Decode(b, &r); err != nil {
		return Record{}, err
	}
	if r.Version != recordVersion {
		return Record{}, fmt.Errorf("version %d, want %d", r.Version, recordVersion)
	}
	if r.Key == "" || r.Change == nil {
		return Record{}, errors.New("record lacks its key or change")
	}
	if err := r.Change.Validate(); err != nil {
		return Record{}, err
	}
	return r, nil
}

// writeRecord writes rec to path so that a crash leaves either no file or
// the whole record: a temporary file, synced, renamed over path, and the
// directory synced so the rename itself survives.
func writeRecord(dir, path string, rec Record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".netfault-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
