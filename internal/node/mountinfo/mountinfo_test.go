package mountinfo_test

import (
	"os"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/node/mountinfo"
)

// An NFS line written by hand in the kernel's format (this kernel has no
// NFS client to capture one from; see testdata/README.md), and an sshfs
// mount point with an escaped space.
const (
	nfs4Line       = "312 26 0:52 / /mnt/ckpt rw,relatime shared:180 - nfs4 storage-0:/export/ckpt rw,vers=4.2,hard,proto=tcp,addr=10.0.0.10"
	sshfsSpaceLine = `316 26 0:56 / /mnt/my\040ckpt rw,relatime - fuse.sshfs alice@storage-2:/data rw,user_id=0,group_id=0`
)

func readTestdata(t testing.TB) []mountinfo.Mount {
	t.Helper()
	f, err := os.Open("testdata/mountinfo-firecracker.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := mountinfo.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func parseOne(t *testing.T, line string) mountinfo.Mount {
	t.Helper()
	m, err := mountinfo.ParseLine(line)
	if err != nil {
		t.Fatalf("parse %q: %v", line, err)
	}
	return m
}

func TestParseLines(t *testing.T) {
	tests := []struct {
		name, line string
		want       mountinfo.Mount
	}{
		{"captured root ext4", "26 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534",
			mountinfo.Mount{ID: 26, Parent: 1, Root: "/", Point: "/", FSType: "ext4", Source: "/dev/vda", Options: "rw,discard,resv_strict,resuid=65534,resgid=65534"}},
		{"captured tmpfs", "24 23 0:22 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683620k",
			mountinfo.Mount{Root: "/", ID: 24, Parent: 23, Point: "/dev/shm", FSType: "tmpfs", Source: "tmpfs", Options: "rw,size=24683620k"}},
		{"captured bind with optional field", "41 26 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw,discard",
			mountinfo.Mount{ID: 41, Parent: 26, Root: "/run/netns", Point: "/run/netns", FSType: "ext4", Source: "/dev/vda", Options: "rw,discard"}},
		{"captured sshfs", "48 26 0:39 / /tmp/tmp.E6rvwRvIiW/mnt rw,nosuid,nodev,relatime - fuse.sshfs root@10.203.0.2:/tmp/tmp.E6rvwRvIiW/export rw,user_id=0,group_id=0",
			mountinfo.Mount{Root: "/", ID: 48, Parent: 26, Point: "/tmp/tmp.E6rvwRvIiW/mnt", FSType: "fuse.sshfs", Source: "root@10.203.0.2:/tmp/tmp.E6rvwRvIiW/export", Options: "rw,user_id=0,group_id=0"}},
		{"nfs4 two optional fields", strings.Replace(nfs4Line, "shared:180", "shared:180 master:7", 1),
			mountinfo.Mount{Root: "/", ID: 312, Parent: 26, Point: "/mnt/ckpt", FSType: "nfs4", Source: "storage-0:/export/ckpt", Options: nfs4Line[strings.Index(nfs4Line, "rw,vers"):]}},
		{"escaped space in point", sshfsSpaceLine,
			mountinfo.Mount{Root: "/", ID: 316, Parent: 26, Point: "/mnt/my ckpt", FSType: "fuse.sshfs", Source: "alice@storage-2:/data", Options: "rw,user_id=0,group_id=0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseOne(t, tc.line); got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct{ name, line string }{
		{"no separator", "26 1 254:0 / / rw,relatime ext4 /dev/vda rw"},
		{"too few after separator", "26 1 254:0 / / rw,relatime - ext4 /dev/vda"},
		{"too many after separator", "26 1 254:0 / / rw,relatime - ext4 /dev/vda rw extra"},
		{"bad id", "x 1 254:0 / / rw,relatime - ext4 /dev/vda rw"},
		{"bad parent", "26 y 254:0 / / rw,relatime - ext4 /dev/vda rw"},
		{"relative point", "26 1 254:0 / mnt rw,relatime - ext4 /dev/vda rw"},
		{"truncated escape", `26 1 254:0 / /mnt/a\04 rw,relatime - ext4 /dev/vda rw`},
		{"non-octal escape", `26 1 254:0 / /mnt/a\09x rw,relatime - ext4 /dev/vda rw`},
		{"empty type", "26 1 254:0 / / rw,relatime -  /dev/vda rw"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if m, err := mountinfo.Parse(strings.NewReader(tc.line)); err == nil {
				t.Fatalf("parsed %+v, want an error", m)
			}
		})
	}
}

func TestParseCaptured(t *testing.T) {
	m := readTestdata(t)
	if len(m) != 20 {
		t.Fatalf("%d mounts, want the 20 lines of the file", len(m))
	}
	types := map[string]int{}
	for _, x := range m {
		types[x.FSType]++
	}
	for typ, n := range map[string]int{"ext4": 1, "tmpfs": 3, "cgroup": 9, "fuse.sshfs": 1, "devpts": 2} {
		if types[typ] != n {
			t.Errorf("%d mounts of type %s, want %d (all: %v)", types[typ], typ, n, types)
		}
	}
}

func TestContaining(t *testing.T) {
	mounts := readTestdata(t)
	mounts = append(mounts,
		// A second mount stacked on /dev/shm: the later one is on top.
		mountinfo.Mount{ID: 99, Parent: 29, Point: "/dev/shm", FSType: "fuse.sshfs", Source: "top:/x"})
	tests := []struct {
		path, point, fstype string
	}{
		{"/", "/", "ext4"},
		{"/checkpoints/run1", "/", "ext4"},
		{"/sys/fs/cgroup/cpu/x", "/sys/fs/cgroup/cpu", "cgroup"},
		// A sibling sharing the prefix as a string is not under the mount.
		{"/sys/fs/cgroup/cpuacctx", "/sys/fs/cgroup", "tmpfs"},
		{"/tmp/tmp.E6rvwRvIiW/mnt", "/tmp/tmp.E6rvwRvIiW/mnt", "fuse.sshfs"},
		{"/tmp/tmp.E6rvwRvIiW/mnt/step-100/model.pt", "/tmp/tmp.E6rvwRvIiW/mnt", "fuse.sshfs"},
		{"/tmp/tmp.E6rvwRvIiW/export", "/", "ext4"},
		{"/dev/shm/a", "/dev/shm", "fuse.sshfs"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			m, ok := mountinfo.Containing(mounts, tc.path)
			if !ok || m.Point != tc.point || m.FSType != tc.fstype {
				t.Fatalf("Containing(%s) = %+v, %v; want %s (%s)", tc.path, m, ok, tc.point, tc.fstype)
			}
		})
	}
	if m, ok := mountinfo.Containing(nil, "/x"); ok {
		t.Fatalf("Containing in no mounts = %+v, want none", m)
	}
}

func FuzzParse(f *testing.F) {
	b, err := os.ReadFile("testdata/mountinfo-firecracker.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	for _, l := range []string{nfs4Line, sshfsSpaceLine, `1 1 0:1 / /a\134b rw - x y z`} {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mounts, err := mountinfo.Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, m := range mounts {
			if !strings.HasPrefix(m.Point, "/") || m.FSType == "" {
				t.Fatalf("accepted %+v: a mount point must be absolute and a type non-empty", m)
			}
			// Whatever was parsed, a path at the mount point finds a mount.
			if _, ok := mountinfo.Containing(mounts, m.Point); !ok {
				t.Fatalf("no mount contains %q, a parsed mount point", m.Point)
			}
		}
	})
}
