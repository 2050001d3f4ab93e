package storagefault_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/fault/storagefault"
)

// Lines written by hand in the kernel's format (this kernel has no NFS or
// CIFS client to capture them from): see testdata/README.md.
const (
	nfs4Line = "312 26 0:52 / /mnt/ckpt rw,relatime shared:180 - nfs4 storage-0:/export/ckpt rw,vers=4.2,rsize=1048576," +
		"wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.2,local_lock=none,addr=10.0.0.10"
	nfs3Line = "313 26 0:53 / /mnt/nfs3 rw,relatime - nfs storage-1:/vol/ckpt rw,vers=3,rsize=65536,wsize=65536,namlen=255," +
		"hard,proto=tcp,timeo=600,retrans=2,sec=sys,mountaddr=10.0.0.11,mountvers=3,mountport=20048,mountproto=udp,local_lock=none"
	nfs6Line = "314 26 0:54 / /mnt/v6 rw,relatime - nfs4 [fd00::10]:/export rw,vers=4.2,hard,proto=tcp6,clientaddr=fd00::2,local_lock=none"
	cifsLine = "315 26 0:55 / /mnt/smb rw,relatime - cifs //filer.example.org/ckpt rw,vers=3.1.1,cache=strict,username=svc,uid=0," +
		"noforceuid,gid=0,noforcegid,addr=10.0.0.12,file_mode=0755,dir_mode=0755,soft,nounix,serverino,mapposix,echo_interval=60"
	sshfsSpaceLine = `316 26 0:56 / /mnt/my\040ckpt rw,relatime - fuse.sshfs alice@storage-2:/data rw,user_id=0,group_id=0`
)

func readTestdata(t testing.TB) []storagefault.Mount {
	t.Helper()
	f, err := os.Open("testdata/mountinfo-firecracker.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := storagefault.ParseMountinfo(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func parseOne(t *testing.T, line string) storagefault.Mount {
	t.Helper()
	m, err := storagefault.ParseMountinfo(strings.NewReader(line + "\n"))
	if err != nil {
		t.Fatalf("parse %q: %v", line, err)
	}
	if len(m) != 1 {
		t.Fatalf("parse %q: %d mounts, want 1", line, len(m))
	}
	return m[0]
}

func TestParseMountinfoLines(t *testing.T) {
	tests := []struct {
		name, line string
		want       storagefault.Mount
	}{
		{"captured root ext4", "26 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534",
			storagefault.Mount{ID: 26, Parent: 1, Point: "/", FSType: "ext4", Source: "/dev/vda", Options: "rw,discard,resv_strict,resuid=65534,resgid=65534"}},
		{"captured tmpfs", "24 23 0:22 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683620k",
			storagefault.Mount{ID: 24, Parent: 23, Point: "/dev/shm", FSType: "tmpfs", Source: "tmpfs", Options: "rw,size=24683620k"}},
		{"captured bind with optional field", "41 26 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw,discard",
			storagefault.Mount{ID: 41, Parent: 26, Point: "/run/netns", FSType: "ext4", Source: "/dev/vda", Options: "rw,discard"}},
		{"captured sshfs", "48 26 0:39 / /tmp/tmp.E6rvwRvIiW/mnt rw,nosuid,nodev,relatime - fuse.sshfs root@10.203.0.2:/tmp/tmp.E6rvwRvIiW/export rw,user_id=0,group_id=0",
			storagefault.Mount{ID: 48, Parent: 26, Point: "/tmp/tmp.E6rvwRvIiW/mnt", FSType: "fuse.sshfs", Source: "root@10.203.0.2:/tmp/tmp.E6rvwRvIiW/export", Options: "rw,user_id=0,group_id=0"}},
		{"nfs4 two optional fields", strings.Replace(nfs4Line, "shared:180", "shared:180 master:7", 1),
			storagefault.Mount{ID: 312, Parent: 26, Point: "/mnt/ckpt", FSType: "nfs4", Source: "storage-0:/export/ckpt", Options: nfs4Line[strings.Index(nfs4Line, "rw,vers"):]}},
		{"escaped space in point", sshfsSpaceLine,
			storagefault.Mount{ID: 316, Parent: 26, Point: "/mnt/my ckpt", FSType: "fuse.sshfs", Source: "alice@storage-2:/data", Options: "rw,user_id=0,group_id=0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseOne(t, tc.line); got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseMountinfoRefuses(t *testing.T) {
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
			if m, err := storagefault.ParseMountinfo(strings.NewReader(tc.line)); err == nil {
				t.Fatalf("parsed %+v, want an error", m)
			}
		})
	}
}

func TestParseMountinfoCaptured(t *testing.T) {
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
		storagefault.Mount{ID: 99, Parent: 29, Point: "/dev/shm", FSType: "fuse.sshfs", Source: "top:/x"})
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
			m, ok := storagefault.Containing(mounts, tc.path)
			if !ok || m.Point != tc.point || m.FSType != tc.fstype {
				t.Fatalf("Containing(%s) = %+v, %v; want %s (%s)", tc.path, m, ok, tc.point, tc.fstype)
			}
		})
	}
	if m, ok := storagefault.Containing(nil, "/x"); ok {
		t.Fatalf("Containing in no mounts = %+v, want none", m)
	}
}

func TestServerOf(t *testing.T) {
	tests := []struct {
		name, line string
		want       string // "" when an error is wanted
		notNetwork bool
	}{
		{"captured sshfs", "48 26 0:39 / /tmp/t/mnt rw - fuse.sshfs root@10.203.0.2:/tmp/t/export rw,user_id=0,group_id=0", "10.203.0.2", false},
		{"sshfs host name and relative dir", sshfsSpaceLine, "storage-2", false},
		{"sshfs without user", "1 1 0:1 / /m rw - fuse.sshfs storage-3:data rw", "storage-3", false},
		{"sshfs empty dir", "1 1 0:1 / /m rw - fuse.sshfs bob@storage-4: rw", "storage-4", false},
		{"sshfs bracketed v6", "1 1 0:1 / /m rw - fuse.sshfs bob@[fd00::4]:/d rw", "fd00::4", false},
		{"nfs4 prefers addr", nfs4Line, "10.0.0.10", false},
		{"nfs3 no addr uses source", nfs3Line, "storage-1", false},
		{"nfs4 bracketed v6", nfs6Line, "fd00::10", false},
		{"cifs prefers addr", cifsLine, "10.0.0.12", false},
		{"cifs without addr", "1 1 0:1 / /m rw - cifs //filer-2/share rw,vers=3.0", "filer-2", false},
		{"smb3 backslashes, escaped", `1 1 0:1 / /m rw - smb3 \134\134filer-3\134share rw`, "filer-3", false},
		{"nfs clientaddr is not addr", "1 1 0:1 / /m rw - nfs4 storage-5:/e rw,clientaddr=10.0.0.2", "storage-5", false},
		{"nfs source without colon", "1 1 0:1 / /m rw - nfs storage-6 rw", "", false},
		{"nfs empty host", "1 1 0:1 / /m rw - nfs :/export rw", "", false},
		{"cifs not a share", "1 1 0:1 / /m rw - cifs filer:/x rw", "", false},
		{"bad bracket", "1 1 0:1 / /m rw - nfs4 [fd00::1/export rw", "", false},
		{"captured ext4", "26 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard", "", true},
		{"captured tmpfs", "24 23 0:22 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683620k", "", true},
		{"other fuse", "1 1 0:1 / /m rw - fuse.rclone remote:bucket rw", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := storagefault.ServerOf(parseOne(t, tc.line))
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("ServerOf = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ServerOf = %q, want an error", got)
			}
			if errors.Is(err, storagefault.ErrNotNetwork) != tc.notNetwork {
				t.Fatalf("error %v: is ErrNotNetwork = %v, want %v", err, !tc.notNetwork, tc.notNetwork)
			}
		})
	}
}

func FuzzParseMountinfo(f *testing.F) {
	b, err := os.ReadFile("testdata/mountinfo-firecracker.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	for _, l := range []string{nfs4Line, nfs3Line, nfs6Line, cifsLine, sshfsSpaceLine, `1 1 0:1 / /a\134b rw - x y z`} {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mounts, err := storagefault.ParseMountinfo(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, m := range mounts {
			if !strings.HasPrefix(m.Point, "/") || m.FSType == "" {
				t.Fatalf("accepted %+v: a mount point must be absolute and a type non-empty", m)
			}
			// Whatever was parsed, a path at the mount point finds a mount.
			if _, ok := storagefault.Containing(mounts, m.Point); !ok {
				t.Fatalf("no mount contains %q, a parsed mount point", m.Point)
			}
			host, err := storagefault.ServerOf(m)
			if err == nil && host == "" {
				t.Fatalf("ServerOf(%+v) gave an empty host and no error", m)
			}
		}
	})
}
