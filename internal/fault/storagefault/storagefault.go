package storagefault

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/ckptfault"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/mountinfo"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
	nf "github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
)

// FaultID is the one fault this package injects, through MechanismBPF.
const (
	FaultID      = "checkpoint.storage-partition"
	MechanismBPF = "cls-bpf"
)

// Entries lists the mechanism this package runs, for the registry
// (internal/fault/nodeall). On k8s the agent passes the job's pod
// (ckptfault.WithPod, nodeagent's storageCtx) and the fault acts on the
// checkpoint directory as the pod's containers see it.
func Entries() []fault.Entry {
	return []fault.Entry{{Mechanism: MechanismBPF, Targets: fault.NodeTargets(), New: newFromEnv, Faults: []string{FaultID}}}
}

func newFromEnv(f *catalog.Fault, m *catalog.Mechanism, env fault.Env) (fault.Injector, error) {
	dir, err := env.StateSubdir(f, m, "storage")
	if err != nil {
		return nil, err
	}
	in, err := New(f, m, Options{StateDir: dir})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// DefaultMountinfo is the mount table read when Options.Mountinfo is
// empty: this process's, which for a FUSE filesystem mounted on the node
// is the node's.
const DefaultMountinfo = "/proc/self/mountinfo"

// Options configure an Injector.
type Options struct {
	// StateDir is where each injection is recorded before acting;
	// required. Every injector of one node must share it, so that one
	// process recovers what another injected.
	StateDir string
	// Mountinfo is the mount table read to find the server of path;
	// empty means DefaultMountinfo.
	Mountinfo string
	// LookupIP resolves a server's host name to its addresses; nil
	// means net.DefaultResolver.LookupNetIP with network "ip".
	LookupIP func(ctx context.Context, host string) ([]netip.Addr, error)
}

// Injector cuts this node off from one checkpoint storage server. It is
// safe for concurrent use; calls for one key are serialised by the state
// directory.
type Injector struct {
	fault *catalog.Fault
	mech  string
	opts  Options
	dir   *statedir.Dir
}

// New returns the injector of mechanism m of f, which must be cls-bpf of
// checkpoint.storage-partition.
func New(f *catalog.Fault, m *catalog.Mechanism, o Options) (*Injector, error) {
	if err := fault.CheckMechanism("storagefault", f, m, Entries()); err != nil {
		return nil, err
	}
	if o.Mountinfo == "" {
		o.Mountinfo = DefaultMountinfo
	}
	if o.LookupIP == nil {
		o.LookupIP = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	d, err := statedir.OpenFor("storagefault", f.ID, o.StateDir)
	if err != nil {
		return nil, err
	}
	return &Injector{fault: f, mech: m.Name, opts: o, dir: d}, nil
}

// recordVersion is the layout of Record; a reader refuses other versions
// rather than guess.
const recordVersion = 1

// Record is what Inject persists for one key before it acts.
type Record struct {
	Version   int    `json:"version"`
	Key       string `json:"key"`
	Fault     string `json:"fault"`
	Mechanism string `json:"mechanism"`
	// Path is the checkpoint directory the server was found from; empty
	// when the server was given.
	Path string `json:"path,omitempty"`
	// Server is what was cut off; Port 0 is every port.
	Server netip.Prefix `json:"server"`
	Port   int          `json:"port,omitempty"`
	// Change is the netfault change, with the interface's state before.
	Change *nf.Change `json:"change"`
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
	if r.Fault != FaultID || r.Mechanism != MechanismBPF {
		return Record{}, fmt.Errorf("record of %s via %s, not %s via %s", r.Fault, r.Mechanism, FaultID, MechanismBPF)
	}
	if r.Change.Kind != nf.KindBPF {
		return Record{}, fmt.Errorf("change of kind %s, want %s", r.Change.Kind, nf.KindBPF)
	}
	if err := r.Change.Validate(); err != nil {
		return Record{}, err
	}
	return r, nil
}

// Inject finds the server and the interface that leads to it, records the
// planned change, then applies it. A key already recorded is a no-op.
// When applying fails, what was applied is undone and the record
// removed; if undoing fails too, the record stays for Recover.
func (in *Injector) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	err := in.dir.Inject(ctx, key, func() error {
		rec, err := in.plan(ctx, key, ref, v)
		if err != nil {
			return err
		}
		if err := in.dir.Write(key, rec); err != nil {
			return fmt.Errorf("record before acting: %w", err)
		}
		if err := rec.Change.Apply(ctx); err != nil {
			// Apply undid its own partial work; undoing again confirms it,
			// with a context a cancelled inject cannot stop.
			if uerr := rec.Change.Undo(context.WithoutCancel(ctx)); uerr != nil {
				return fmt.Errorf("%w (left for recovery: %w)", err, uerr)
			}
			if rerr := in.dir.Remove(key); rerr != nil {
				return fmt.Errorf("%w (record not removed: %w)", err, rerr)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("inject %s via %s: %w", in.fault.ID, in.mech, err)
	}
	return nil
}

// Recover undoes the change recorded for key and removes the record. It
// succeeds when nothing is recorded. When the namespace or interface is
// gone (netfault.ErrGone: nothing holds the namespace, no device has the
// interface's index) the record is removed too and the error wraps
// fault.ErrTargetGone with netfault's proof; when netfault cannot prove it
// (netfault.ErrUnproven) the record stays and the error wraps
// fault.ErrUnproven.
func (in *Injector) Recover(ctx context.Context, key string) error {
	var gone error
	err := statedir.Recover(in.dir, key, func(b []byte) (Record, error) {
		r, err := DecodeRecord(b)
		if err == nil && r.Key != key {
			err = fmt.Errorf("holds key %q, not %q", r.Key, key)
		}
		return r, err
	}, func(r Record) error {
		err := r.Change.Undo(ctx)
		switch {
		case errors.Is(err, nf.ErrUnproven):
			return fmt.Errorf("cut off %s: %w: %w", r.Server, fault.ErrUnproven, err)
		case errors.Is(err, nf.ErrGone):
			// Nothing left to undo: the record goes, and the caller hears
			// why, with what the search looked at.
			gone = err
			return nil
		case err != nil:
			return fmt.Errorf("cut off %s: %w", r.Server, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recover %s: %w", in.fault.ID, err)
	}
	if gone != nil {
		return fmt.Errorf("recover %s: the interface to the storage server is gone: %w: %w", in.fault.ID, fault.ErrTargetGone, gone)
	}
	return nil
}

// plan resolves the server, the interface routing to it in this process's
// network namespace, and the drop change.
func (in *Injector) plan(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) (Record, error) {
	port := v.Int("port")
	if port < 0 || port > 65535 {
		return Record{}, fmt.Errorf("port %d is outside [0, 65535]", port)
	}
	rec := Record{Version: recordVersion, Key: key, Fault: in.fault.ID, Mechanism: in.mech, Port: int(port)}
	server := v.String("server")
	if server == "" {
		p, table, err := in.pathAndTable(ctx, ref, v)
		if err != nil {
			return Record{}, err
		}
		host, err := serverOf(table, p)
		if err != nil {
			return Record{}, err
		}
		rec.Path, server = p, host
	}
	pfx, err := in.prefix(ctx, server)
	if err != nil {
		return Record{}, err
	}
	rec.Server = pfx
	iface, err := routeInterface(pfx.Addr())
	if err != nil {
		return Record{}, err
	}
	both := []nf.Hook{nf.Egress, nf.Ingress}
	ch, err := nf.PlanDrop(ctx, nf.Target{Interface: iface}, both, nf.Drop{Probability: 1, Match: &nf.Match{
		Prefix: pfx, PortMin: uint16(port), PortMax: uint16(port)}})
	if err != nil {
		return Record{}, fmt.Errorf("cut %s off on %s: %w", pfx, iface, err)
	}
	rec.Change = ch
	return rec, nil
}

// checkpointPath is the path parameter, or the job's checkpoint directory
// as its ranks carry it. Unlike the other checkpoint faults it is not
// resolved or stat'ed: a storage that already hangs would hang the
// injector too, and the mount table needs only the name.
func checkpointPath(ref inventory.Ref, v catalog.Values) (string, error) {
	p := v.String("path")
	if p == "" {
		if ref.Job == "" {
			return "", errors.New("no server, no path and no job to take the checkpoint directory from")
		}
		ranks, err := procfind.Ranks(ref.Job)
		if err != nil {
			return "", fmt.Errorf("find the checkpoint directory of job %s: %w", ref.Job, err)
		}
		for _, r := range ranks {
			if d, ok := procfind.Environ(r.Env).Lookup(ckptfault.EnvCheckpointDir); ok && d != "" {
				p = d
				break
			}
		}
		if p == "" {
			return "", fmt.Errorf("no server, no path and no rank of job %s carries %s", ref.Job, ckptfault.EnvCheckpointDir)
		}
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", fmt.Errorf("checkpoint directory %q is not a clean absolute path", p)
	}
	return p, nil
}

// pathAndTable is the checkpoint directory and the mount table it is
// looked up in: for a pod (ckptfault.WithPod), the path in its containers
// and their own table (ckptfault.PodMountTable), since the pod's volume
// is mounted at its path only in the containers' mount namespace; else
// checkpointPath and Options.Mountinfo.
func (in *Injector) pathAndTable(ctx context.Context, ref inventory.Ref, v catalog.Values) (path, table string, err error) {
	if pod, ok := ckptfault.PodFrom(ctx); ok {
		path, table, err = ckptfault.PodMountTable(pod, v)
		if err != nil {
			return "", "", fmt.Errorf("pod %s: %w", pod.UID, err)
		}
		return path, table, nil
	}
	path, err = checkpointPath(ref, v)
	return path, in.opts.Mountinfo, err
}

// serverOf reads the mount table and returns the server of the mount
// holding path.
func serverOf(table, path string) (string, error) {
	f, err := os.Open(table)
	if err != nil {
		return "", fmt.Errorf("read the mount table: %w", err)
	}
	defer f.Close()
	mounts, err := mountinfo.Parse(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", table, err)
	}
	m, ok := mountinfo.Containing(mounts, path)
	if !ok {
		return "", fmt.Errorf("no mount holds %s in %s", path, table)
	}
	host, err := ServerOf(m)
	if errors.Is(err, ErrNotNetwork) {
		return "", fmt.Errorf("%s is on %s (%s mounted at %s), not a network filesystem (NFS, CIFS or sshfs): name its server with the server parameter", path, m.FSType, m.Source, m.Point)
	}
	if err != nil {
		return "", fmt.Errorf("find the storage server of %s: %w", path, err)
	}
	return host, nil
}

// prefix turns the server parameter or a mount's host into the IPv4
// prefix to drop: an address is its /32, a CIDR itself, and a host name
// its first IPv4 address, the one a client connects to first.
func (in *Injector) prefix(ctx context.Context, server string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(server); err == nil {
		if !p.Addr().Is4() {
			return netip.Prefix{}, fmt.Errorf("server %s is not IPv4: the cls-bpf programs parse IPv4 only", server)
		}
		return p.Masked(), nil
	}
	if a, err := netip.ParseAddr(server); err == nil {
		a = a.Unmap()
		if !a.Is4() {
			return netip.Prefix{}, fmt.Errorf("server %s is not IPv4: the cls-bpf programs parse IPv4 only", server)
		}
		return netip.PrefixFrom(a, 32), nil
	}
	addrs, err := in.opts.LookupIP(ctx, server)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("resolve storage server %s: %w", server, err)
	}
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			return netip.PrefixFrom(a, 32), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("storage server %s has no IPv4 address (%v): the cls-bpf programs parse IPv4 only", server, addrs)
}

// routeInterface names the interface this process's network namespace
// routes dst through. A server on this node (routed through lo) is
// refused: dropping on lo would cut the node off from itself.
func routeInterface(dst netip.Addr) (string, error) {
	// The thread group leader's namespace, not whichever this goroutine's
	// thread is in (see netfault's nsPath).
	ns, err := netns.GetFromPath("/proc/self/ns/net")
	if err != nil {
		return "", fmt.Errorf("open this process's network namespace: %w", err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return "", fmt.Errorf("open netlink in this process's network namespace: %w", err)
	}
	defer h.Close()
	routes, err := h.RouteGet(dst.AsSlice())
	if err != nil {
		return "", fmt.Errorf("find the route to %s: %w", dst, err)
	}
	if len(routes) == 0 || routes[0].LinkIndex == 0 {
		return "", fmt.Errorf("no route to %s", dst)
	}
	l, err := h.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return "", fmt.Errorf("find the interface of the route to %s: %w", dst, err)
	}
	if l.Attrs().Flags&net.FlagLoopback != 0 {
		return "", fmt.Errorf("storage server %s is an address of this node (routed through %s): nothing to cut", dst, l.Attrs().Name)
	}
	return l.Attrs().Name, nil
}
