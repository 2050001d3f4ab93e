package storagefault_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/fault/storagefault"
	"github.com/gpuchaos/gpuchaos/internal/node/mountinfo"
)

// Lines written by hand in the kernel's format (this kernel has no NFS or
// CIFS client to capture them from): see internal/node/mountinfo/testdata/README.md.
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

func parseOne(t *testing.T, line string) mountinfo.Mount {
	t.Helper()
	m, err := mountinfo.ParseLine(line)
	if err != nil {
		t.Fatalf("parse %q: %v", line, err)
	}
	return m
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

func FuzzServerOf(f *testing.F) {
	b, err := os.ReadFile("../../node/mountinfo/testdata/mountinfo-firecracker.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	for _, l := range []string{nfs4Line, nfs3Line, nfs6Line, cifsLine, sshfsSpaceLine} {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mounts, err := mountinfo.Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, m := range mounts {
			host, err := storagefault.ServerOf(m)
			if err == nil && host == "" {
				t.Fatalf("ServerOf(%+v) gave an empty host and no error", m)
			}
		}
	})
}
