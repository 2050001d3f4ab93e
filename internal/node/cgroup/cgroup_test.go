package cgroup

import (
	mi "github.com/gpuchaos/gpuchaos/internal/node/mountinfo"

	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

const roleEnv = "CGROUP_TEST_ROLE"

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "threads" {
		// A few busy-ish threads, so a v1 move has several tids.
		for range 3 {
			go func() {
				for {
					time.Sleep(time.Millisecond)
				}
			}()
		}
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hybridMountinfo was captured on the development machine (cat
// /proc/self/mountinfo), trimmed to the cgroup lines and one with an
// escaped space.
const hybridMountinfo = `1265 1264 0:97 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
1266 1265 0:31 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
1267 1265 0:32 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
1272 1265 0:37 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
1275 1265 0:40 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
1280 1 254:0 /data /mnt/my\040disk rw,relatime - ext4 /dev/vda rw
`

// TestMountinfoOfCgroups checks what Find reads of a hybrid machine's
// mount table: each v1 hierarchy's controllers in its superblock options,
// and roots other than "/".
func TestMountinfoOfCgroups(t *testing.T) {
	t.Parallel()
	ms, err := parseMounts(hybridMountinfo)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 6 {
		t.Fatalf("%d mounts, want 6", len(ms))
	}
	if m := ms[1]; m.Point != "/sys/fs/cgroup/cpu" || m.FSType != "cgroup" || !slices.Contains(m.SuperOptions(), "cpu") {
		t.Errorf("cpu mount = %+v", m)
	}
	if m := ms[5]; m.Point != "/mnt/my disk" || m.Root != "/data" {
		t.Errorf("escaped mount = %+v", m)
	}
	for _, bad := range []string{"1 2 3 4 5 6 ext4 x y", `1 2 0:1 / /a\04 rw - ext4 x rw`, "1 2 0:1 / /a rw -"} {
		if _, err := parseMounts(bad); err == nil {
			t.Errorf("parse %q accepted", bad)
		}
	}
}

func TestChoose(t *testing.T) {
	t.Parallel()
	ms, err := parseMounts(hybridMountinfo)
	if err != nil {
		t.Fatal(err)
	}
	hybrid := func(string) ([]byte, error) { return []byte("hugetlb\n"), nil }
	pureV2 := func(string) ([]byte, error) { return []byte("cpuset cpu io memory pids\n"), nil }
	v2only := []mi.Mount{{Root: "/", Point: "/sys/fs/cgroup", FSType: "cgroup2"}}
	tests := []struct {
		name       string
		mounts     []mi.Mount
		ctrl       func(string) ([]byte, error)
		controller string
		want       Hierarchy
		wantErr    bool
	}{
		{"v1 cpu on a hybrid machine", ms, hybrid, "cpu", Hierarchy{V1, "/sys/fs/cgroup/cpu", "cpu"}, false},
		{"v1 blkio asked as io", ms, hybrid, "io", Hierarchy{V1, "/sys/fs/cgroup/blkio", "blkio"}, false},
		{"v2 cpu", v2only, pureV2, "cpu", Hierarchy{V2, "/sys/fs/cgroup", "cpu"}, false},
		{"v2 io asked as blkio", v2only, pureV2, "blkio", Hierarchy{V2, "/sys/fs/cgroup", "io"}, false},
		{"missing controller", ms, hybrid, "memory", Hierarchy{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := choose(tc.mounts, tc.controller, tc.ctrl)
			if tc.wantErr {
				if !errors.Is(err, ErrNoController) {
					t.Fatalf("choose = %+v, %v; want ErrNoController", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("choose = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestMemberships(t *testing.T) {
	t.Parallel()
	in := "9:name=systemd:/\n4:memory:/process_api/96\n1:cpu,cpuacct:/kubepods/pod1/c1\n0::/user.slice\n"
	ms, err := fakeMemberships(t, in)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		h    Hierarchy
		want string
	}{
		{"v1 cpu in a combined hierarchy", Hierarchy{V1, "/x", "cpu"}, "/kubepods/pod1/c1"},
		{"v1 memory", Hierarchy{V1, "/x", "memory"}, "/process_api/96"},
		{"v2", Hierarchy{V2, "/x", "cpu"}, "/user.slice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PathIn(ms, tc.h)
			if err != nil || got != tc.want {
				t.Fatalf("PathIn = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := PathIn(ms, Hierarchy{V1, "/x", "blkio"}); err == nil {
		t.Error("PathIn found a blkio group that is not there")
	}
	for _, bad := range []string{"x:cpu:/", "1:cpu", "1:cpu:relative"} {
		if _, err := fakeMemberships(t, bad); err == nil {
			t.Errorf("memberships of %q accepted", bad)
		}
	}
}

// fakeMemberships reads a /proc/PID/task/TID/cgroup that holds s from a
// made-up proc file system.
func fakeMemberships(t *testing.T, s string) ([]Membership, error) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "7", "task", "7")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return memberships(root, 7, 7)
}

func parseMounts(s string) ([]mi.Mount, error) { return mi.Parse(strings.NewReader(s)) }

func TestValidateRefusesForeignRecords(t *testing.T) {
	t.Parallel()
	good := Confinement{Hierarchy: Hierarchy{V1, "/sys/fs/cgroup/cpu", "cpu"}, Proc: procfind.Proc{PID: 100, StartTicks: 5},
		Home: "/a", Dir: "/a/gpuchaos-x", Files: []File{{"cpu.cfs_quota_us", "5000"}}, Moves: []Move{{100, "/a"}}}
	if err := good.Validate(); err != nil {
		t.Fatalf("a good record: %v", err)
	}
	tests := []struct {
		name string
		edit func(c *Confinement)
	}{
		{"dir not ours", func(c *Confinement) { c.Dir = "/a/job" }},
		{"dir escapes", func(c *Confinement) { c.Dir = "/a/../../gpuchaos-x" }},
		{"relative home", func(c *Confinement) { c.Home = "a" }},
		{"move from outside", func(c *Confinement) { c.Moves[0].From = "/../etc" }},
		{"file of another controller", func(c *Confinement) { c.Files[0].Name = "memory.limit_in_bytes" }},
		{"file with a slash", func(c *Confinement) { c.Files[0].Name = "cpu./../x" }},
		{"value with a newline", func(c *Confinement) { c.Files[0].Value = "1\n2" }},
		{"pid 1", func(c *Confinement) { c.Proc.PID = 1 }},
		{"mount is root", func(c *Confinement) { c.Mount = "/" }},
		{"version 3", func(c *Confinement) { c.Version = 3 }},
		{"move of pid 0", func(c *Confinement) { c.Moves[0].ID = 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			c.Files = slices.Clone(good.Files)
			c.Moves = slices.Clone(good.Moves)
			tc.edit(&c)
			if err := c.Validate(); err == nil {
				t.Fatalf("accepted %+v", c)
			}
		})
	}
}

// confineThreads starts this test binary in its threads role and plans
// its confinement, under a name of this test alone, in the real cpu
// hierarchy with a quota of half a CPU, released at cleanup.
func confineThreads(t *testing.T) (h Hierarchy, p procfind.Proc, c *Confinement, files []File) {
	t.Helper()
	h, err := Find("cpu")
	if err != nil {
		t.Skipf("no cpu cgroup controller here: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=threads")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p, err = procfind.Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let its threads start
	files = []File{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", "50000"}}
	if h.Version == V2 {
		files = []File{{"cpu.max", "50000 100000"}}
	}
	name := fmt.Sprintf("%s%s-%d", NamePrefix, t.Name(), os.Getpid())
	c, err = Plan(h, p, name, files)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Release() })
	return h, p, c, files
}

// TestConfineRealProcess runs Plan, Apply and Release against the real cpu
// hierarchy of this machine.
func TestConfineRealProcess(t *testing.T) {
	t.Parallel()
	h, p, c, files := confineThreads(t)
	name := path.Base(c.Dir)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	tids, err := procfind.Threads(p.PID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		if g, err := GroupOf(h, p.PID, tid); err != nil || g != c.Dir {
			t.Errorf("thread %d in %q (%v), want %q", tid, g, err, c.Dir)
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(h.Mount, c.Dir, f.Name))
		if err != nil || strings.TrimSpace(string(b)) != f.Value {
			t.Errorf("%s = %q, %v; want %q", f.Name, b, err, f.Value)
		}
	}
	// A second plan on a confined process is refused rather than nested.
	if _, err := Plan(h, p, name+"-2", files); err == nil || !strings.Contains(err.Error(), "already confined") {
		t.Errorf("Plan on a confined process = %v, want a refusal", err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if c.Exists() {
		t.Errorf("%s still exists", c.Dir)
	}
	for _, tid := range tids {
		if g, err := GroupOf(h, p.PID, tid); err != nil || g != c.Home {
			t.Errorf("thread %d in %q (%v) after Release, want %q", tid, g, err, c.Home)
		}
	}
}

// TestReleaseLiftsTheQuotaFirst checks the order of Release: the quota
// goes before the threads move, since the kernel does not wake an idle CPU
// for a throttled thread moved to an unthrottled group, while lifting the
// quota unthrottles through the path that does. A Release whose moves
// fail (the threads' home is gone here) shows it: the threads are still
// in our group, and the kernel already holds no quota for it.
func TestReleaseLiftsTheQuotaFirst(t *testing.T) {
	t.Parallel()
	h, p, c, _ := confineThreads(t)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	homeless := *c
	homeless.Home = path.Join(c.Home, NamePrefix+"gone-"+strconv.Itoa(os.Getpid()))
	homeless.Moves = nil
	if err := homeless.Release(); err == nil {
		t.Fatal("Release moved the threads to a group that does not exist")
	}
	quota, lifted := "cpu.cfs_quota_us", "-1"
	if h.Version == V2 {
		quota, lifted = "cpu.max", "max 100000"
	}
	if b, err := os.ReadFile(filepath.Join(h.Mount, c.Dir, quota)); err != nil || strings.TrimSpace(string(b)) != lifted {
		t.Errorf("%s of our group = %q, %v after a Release that moved nothing; want %q", quota, b, err, lifted)
	}
	if g, err := GroupOf(h, p.PID, p.PID); err != nil || g != c.Dir {
		t.Fatalf("process in %q (%v), want still in %q", g, err, c.Dir)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	if g, err := GroupOf(h, p.PID, p.PID); err != nil || g != c.Home {
		t.Errorf("process in %q (%v) after Release, want %q", g, err, c.Home)
	}
}

// TestDelegating checks where a v2 group of ours goes: under the nearest
// ancestor that enables the controller for its children, as on the GPU
// machines, whose container group does not.
func TestDelegating(t *testing.T) {
	tests := []struct {
		name    string
		control map[string]string // group -> its cgroup.subtree_control
		group   string
		want    string // "" means an error
	}{
		{"parent delegates", map[string]string{"/": "cpu io", "/job": "cpu memory"}, "/job/rank", "/job"},
		{"only the root delegates", map[string]string{"/": "cpu io", "/process_api": "memory"}, "/process_api/rank", "/"},
		{"a group at the top", map[string]string{"/": "cpu"}, "/process_api", "/"},
		{"nothing delegates", map[string]string{"/": "memory", "/job": ""}, "/job/rank", ""},
		{"another controller's name is not enough", map[string]string{"/": "cpuset", "/job": "cpuset"}, "/job/rank", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mount := t.TempDir()
			for g, c := range tc.control {
				if err := os.MkdirAll(filepath.Join(mount, g), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(mount, g, "cgroup.subtree_control"), []byte(c+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := delegating(Hierarchy{V2, mount, "cpu"}, tc.group)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "not enabled for the children of") {
					t.Errorf("delegating = %q, %v; want an error naming the missing controller", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("delegating = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
