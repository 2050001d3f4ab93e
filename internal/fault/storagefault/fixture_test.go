package storagefault_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/gpuchaos/gpuchaos/internal/fault/storagefault"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/mountinfo"
	nf "github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
	nt "github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
)

// requireSSHFSEnv, set (as scripts/test does), turns a missing sshfs or
// sshd into a failure instead of a skip, so CI cannot pass by skipping.
const requireSSHFSEnv = "GPUCHAOS_REQUIRE_SSHFS"

// storageNet is a storage network: a veth pair from this process's
// network namespace (the host's) into namespace B of a netnstest fixture,
// which holds the server's addresses.
type storageNet struct {
	fx *nt.Fixture
	// HostIf is the host's end of the veth, holding HostAddr.
	HostIf   string
	HostAddr netip.Addr
	// Server is where sshd listens; Other is a second address of the same
	// server namespace, behind the same interface, that a partition of
	// Server must leave alone.
	Server, Other netip.Addr

	host       *netlink.Handle
	removeOnce sync.Once
}

// newStorageNet builds the network on a subnet 10.203.N.0/24 with N
// random, so that a run killed before its cleanup does not make the next
// one's addresses clash.
func newStorageNet(t testing.TB) *storageNet {
	t.Helper()
	fx := nt.New(t, nt.Options{}) // skips without root or the kernel's network faults
	n := 1 + rand.IntN(250)
	sn := &storageNet{
		fx:       fx,
		HostIf:   fmt.Sprintf("gcsf-h%d", n),
		HostAddr: netip.AddrFrom4([4]byte{10, 203, byte(n), 1}),
		Server:   netip.AddrFrom4([4]byte{10, 203, byte(n), 2}),
		Other:    netip.AddrFrom4([4]byte{10, 203, byte(n), 3}),
	}
	ns, err := netns.GetFromPath("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if sn.host, err = netlink.NewHandleAt(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sn.host.Close)
	const peer = "gcsf-s"
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: sn.HostIf}, PeerName: peer, PeerNamespace: netlink.NsFd(int(fx.B.Handle))}
	if err := sn.host.LinkAdd(veth); err != nil {
		t.Fatalf("add veth %s into %s: %v", sn.HostIf, fx.B.Name, err)
	}
	t.Cleanup(sn.removeHostLink)
	addr := func(h *netlink.Handle, name string, as ...netip.Addr) {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
				t.Fatalf("add %s to %s: %v", a, name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	addr(sn.host, sn.HostIf, sn.HostAddr)
	addr(fx.B.Netlink, peer, sn.Server, sn.Other)
	return sn
}

// removeHostLink deletes the host's end of the veth (and so the pair), as
// a storage network interface vanishes when its device is removed.
func (sn *storageNet) removeHostLink() {
	sn.removeOnce.Do(func() {
		if l, err := sn.host.LinkByName(sn.HostIf); err == nil {
			_ = sn.host.LinkDel(l)
		}
	})
}

func (sn *storageNet) snapshot(t testing.TB) nf.Snapshot {
	t.Helper()
	s, err := nf.Take(context.Background(), nf.Target{Interface: sn.HostIf})
	if err != nil {
		t.Fatalf("snapshot %s: %v", sn.HostIf, err)
	}
	return s
}

// listenOther serves TCP on Other:port inside the server namespace,
// accepting and closing every connection, until the test ends.
func (sn *storageNet) listenOther(t testing.TB, port int) string {
	t.Helper()
	addr := netip.AddrPortFrom(sn.Other, uint16(port)).String()
	var ln net.Listener
	err := nt.In(sn.fx.B.Handle, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return addr
}

// tool finds a program in PATH or the sbin directories, which a non-login
// root shell may lack in PATH.
func tool(name string) (string, bool) {
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// tools are the programs the sshfs fixture runs.
type tools struct{ sshfs, sshd, keygen, fusermount string }

// requireTools skips the test unless it runs as root with sshfs, sshd,
// ssh-keygen, fusermount and /dev/fuse; with GPUCHAOS_REQUIRE_SSHFS set a
// missing tool fails it instead.
func requireTools(t testing.TB) tools {
	t.Helper()
	nt.RequireRoot(t)
	var tl tools
	var missing []string
	for _, x := range []struct {
		dst   *string
		names []string
	}{
		{&tl.sshfs, []string{"sshfs"}},
		{&tl.sshd, []string{"sshd"}},
		{&tl.keygen, []string{"ssh-keygen"}},
		{&tl.fusermount, []string{"fusermount3", "fusermount"}},
	} {
		for _, n := range x.names {
			if p, ok := tool(n); ok {
				*x.dst = p
				break
			}
		}
		if *x.dst == "" {
			missing = append(missing, x.names[0])
		}
	}
	// sshfs runs ssh from PATH, so PATH is where it must be.
	if _, err := exec.LookPath("ssh"); err != nil {
		missing = append(missing, "ssh in PATH")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		missing = append(missing, "/dev/fuse")
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("a real sshfs mount needs %s (run scripts/setup-sshfs)", strings.Join(missing, ", "))
		if os.Getenv(requireSSHFSEnv) != "" {
			t.Fatal(msg + "; " + requireSSHFSEnv + " is set")
		}
		t.Skip(msg)
	}
	return tl
}

// sshServer is a real OpenSSH sshd in the storage network's server
// namespace, exporting a directory over SFTP to root with a key.
type sshServer struct {
	Addr   netip.Addr
	Export string // the directory the mount shows, on the server's side
	key    string // the client's private key
	tools  tools
}

func startSSHD(t testing.TB, sn *storageNet) *sshServer {
	t.Helper()
	tl := requireTools(t)
	dir := t.TempDir()
	s := &sshServer{Addr: sn.Server, Export: filepath.Join(dir, "export"), key: filepath.Join(dir, "client_key"), tools: tl}
	if err := os.Mkdir(s.Export, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{filepath.Join(dir, "host_key"), s.key} {
		if out, err := exec.Command(tl.keygen, "-q", "-t", "ed25519", "-N", "", "-C", "gpuchaos-test", "-f", k).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen %s: %v: %s", k, err, out)
		}
	}
	pub, err := os.ReadFile(s.key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sshd_config")
	conf := strings.Join([]string{
		"Port 22",
		"ListenAddress " + s.Addr.String(),
		"HostKey " + filepath.Join(dir, "host_key"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"StrictModes no",
		"UsePAM no",
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		// In-process SFTP: no dependency on where the distribution puts
		// sftp-server.
		"Subsystem sftp internal-sftp",
		"",
	}, "\n")
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	// sshd refuses to start without its privilege separation directory,
	// which only the distribution's service unit creates.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(tl.sshd, "-D", "-e", "-f", cfg)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := nt.In(sn.fx.B.Handle, cmd.Start); err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("sshd's log:\n%s", logs.String())
		}
	})
	addr := netip.AddrPortFrom(s.Addr, 22).String()
	// Its log is the cleanup's to show, should this fail.
	testutil.Eventually(t, 10*time.Second, "sshd to answer on "+addr, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("sshd exited: %v\n%s", err, logs.String())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return s
}

// sshfsOptions make the mount behave like a hard NFS mount: an operation
// on a silent server blocks, and resumes when the server answers again.
//
//   - no "reconnect": with it, a dropped connection is replaced and files
//     open across it fail, which is a soft mount;
//   - ServerAliveInterval=15, ServerAliveCountMax=3: ssh gives up on a
//     server silent for 45 s (sshfs(1)), far beyond the tests' partitions,
//     so the connection, and every request queued on it, survives them;
//     without them a dead server would keep the mount hung forever;
//   - BatchMode=yes: never prompt; key-only authentication.
const sshfsOptions = "StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,LogLevel=ERROR,BatchMode=yes," +
	"ServerAliveInterval=15,ServerAliveCountMax=3"

// mountSSHFS mounts the server's export on a fresh directory from this
// process's namespaces and returns the mount point. Cleanup detaches the
// mount (lazily, so a hung one cannot block it) and kills sshfs, which
// aborts any request still pending.
func mountSSHFS(t testing.TB, s *sshServer) string {
	t.Helper()
	mnt := t.TempDir()
	var logs bytes.Buffer
	src := "root@" + s.Addr.String() + ":" + s.Export
	cmd := exec.Command(s.tools.sshfs, "-f", "-o", "IdentityFile="+s.key+","+sshfsOptions, src, mnt)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sshfs: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if out, err := exec.Command(s.tools.fusermount, "-u", "-z", mnt).CombinedOutput(); err != nil && isMounted(mnt) {
			t.Errorf("unmount %s: %v: %s", mnt, err, out)
		}
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("sshfs's log:\n%s", logs.String())
		}
	})
	// Its log is the cleanup's to show, should this fail.
	testutil.Eventually(t, 10*time.Second, "sshfs to mount "+mnt, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("sshfs exited: %v\n%s", err, logs.String())
		default:
		}
		return isMounted(mnt)
	})
	return mnt
}

// isMounted reports whether an sshfs mount sits at mnt, by the mount table
// rather than by touching mnt.
func isMounted(mnt string) bool {
	f, err := os.Open(storagefault.DefaultMountinfo)
	if err != nil {
		return false
	}
	defer f.Close()
	mounts, err := mountinfo.Parse(f)
	if err != nil {
		return false
	}
	m, ok := mountinfo.Containing(mounts, mnt)
	return ok && m.Point == mnt && m.FSType == "fuse.sshfs"
}

// writeResult is how one write+fsync went.
type writeResult struct {
	took time.Duration
	err  error
}

// writeSync creates path, writes data, fsyncs and closes it, as a
// checkpoint writer does.
func writeSync(path string, data []byte) writeResult {
	start := time.Now()
	err := func() error {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("fsync: %w", err)
		}
		return f.Close()
	}()
	return writeResult{took: time.Since(start), err: err}
}

// dialable reports whether a TCP connection to addr opens within d.
func dialable(addr string, d time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return err
	}
	return c.Close()
}
