package trafficctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/node/mountinfo"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// NamedDirs are where tools bind-mount network namespaces by name: ip
// netns (iproute2) under /run/netns, which /var/run usually links to, and
// container runtimes and CNI plugins under their own directories.
var NamedDirs = []string{"/run/netns", "/var/run/netns", "/run/docker/netns"}

// holders counts what a search for a namespace looked at, so that a "gone"
// verdict can say what it rests on.
type holders struct {
	procs, tasks, fds, mountNS, mounts, named int
}

func (h holders) String() string {
	return fmt.Sprintf("%d processes, %d threads, %d open files, %d nsfs mounts in %d mount namespaces, %d named namespaces",
		h.procs, h.tasks, h.fds, h.mounts, h.mountNS, h.named)
}

// ErrUnproven marks a search that could not look everywhere (a process
// whose /proc entries it may not read: a non-dumpable process without
// CAP_SYS_PTRACE, or one a security module hides): the namespace may live
// on where it could not look, so what a change added may still be there.
var ErrUnproven = errors.New("cannot prove the namespace gone")

// findNamespace returns a path that opens the network namespace want names
// (its nsfs device and inode), looking wherever a namespace can be kept
// alive: want's own process, the named bind mounts, every thread of every
// process under /proc, every file a process holds open (a runtime keeps a
// pod's namespace by a descriptor), and every nsfs bind mount in every
// mount namespace. It returns ErrGone, with what it searched, only when
// none of them holds it: a namespace with no holder has been destroyed by
// the kernel and everything in it with it. A reader it cannot read makes
// the search fail with ErrUnproven instead, never ErrGone.
//
// One holder it cannot see is a socket created in the namespace and held
// by a process outside it (the kernel offers no way to list a socket's
// namespace short of taking every socket from its owner). Then the
// namespace is called gone while its interfaces, and what the change added
// to them, live on until the socket closes; no process can enter it to
// send through them in the meantime.
func findNamespace(want Namespace, proc string) (string, error) {
	var unreadable []string
	// match stats path; one it may not stat is a place the namespace
	// could be, which the verdict must not overlook.
	match := func(path string) bool {
		var st unix.Stat_t
		err := unix.Stat(path, &st)
		if err != nil && !vanished(err) {
			unreadable = append(unreadable, where(path, proc)+": "+procfind.Reason(err))
		}
		return err == nil && st.Dev == want.Dev && st.Ino == want.Inode
	}
	if want.PID > 0 {
		if p := filepath.Join(proc, strconv.Itoa(want.PID), "ns", "net"); match(p) {
			return p, nil
		}
	}
	var seen holders
	for _, dir := range NamedDirs {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			unreadable = append(unreadable, dir+": "+procfind.Reason(err))
		}
		for _, e := range entries {
			seen.named++
			if p := filepath.Join(dir, e.Name()); match(p) {
				return p, nil
			}
		}
	}
	pids, err := os.ReadDir(proc)
	if err != nil {
		return "", fmt.Errorf("search for %s: %w: %w", want, ErrUnproven, err)
	}
	inode := fmt.Sprintf("net:[%d]", want.Inode)
	mountNS := map[string]bool{}
	for _, e := range pids {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		base := filepath.Join(proc, e.Name())
		seen.procs++
		tasks, err := os.ReadDir(filepath.Join(base, "task"))
		if err != nil && !vanished(err) {
			unreadable = append(unreadable, procName(base)+": "+procfind.Reason(err))
		}
		for _, t := range tasks {
			seen.tasks++
			if p := filepath.Join(base, "task", t.Name(), "ns", "net"); match(p) {
				return p, nil
			}
		}
		fds, err := os.ReadDir(filepath.Join(base, "fd"))
		if err != nil && !vanished(err) {
			unreadable = append(unreadable, procName(base)+": "+procfind.Reason(err))
		}
		for _, fd := range fds {
			seen.fds++
			p := filepath.Join(base, "fd", fd.Name())
			l, err := os.Readlink(p)
			if err != nil && !vanished(err) {
				unreadable = append(unreadable, procName(base)+": "+procfind.Reason(err))
			}
			if err == nil && l == inode && match(p) {
				return p, nil
			}
		}
		// Bind mounts of a namespace are seen from the mount namespaces
		// that have them; one process of each mount namespace is enough.
		mnt, err := os.Readlink(filepath.Join(base, "ns", "mnt"))
		if err != nil {
			if !vanished(err) {
				unreadable = append(unreadable, procName(base)+": "+procfind.Reason(err))
			}
			continue
		}
		if mountNS[mnt] {
			continue
		}
		mountNS[mnt] = true
		seen.mountNS++
		p, n, err := nsfsMount(base, match)
		seen.mounts += n
		if err != nil && !vanished(err) {
			unreadable = append(unreadable, procName(base)+": "+procfind.Reason(err))
		}
		if p != "" {
			return p, nil
		}
	}
	if len(unreadable) > 0 {
		unreadable = slices.Compact(unreadable)
		more := ""
		if len(unreadable) > 3 {
			more = fmt.Sprintf(" and %d more", len(unreadable)-3)
			unreadable = unreadable[:3]
		}
		return "", fmt.Errorf("%s: no holder found among %s, but could not look into %s%s: %w", want, seen, strings.Join(unreadable, "; "), more, ErrUnproven)
	}
	return "", fmt.Errorf("%s: no holder left (searched %s): %w", want, seen, ErrGone)
}

// nsfsMount looks through the mount table of the process at base for nsfs
// mounts that match, returning the path that opens one through the
// process's root and the number of nsfs mounts seen.
func nsfsMount(base string, match func(string) bool) (string, int, error) {
	b, err := os.ReadFile(filepath.Join(base, "mountinfo"))
	if err != nil {
		return "", 0, err
	}
	n := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" || !strings.Contains(line, " - nsfs ") {
			continue
		}
		m, err := mountinfo.ParseLine(line)
		if err != nil || m.FSType != "nsfs" {
			continue
		}
		n++
		if p := filepath.Join(base, "root", m.Point); match(p) {
			return p, n, nil
		}
	}
	return "", n, nil
}

// where names what path is for a message: the process it belongs to, or
// the path itself outside proc.
func where(path, proc string) string {
	rest, ok := strings.CutPrefix(path, proc+"/")
	if !ok {
		return path
	}
	pid, _, _ := strings.Cut(rest, "/")
	return procName(filepath.Join(proc, pid))
}

// procName names the process at base for a message: "pid 1 (init)".
func procName(base string) string {
	comm, _ := os.ReadFile(filepath.Join(base, "comm"))
	return fmt.Sprintf("pid %s (%s)", filepath.Base(base), strings.TrimSpace(string(comm)))
}

// vanished reports whether err means the process exited while it was read.
func vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}
