package podproc

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
)

const roleEnv = "PODPROC_TEST_ROLE"

// TestMain lets the test binary play a pod's processes: "sleep" idles,
// "parent" starts a sleeping child, prints its pid and idles.
func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "sleep":
		time.Sleep(10 * time.Minute)
		os.Exit(0)
	case "parent":
		self, err := os.Executable() // os.Args[0] is the argv[0] we were given
		if err != nil {
			os.Exit(3)
		}
		c := exec.Command(self, "-test.run=^$")
		c.Env = append(os.Environ(), roleEnv+"=sleep")
		c.Args[0] = "worker"
		if err := c.Start(); err != nil {
			os.Exit(3)
		}
		fmt.Println(c.Process.Pid)
		time.Sleep(10 * time.Minute)
		_ = c.Process.Kill()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// proc starts the test binary in a role with argv[0] and extra
// environment as given (the pause process is "/pause"), killed at
// cleanup. For "parent" it also returns the child's pid, which the parent
// started by exec, as torchrun starts a rank.
func proc(t *testing.T, role, argv0 string, attr *syscall.SysProcAttr, env ...string) (pid, child int) {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Args[0] = argv0
	c.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	c.SysProcAttr = attr
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("start %s: %v", role, err)
	}
	t.Cleanup(func() {
		if child > 0 {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
		_ = c.Process.Kill()
		_ = c.Wait()
	})
	if role == "parent" {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatalf("read the child's pid: %v", err)
		}
		if child, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
			t.Fatal(err)
		}
	}
	return c.Process.Pid, child
}

func newUID(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func newID(t *testing.T) string {
	t.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// layout is how a driver names the pod's group and a container's group
// in it.
type layout struct {
	name      string
	pod       func(uid string) string
	container func(id string) string
	qos       string
}

func layouts() []layout {
	esc := func(uid string) string { return strings.ReplaceAll(uid, "-", "_") }
	scope := func(prefix string) func(string) string {
		return func(id string) string { return prefix + "-" + id + ".scope" }
	}
	bare := func(id string) string { return id }
	return []layout{
		{"systemd burstable containerd", func(u string) string {
			return "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + esc(u) + ".slice"
		}, scope("cri-containerd"), QoSBurstable},
		{"systemd besteffort crio", func(u string) string {
			return "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + esc(u) + ".slice"
		}, scope("crio"), QoSBestEffort},
		{"systemd guaranteed docker", func(u string) string { return "/kubepods.slice/kubepods-pod" + esc(u) + ".slice" }, scope("docker"), QoSGuaranteed},
		{"cgroupfs burstable", func(u string) string { return "/kubepods/burstable/pod" + u }, bare, QoSBurstable},
		{"cgroupfs besteffort crio", func(u string) string { return "/kubepods/besteffort/pod" + u }, func(id string) string { return "crio-" + id }, QoSBestEffort},
		{"cgroupfs guaranteed", func(u string) string { return "/kubepods/pod" + u }, bare, QoSGuaranteed},
		{"kind cgroup-root", func(u string) string {
			return "/system.slice/docker-0123456789abcdef.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod" + esc(u) + ".slice"
		}, scope("cri-containerd"), QoSBurstable},
	}
}

// writeGroup makes the group dir below mount with a cgroup.procs of pids,
// as a hierarchy shows it.
func writeGroup(t *testing.T, mount, dir string, pids ...int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(mount, dir), 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range pids {
		fmt.Fprintln(&b, p)
	}
	if err := os.WriteFile(filepath.Join(mount, dir, "cgroup.procs"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFindAndMainInEveryLayout builds each layout in a directory (with
// the pids of real processes in its cgroup.procs files, since Main reads
// /proc), beside another pod, and checks that Find returns the pod's
// processes with their containers and Main the app container's init: not
// the pause process, not a process the init started, not a later one
// started from outside (kubectl exec).
func TestFindAndMainInEveryLayout(t *testing.T) {
	pause, _ := proc(t, "sleep", "/pause", nil)
	app, worker := proc(t, "parent", "trainer", nil)
	execd, _ := proc(t, "sleep", "sh", nil)
	other, _ := proc(t, "sleep", "other", nil)
	for _, l := range layouts() {
		t.Run(l.name, func(t *testing.T) {
			mount := t.TempDir()
			uid, otherUID := newUID(t), newUID(t)
			sandbox, ctr := newID(t), newID(t)
			pod := l.pod(uid)
			writeGroup(t, mount, pod)
			writeGroup(t, mount, pod+"/"+l.container(sandbox), pause)
			writeGroup(t, mount, pod+"/"+l.container(ctr), app, worker, execd)
			writeGroup(t, mount, l.pod(otherUID)+"/"+l.container(newID(t)), other)
			h := cgroup.Hierarchy{Version: cgroup.V2, Mount: mount}

			p, err := Find([]cgroup.Hierarchy{h}, uid)
			if err != nil {
				t.Fatal(err)
			}
			if p.Dir != pod || p.QoS != l.qos {
				t.Errorf("pod at %q qos %q; want %q %q", p.Dir, p.QoS, pod, l.qos)
			}
			got := map[int]string{}
			for _, pr := range p.Processes {
				got[pr.PID] = pr.ContainerID
			}
			want := map[int]string{pause: sandbox, app: ctr, worker: ctr, execd: ctr}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("processes %v; want %v", got, want)
			}
			for _, c := range []string{"", ctr, "containerd://" + ctr, ctr[:12]} {
				m, err := p.Main(c)
				if err != nil || m.PID != app {
					t.Errorf("Main(%q) = %d, %v; want the init %d (pause %d, worker %d, exec %d)", c, m.PID, err, app, pause, worker, execd)
				}
			}
			if _, err := p.Main(sandbox); !errors.Is(err, ErrNoContainer) {
				t.Errorf("Main(the sandbox) = %v; want ErrNoContainer", err)
			}
			var apps []int
			for _, a := range p.Apps() {
				apps = append(apps, a.PID)
			}
			slices.Sort(apps)
			if wantApps := slices.Sorted(slices.Values([]int{app, worker, execd})); !slices.Equal(apps, wantApps) {
				t.Errorf("Apps() = %v; want every app-container process %v, not the pause %d", apps, wantApps, pause)
			}
			if _, err := p.Main(newID(t)); !errors.Is(err, ErrNoContainer) {
				t.Errorf("Main(another id) = %v; want ErrNoContainer", err)
			}
		})
	}
}

func TestMainRefusals(t *testing.T) {
	a, _ := proc(t, "sleep", "a", nil)
	b, _ := proc(t, "sleep", "b", nil)
	pause, _ := proc(t, "sleep", "/pause", nil)
	mount := t.TempDir()
	uid := newUID(t)
	pod := "/kubepods/pod" + uid
	c1, c2 := "aaaaaaaaaaaa0"+newID(t)[13:], "aaaaaaaaaaaa1"+newID(t)[13:]
	writeGroup(t, mount, pod)
	writeGroup(t, mount, pod+"/"+c1, a)
	writeGroup(t, mount, pod+"/"+c2, b)
	writeGroup(t, mount, pod+"/"+newID(t), pause)
	p, err := Find([]cgroup.Hierarchy{{Version: cgroup.V2, Mount: mount}}, uid)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		container string
		want      string
		wantPID   int
	}{
		{"", ErrAmbiguous.Error(), 0},
		{"aaaaaaaaaaa", "at least 12", 0},
		{"aaaaaaaaaaaa", "is a prefix of", 0},
		{c2[:13], "", b},
		{c1, "", a},
		{"ZZ" + c1[2:], "lowercase hex", 0},
	}
	for _, tc := range tests {
		m, err := p.Main(tc.container)
		if tc.want == "" {
			if err != nil || m.PID != tc.wantPID {
				t.Errorf("Main(%q) = %d, %v; want %d", tc.container, m.PID, err, tc.wantPID)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Main(%q) = %d, %v; want an error with %q", tc.container, m.PID, err, tc.want)
		}
	}
	// A pod of nothing but its sandbox has no app container.
	only := "/kubepods/pod" + newUID(t)
	writeGroup(t, mount, only+"/"+newID(t), pause)
	p, err = Find([]cgroup.Hierarchy{{Version: cgroup.V2, Mount: mount}}, strings.TrimPrefix(only, "/kubepods/pod"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Main(""); !errors.Is(err, ErrNoContainer) {
		t.Errorf("Main of a sandbox-only pod = %v; want ErrNoContainer", err)
	}
}

func TestFindNoPod(t *testing.T) {
	mount := t.TempDir()
	writeGroup(t, mount, "/kubepods/burstable/pod"+newUID(t))
	_, err := Find([]cgroup.Hierarchy{{Version: cgroup.V2, Mount: mount}}, newUID(t))
	if !errors.Is(err, ErrNoPod) || !strings.Contains(err.Error(), mount) {
		t.Errorf("Find of an absent pod = %v; want ErrNoPod naming %s", err, mount)
	}
	if _, err := Find(nil, "../../etc"); err == nil || !strings.Contains(err.Error(), "not a UUID") {
		t.Errorf("Find(\"../../etc\") = %v; want a refusal of the uid", err)
	}
}

// TestFindSecondHierarchy puts the pod only in the second hierarchy, as a
// cgroupfs pod is on a hybrid node whose unified hierarchy comes first.
func TestFindSecondHierarchy(t *testing.T) {
	a, _ := proc(t, "sleep", "a", nil)
	v2, v1 := t.TempDir(), t.TempDir()
	uid, id := newUID(t), newID(t)
	writeGroup(t, v2, "/system.slice/kubelet.service")
	writeGroup(t, v1, "/kubepods/besteffort/pod"+uid+"/"+id, a)
	hs := []cgroup.Hierarchy{{Version: cgroup.V2, Mount: v2}, {Version: cgroup.V1, Mount: v1, Controller: "pids"}}
	p, err := Find(hs, uid)
	if err != nil {
		t.Fatal(err)
	}
	if p.Hierarchy.Mount != v1 || len(p.Processes) != 1 || p.Processes[0].PID != a || p.Processes[0].ContainerID != id {
		t.Errorf("Find = %+v; want pid %d of container %s in %s", p, a, id, v1)
	}
}

func TestIsPause(t *testing.T) {
	for cmd, want := range map[string]bool{
		"/pause\x00":                true,
		"/pause":                    true,
		"pause\x00":                 true,
		"/usr/bin/pause\x00-v\x00":  true,
		"/bin/sh\x00/pause\x00":     false,
		"python\x00train.py\x00":    false,
		"":                          false,
		"/pause-not\x00":            false,
		"/usr/local/bin/kube-proxy": false,
	} {
		if got := IsPause([]byte(cmd)); got != want {
			t.Errorf("IsPause(%q) = %v; want %v", cmd, got, want)
		}
	}
}

// TestHierarchiesOfThisMachine lists the hierarchies of the machine: a
// cgroup2 root or a directory of mounts with the v2 one first.
func TestHierarchiesOfThisMachine(t *testing.T) {
	hs, err := Hierarchies("")
	if err != nil {
		t.Skipf("no cgroup hierarchies here: %v", err)
	}
	for i, h := range hs {
		if h.Version == cgroup.V2 && i != 0 {
			t.Errorf("v2 hierarchy %s at %d, want first: %+v", h.Mount, i, hs)
		}
		if _, ok, err := cgroupVersion(h.Mount); err != nil || !ok {
			t.Errorf("%s is not a cgroup mount (%v)", h.Mount, err)
		}
	}
	if _, err := Hierarchies(t.TempDir()); err == nil {
		t.Errorf("Hierarchies of an empty directory succeeded")
	}
	// A hybrid node's v1 hierarchies are listed pids first.
	for i, h := range hs {
		if h.Controller == "pids" && i > 1 {
			t.Errorf("pids at %d: %+v", i, hs)
		}
	}
}
