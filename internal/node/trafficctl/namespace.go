package trafficctl

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrGone reports that the namespace or the interface a change was planned
// for no longer exists, so nothing of the change can still be in effect.
var ErrGone = errors.New("network namespace or interface gone")

// Target names an interface in a network namespace.
type Target struct {
	// PID is a process living in the namespace (one of a pod's processes);
	// 0 means the namespace of the calling process.
	PID int `json:"pid"`
	// Interface is the interface's name; empty means the interface that
	// carries the namespace's default route (IPv4 first, then IPv6).
	Interface string `json:"interface"`
}

// Namespace identifies a network namespace: the process it was found
// through, and the device and inode of its nsfs file, which stay the
// namespace's own for its whole life. A pid recycled by a process in
// another namespace does not match them.
type Namespace struct {
	PID   int    `json:"pid"`
	Dev   uint64 `json:"dev"`
	Inode uint64 `json:"inode"`
}

func (n Namespace) String() string {
	who := "this process"
	if n.PID != 0 {
		who = fmt.Sprintf("pid %d", n.PID)
	}
	return fmt.Sprintf("net namespace %d:%d of %s", n.Dev, n.Inode, who)
}

// conn is an open namespace with a netlink handle bound to it.
type conn struct {
	ns netns.NsHandle
	h  *netlink.Handle
	id Namespace
}

// nsPath is the nsfs file of pid's network namespace. For pid 0 it is the
// thread group leader's, not the calling thread's: a thread of this process
// may be switched into another namespace for a moment (netlink does so
// while it opens a socket), the leader never is by this package.
func nsPath(pid int) string {
	if pid == 0 {
		return "/proc/self/ns/net"
	}
	return fmt.Sprintf("/proc/%d/ns/net", pid)
}

// dial opens pid's network namespace. A missing process is errNoProcess.
func dial(pid int) (*conn, error) {
	if pid < 0 {
		return nil, fmt.Errorf("pid %d is negative", pid)
	}
	ns, err := netns.GetFromPath(nsPath(pid))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return nil, fmt.Errorf("open network namespace of pid %d: %w", pid, errNoProcess)
		}
		return nil, fmt.Errorf("open network namespace of pid %d: %w", pid, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(ns), &st); err != nil {
		ns.Close()
		return nil, fmt.Errorf("stat network namespace of pid %d: %w", pid, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("open netlink in network namespace of pid %d: %w", pid, err)
	}
	return &conn{ns: ns, h: h, id: Namespace{PID: pid, Dev: st.Dev, Inode: st.Ino}}, nil
}

var errNoProcess = errors.New("no such process")

// redial opens the namespace a change was planned in. The process it was
// found through may have exited, or its pid be another process's now, while
// the namespace lives on (a pod's namespace outlives a restarting
// container, a named namespace outlives every process): then it is found
// by its inode wherever something still holds it. It fails with ErrGone
// only when nothing does, the proof in the error's text.
func redial(want Namespace) (*conn, error) {
	c, err := dial(want.PID)
	if err != nil && !errors.Is(err, errNoProcess) {
		return nil, err
	}
	if err == nil && c.id.Dev == want.Dev && c.id.Inode == want.Inode {
		return c, nil
	}
	if c != nil {
		c.Close()
		if want.PID == 0 {
			// This process moved; the namespace may well live on, but it
			// is not ours to search for: it was the caller's own.
			return nil, fmt.Errorf("%s is not this process's namespace (%d:%d) any more", want, c.id.Dev, c.id.Inode)
		}
	}
	path, err := findNamespace(want, "/proc")
	if err != nil {
		return nil, err
	}
	return dialPath(path, want)
}

// dialPath opens the namespace at path (a holder findNamespace found) and
// checks it is still want: the holder may have let go in between.
func dialPath(path string, want Namespace) (*conn, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open %s through %s: %w", want, path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(ns), &st); err != nil {
		ns.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Dev != want.Dev || st.Ino != want.Inode {
		ns.Close()
		return nil, fmt.Errorf("%s changed hands while it was opened (now %d:%d); try again", path, st.Dev, st.Ino)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("open netlink in %s: %w", want, err)
	}
	return &conn{ns: ns, h: h, id: want}, nil
}

func (c *conn) Close() {
	c.h.Close()
	c.ns.Close()
}

// link resolves an interface by name, or the default route's when name is
// empty.
func (c *conn) link(name string) (netlink.Link, error) {
	if name != "" {
		l, err := c.h.LinkByName(name)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
				return nil, fmt.Errorf("no interface %q in %s", name, c.id)
			}
			return nil, fmt.Errorf("look up interface %q in %s: %w", name, c.id, err)
		}
		return l, nil
	}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := c.h.RouteList(nil, family)
		if err != nil {
			return nil, fmt.Errorf("list routes in %s: %w", c.id, err)
		}
		for _, r := range routes {
			if !isDefault(r.Dst) {
				continue
			}
			idx := r.LinkIndex
			if idx == 0 && len(r.MultiPath) > 0 {
				idx = r.MultiPath[0].LinkIndex
			}
			if idx == 0 {
				continue
			}
			l, err := c.h.LinkByIndex(idx)
			if err != nil {
				return nil, fmt.Errorf("look up interface %d of the default route in %s: %w", idx, c.id, err)
			}
			return l, nil
		}
	}
	return nil, fmt.Errorf("no default route in %s: name the interface", c.id)
}

// linkAt finds the interface a change was planned for by its index, which
// names one device for the device's whole life in its namespace (the
// kernel hands indices out in increasing order). A renamed interface is the
// same device with our qdiscs and filters still on it. ErrGone when no
// device has the index: a deleted device takes its qdiscs and filters with
// it, and one moved to another namespace is shut down, which drops them.
func (c *conn) linkAt(index int, name string) (netlink.Link, error) {
	l, err := c.h.LinkByIndex(index)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return nil, fmt.Errorf("interface %s (index %d) in %s: no device has the index any more, and its qdiscs and filters went with it: %w", name, index, c.id, ErrGone)
		}
		return nil, fmt.Errorf("look up interface %s (index %d) in %s: %w", name, index, c.id, err)
	}
	return l, nil
}

func isDefault(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0 && dst.IP.IsUnspecified()
}
