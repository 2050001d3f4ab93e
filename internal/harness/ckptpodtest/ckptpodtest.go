// Package ckptpodtest builds, for the tests of the checkpoint faults in
// Kubernetes pods, a pod as a node shows it: real groups in kubelet's
// layout (podproctest) in the v2 hierarchy and in v1's blkio one where
// there is one, and a "container" that is a real process of the test
// binary in a mount namespace of its own, pivoted into a root of its own
// with the checkpoint directory bind-mounted at /ckpt, so that the path
// the container sees (/ckpt) is not the host's path of the same files.
package ckptpodtest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc/podproctest"
)

// Dir is the checkpoint directory as the container sees it.
const Dir = "/ckpt"

const (
	roleEnv = "GPUCHAOS_CKPTPOD_ROLE"
	rootEnv = "GPUCHAOS_CKPTPOD_ROOT"
	srcEnv  = "GPUCHAOS_CKPTPOD_SRC"
)

// Main plays the container when the test binary was started as one
// (Start), and returns otherwise: call it first in TestMain.
func Main() {
	role := os.Getenv(roleEnv)
	if role == "" {
		return
	}
	if err := enter(os.Getenv(rootEnv), os.Getenv(srcEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "container:", err)
		os.Exit(3)
	}
	if role == "write" {
		os.Exit(write(Dir))
	}
	for {
		time.Sleep(time.Hour)
	}
}

// enter mounts src at root/ckpt and makes root this process's root, as a
// container runtime does (pivot_root, the old root detached). The mount
// namespace is already this process's own (Start unshares it, and Go
// makes its mounts private).
func enter(root, src string) error {
	if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind the root: %w", err)
	}
	if err := unix.Mount(src, filepath.Join(root, Dir), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the checkpoint directory: %w", err)
	}
	if err := unix.PivotRoot(root, filepath.Join(root, ".old")); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	return unix.Unmount("/.old", unix.MNT_DETACH)
}

// write writes ckpt-STEP.pt as a training job does: to ckpt-STEP.pt.tmp,
// a 4 KiB chunk every few milliseconds, synced, then renamed; it exits
// on the first failure.
func write(dir string) int {
	chunk := make([]byte, 4096)
	for step := 1; ; step++ {
		final := filepath.Join(dir, fmt.Sprintf("ckpt-%d.pt", step))
		f, err := os.Create(final + ".tmp")
		if err != nil {
			return 1
		}
		for i := range 32 {
			chunk[0] = byte(i)
			if _, err := f.Write(chunk); err != nil {
				return 1
			}
			time.Sleep(3 * time.Millisecond)
		}
		if f.Sync() != nil || f.Close() != nil || os.Rename(final+".tmp", final) != nil {
			return 1
		}
		// Keep the last two, as a job does, so the volume never fills.
		_ = os.Remove(filepath.Join(dir, fmt.Sprintf("ckpt-%d.pt", step-2)))
		time.Sleep(20 * time.Millisecond)
	}
}

// Pod is a pod's groups made for a test, in kubelet's systemd layout.
type Pod struct {
	UID    string
	groups []group
}

type group struct {
	h        cgroup.Hierarchy
	pod, app string // below h.Mount
}

// NewPod makes the groups of a pod with a fresh uid, a sandbox and one
// app container, in the v2 hierarchy and in v1's blkio and pids
// hierarchies, whichever exist. In v2 the io controller is enabled down
// to the pod where the kernel offers it, as on a node. Removed at the
// end of the test, after the processes in them (register it first).
func NewPod(t *testing.T) *Pod {
	t.Helper()
	if os.Geteuid() != 0 {
		kubetest.Missing(t, "not root: pod cgroups and mount namespaces need root")
	}
	hs, err := podproc.Hierarchies("")
	if err != nil {
		kubetest.Missing(t, fmt.Sprintf("no cgroup hierarchies: %v", err))
	}
	p := &Pod{UID: uid(t)}
	pod := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(p.UID, "-", "_") + ".slice"
	sandbox, app := pod+"/cri-containerd-"+hexID(t)+".scope", pod+"/cri-containerd-"+hexID(t)+".scope"
	var made []string
	t.Cleanup(func() { podproctest.RmGroups(t, made) })
	for _, h := range hs {
		if h.Version != cgroup.V2 && h.Controller != "blkio" && h.Controller != "pids" {
			continue
		}
		made = append(podproctest.MkGroups(t, h.Mount, []string{sandbox, app}), made...)
		if h.Version == cgroup.V2 {
			enableIO(h.Mount, pod)
		}
		p.groups = append(p.groups, group{h: h, pod: pod, app: app})
	}
	if len(p.groups) == 0 {
		kubetest.Missing(t, fmt.Sprintf("no v2, blkio or pids hierarchy among %+v", hs))
	}
	return p
}

// enableIO enables the io controller in each group above dir that
// offers it, so that dir has io.max; a kernel without it leaves dir
// without, which the tests that need it skip on.
func enableIO(mount, dir string) {
	var levels []string
	for d := filepath.Dir(dir); d != "/"; d = filepath.Dir(d) {
		levels = append([]string{d}, levels...)
	}
	levels = append([]string{"/"}, levels...)
	for _, l := range levels {
		b, err := os.ReadFile(filepath.Join(mount, l, "cgroup.controllers"))
		if err != nil || !slices.Contains(strings.Fields(string(b)), "io") {
			return
		}
		_ = os.WriteFile(filepath.Join(mount, l, "cgroup.subtree_control"), []byte("+io"), 0)
	}
}

// Join moves pid into the app container's group in every hierarchy.
func (p *Pod) Join(t *testing.T, pid int) {
	t.Helper()
	for _, g := range p.groups {
		podproctest.Join(t, g.h.Mount, g.app, pid)
	}
}

// Limits is the host path of the pod group's block-I/O limit files: io.max
// on v2 where the io controller reaches the pod, else the blkio throttle
// files on v1. Empty when neither exists.
func (p *Pod) Limits() []string {
	for _, g := range p.groups {
		if g.h.Version == cgroup.V2 {
			f := filepath.Join(g.h.Mount, g.pod, "io.max")
			if _, err := os.Stat(f); err == nil {
				return []string{f}
			}
		}
	}
	for _, g := range p.groups {
		if g.h.Controller == "blkio" {
			d := filepath.Join(g.h.Mount, g.pod)
			return []string{filepath.Join(d, "blkio.throttle.read_bps_device"), filepath.Join(d, "blkio.throttle.write_bps_device")}
		}
	}
	return nil
}

// Container is a process of the pod's app container.
type Container struct {
	Cmd *exec.Cmd
	// Root is the host's path of the container's root; Root/ckpt is
	// where src is mounted in the container's namespace only.
	Root string
	done chan struct{}
}

// PID is the container process's pid.
func (c *Container) PID() int { return c.Cmd.Process.Pid }

// Exited reports whether the process has ended and been reaped.
func (c *Container) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Kill kills the process and waits until it is reaped.
func (c *Container) Kill() {
	_ = c.Cmd.Process.Kill()
	<-c.done
}

// Start runs the container of pod p with src (a host directory) at /ckpt
// in its own root, as role "sleep" (does nothing) or "write" (writes
// checkpoints into /ckpt), GPUCHAOS_CKPT_DIR=/ckpt in its environment,
// and moves it into the pod's app group. It returns once the mount is in
// place. Cleanup kills it.
func Start(t *testing.T, p *Pod, src, role string) *Container {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{Dir, "/.old"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Args[0] = "python"
	cmd.Env = append(os.Environ(), roleEnv+"="+role, rootEnv+"="+root, srcEnv+"="+src, "GPUCHAOS_CKPT_DIR="+Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		kubetest.Missing(t, fmt.Sprintf("start a process in a mount namespace of its own: %v", err))
	}
	c := &Container{Cmd: cmd, Root: root, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(c.Kill)
	p.Join(t, c.PID())
	mi := fmt.Sprintf("/proc/%d/mountinfo", c.PID())
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(mi)
		if err == nil && strings.Contains(string(b), " "+Dir+" ") {
			return c
		}
		if c.Exited() || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			t.Fatalf("the container (pid %d) did not mount %s: %v, %v", c.PID(), Dir, err, cmd.ProcessState)
		}
	}
}

func uid(t *testing.T) string {
	h := hexID(t)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func hexID(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// Ext4 mounts a fresh ext4 filesystem of size bytes on a loop device (a
// real block device, for the block-I/O limits) at a new directory, and
// returns the directory and the device's MAJ:MIN. It skips through
// kubetest.Missing where the machine lacks losetup, mkfs.ext4 or loop
// devices.
func Ext4(t *testing.T, size int64) (dir, dev string) {
	t.Helper()
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			kubetest.Missing(t, tool+" not found: a loop device gives the block device")
		}
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		kubetest.Missing(t, fmt.Sprintf("losetup: %v: %s", err, out))
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", loop, err, out)
		}
	})
	if out, err := exec.Command("mkfs.ext4", "-q", loop).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v: %s", loop, err, out)
	}
	dir, err = filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(loop, dir, "ext4", 0, ""); err != nil {
		t.Fatalf("mount %s: %v", loop, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	var st unix.Stat_t
	if err := unix.Stat(loop, &st); err != nil {
		t.Fatal(err)
	}
	return dir, fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
}
