package podproc

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseGroupPathRealPaths reads every path of testdata/paths.txt,
// copied from public threads (the file names each one's source).
func TestParseGroupPathRealPaths(t *testing.T) {
	f, err := os.Open("testdata/paths.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n, cases := 0, 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cases++
		fs := strings.Split(line, "\t")
		if len(fs) != 6 {
			t.Fatalf("paths.txt line %d: %d fields, want 6", n, len(fs))
		}
		dash := func(s string) string {
			if s == "-" {
				return ""
			}
			return s
		}
		want := Group{PodUID: dash(fs[1]), QoS: dash(fs[2]), Runtime: dash(fs[3]), ContainerID: dash(fs[4]), Conmon: fs[5] == "yes"}
		got, ok := ParseGroupPath(fs[0])
		if ok != (want.PodUID != "") || got != want {
			t.Errorf("line %d: ParseGroupPath(%q) = %+v, %v; want %+v", n, fs[0], got, ok, want)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cases < 15 {
		t.Fatalf("read %d cases from paths.txt, want at least 15", cases)
	}
}

// TestParseGroupPath covers the layouts kubelet makes that no captured
// thread shows (Guaranteed pods), and what must not read as a pod.
func TestParseGroupPath(t *testing.T) {
	const (
		uid = "16e6a747-9d40-4120-bbac-ca7cd274fdd9"
		esc = "16e6a747_9d40_4120_bbac_ca7cd274fdd9"
		id  = "d7dfb4a21fe1703a8537e60d5af248af729315d187b24a538102d14874c8117d"
	)
	tests := []struct {
		name, path string
		want       Group // zero: not a pod
	}{
		{"systemd guaranteed", "/kubepods.slice/kubepods-pod" + esc + ".slice/cri-containerd-" + id + ".scope",
			Group{PodUID: uid, QoS: QoSGuaranteed, Runtime: "cri-containerd", ContainerID: id}},
		{"systemd guaranteed pod group", "/kubepods.slice/kubepods-pod" + esc + ".slice",
			Group{PodUID: uid, QoS: QoSGuaranteed}},
		{"cgroupfs guaranteed", "/kubepods/pod" + uid + "/" + id,
			Group{PodUID: uid, QoS: QoSGuaranteed, ContainerID: id}},
		{"cgroupfs guaranteed crio", "/kubepods/pod" + uid + "/crio-" + id,
			Group{PodUID: uid, QoS: QoSGuaranteed, Runtime: "crio", ContainerID: id}},
		{"crio conmon in the pod", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + esc + ".slice/crio-conmon-" + id + ".scope",
			Group{PodUID: uid, QoS: QoSBurstable, Runtime: "crio", ContainerID: id, Conmon: true}},
		{"groups below the container's", "/kubepods.slice/kubepods-pod" + esc + ".slice/docker-" + id + ".scope/init.scope",
			Group{PodUID: uid, QoS: QoSGuaranteed, Runtime: "docker", ContainerID: id}},
		{"seen from a cgroup namespace", "/../../kubepods.slice/kubepods-pod" + esc + ".slice/cri-containerd-" + id + ".scope",
			Group{PodUID: uid, QoS: QoSGuaranteed, Runtime: "cri-containerd", ContainerID: id}},
		{"a group of someone else's in the pod", "/kubepods/besteffort/pod" + uid + "/gpuchaos-confine",
			Group{PodUID: uid, QoS: QoSBestEffort}},
		{"cgroup-root under kubepods name", "/custom/kubepods/burstable/pod" + uid,
			Group{PodUID: uid, QoS: QoSBurstable}},
		{"qos slice only", "/kubepods.slice/kubepods-burstable.slice", Group{}},
		{"a pod dir outside kubepods", "/machine/pod" + uid, Group{}},
		{"podman is not a pod", "/kubepods/podman", Group{}},
		{"qos without kubepods", "/burstable/pod" + uid, Group{}},
		{"dash in an escaped uid", "/kubepods.slice/kubepods-pod" + uid + ".slice", Group{}},
		{"slice of another parent", "/machine.slice/machine-pod" + esc + ".slice", Group{}},
		{"empty", "", Group{}},
		{"root", "/", Group{}},
		{"uid too long", "/kubepods/pod" + strings.Repeat("a", 65), Group{}},
		{"short container id", "/kubepods/pod" + uid + "/abc", Group{PodUID: uid, QoS: QoSGuaranteed}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseGroupPath(tc.path)
			if ok != (tc.want.PodUID != "") || got != tc.want {
				t.Errorf("ParseGroupPath(%q) = %+v, %v; want %+v", tc.path, got, ok, tc.want)
			}
		})
	}
}

// TestParseProcCgroupReal reads the /proc/PID/cgroup texts of testdata/proc
// (testdata/README.md names each one's source).
func TestParseProcCgroupReal(t *testing.T) {
	tests := []struct {
		file string
		want Group // zero: ErrNotInPod
	}{
		{"runc-4620.txt", Group{PodUID: "a5c1f8d5-1919-434d-add7-4afaafdaef89", QoS: QoSBurstable, Runtime: "crio", ContainerID: "5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c"}},
		{"lxc-3890.txt", Group{PodUID: "7d4424e6-bb13-42f4-a47a-45a4828bf54d", QoS: QoSBurstable, Runtime: "docker", ContainerID: "d0b3604b67ac7930dd34ba3a796627e3e4717d12309e90a4afe3f38b6816ac98"}},
		{"adoptium-638.txt", Group{PodUID: "d7874f44-eee0-423c-83c9-f246075bdde1", QoS: QoSBurstable, ContainerID: "fbaa59723cd1f05d310e6f48b5d49a9d9e9552b7fde2205d0a2e2b5f60ec21ba"}},
		{"otel-java-4507.txt", Group{PodUID: "0125ec2f-b64a-4868-8f5b-94b56cbab864", QoS: QoSBestEffort, Runtime: "cri-containerd", ContainerID: "ee4b20e90ac7f42a10bd004d05646b13d8ab5e2c5e7cbc01abf8006bac016459"}},
		{"ctrsploit-280.txt", Group{}},
		{"k8s-36807.txt", Group{}},
		{"pharos-440-kubelet.txt", Group{}},
		{"this-machine.txt", Group{}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "proc", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseProcCgroup(b)
			if tc.want.PodUID == "" {
				if !errors.Is(err, ErrNotInPod) {
					t.Errorf("ParseProcCgroup = %+v, %v; want ErrNotInPod", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("ParseProcCgroup = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	const (
		a  = "0::/kubepods.slice/kubepods-podaaaaaaaa_0000_0000_0000_000000000000.slice/cri-containerd-1111111111111111111111111111111111111111111111111111111111111111.scope"
		a1 = "4:memory:/kubepods.slice/kubepods-podaaaaaaaa_0000_0000_0000_000000000000.slice"
		b1 = "4:memory:/kubepods.slice/kubepods-podbbbbbbbb_0000_0000_0000_000000000000.slice"
	)
	tests := []struct {
		name, text string
		want       string // container id; "" with wantErr ""
		wantErr    string // "" none, "notinpod", else a substring
	}{
		{"v2 line", a + "\n", "1111111111111111111111111111111111111111111111111111111111111111", ""},
		{"v2 container over a v1 pod group", a1 + "\n" + a + "\n", "1111111111111111111111111111111111111111111111111111111111111111", ""},
		{"pod group only", a1 + "\n", "", ""},
		{"two pods", a1 + "\n" + b1 + "\n", "", "names pod"},
		{"empty", "", "", "notinpod"},
		{"blank line", a1 + "\n\n" + a + "\n", "", "line 2: empty"},
		{"two fields", "0:/kubepods\n", "", "want ID:CONTROLLERS:PATH"},
		{"negative id", "-1::/\n", "", "hierarchy id"},
		{"id with a plus", "+1::/\n", "", "hierarchy id"},
		{"relative path", "0::kubepods\n", "", "not absolute"},
		{"no newline at the end", a, "1111111111111111111111111111111111111111111111111111111111111111", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcCgroup([]byte(tc.text))
			switch {
			case tc.wantErr == "notinpod":
				if !errors.Is(err, ErrNotInPod) {
					t.Errorf("= %+v, %v; want ErrNotInPod", got, err)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("= %+v, %v; want an error with %q", got, err, tc.wantErr)
				}
			case err != nil || got.ContainerID != tc.want || got.PodUID != "aaaaaaaa-0000-0000-0000-000000000000":
				t.Errorf("= %+v, %v; want pod aaaaaaaa-… container %q", got, err, tc.want)
			}
		})
	}
}

// FuzzParseProcCgroup checks that no text panics the parser and that
// what it returns is consistent: a pod UID that isUID accepts, a
// container id only with a pod, and the same answer from a path the
// systemd driver would write for it.
func FuzzParseProcCgroup(f *testing.F) {
	ents, err := os.ReadDir("testdata/proc")
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("testdata/proc", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("0::/kubepods/pod1/0123456789ab\n"))
	f.Add([]byte("1:name=systemd:/kubepods.slice/kubepods-pod1.slice:crio:0123456789ab\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := ParseProcCgroup(b)
		if err != nil {
			if g != (Group{}) {
				t.Fatalf("error %v with a group %+v", err, g)
			}
			return
		}
		if !isUID(g.PodUID) {
			t.Fatalf("pod uid %q", g.PodUID)
		}
		if g.QoS != QoSGuaranteed && g.QoS != QoSBurstable && g.QoS != QoSBestEffort {
			t.Fatalf("qos %q", g.QoS)
		}
		if g.ContainerID != "" && !isID(g.ContainerID) {
			t.Fatalf("container id %q", g.ContainerID)
		}
		if strings.Contains(g.PodUID, "_") {
			return // a uid with no dash reads back the same; one with "_" cannot come from kubelet
		}
		p := "/kubepods.slice/kubepods-pod" + strings.ReplaceAll(g.PodUID, "-", "_") + ".slice"
		if back, ok := ParseGroupPath(p); !ok || back.PodUID != g.PodUID {
			t.Fatalf("pod %q does not read back from %q: %+v, %v", g.PodUID, p, back, ok)
		}
	})
}

// FuzzParseGroupPath checks ParseGroupPath on any path: no panic, and a
// pod found only with a UID kubelet could have written.
func FuzzParseGroupPath(f *testing.F) {
	b, err := os.ReadFile("testdata/paths.txt")
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, _, ok := strings.Cut(line, "\t"); ok && !strings.HasPrefix(line, "#") {
			f.Add(p)
		}
	}
	f.Fuzz(func(t *testing.T, p string) {
		g, ok := ParseGroupPath(p)
		if !ok {
			if g != (Group{}) {
				t.Fatalf("not a pod, yet %+v", g)
			}
			return
		}
		if !isUID(g.PodUID) || !strings.Contains(p, strings.ReplaceAll(g.PodUID, "-", "_")) && !strings.Contains(p, g.PodUID) {
			t.Fatalf("pod uid %q from %q", g.PodUID, p)
		}
		if g.ContainerID != "" && !strings.Contains(p, g.ContainerID) {
			t.Fatalf("container %q from %q", g.ContainerID, p)
		}
	})
}
