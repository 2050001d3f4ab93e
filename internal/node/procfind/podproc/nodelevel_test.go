package podproc

import (
	"strings"
	"testing"
)

func TestNodeLevel(t *testing.T) {
	t.Parallel()
	const uid, id = "0f0e0d0c-0b0a-0908-0706-050403020100", "abababababababababababababababababababababababababababababababab"
	esc := strings.ReplaceAll(uid, "-", "_")
	tests := []struct {
		group, want string
		ok          bool
	}{
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + esc + ".slice/cri-containerd-" + id + ".scope", "/", true},
		{"/kubepods.slice/kubepods-pod" + esc + ".slice/crio-" + id + ".scope", "/", true},
		{"/kubepods/besteffort/pod" + uid + "/" + id, "/", true},
		{"/kubepods/pod" + uid, "/", true},
		// kind's --cgroup-root=/kubelet, and a node in a container of its own.
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + esc + ".slice/cri-containerd-" + id + ".scope", "/kubelet.slice", true},
		{"/docker/c0ffee/kubelet/kubepods/burstable/pod" + uid + "/" + id + "/sub", "/docker/c0ffee/kubelet", true},
		{"/system.slice/containerd.service", "", false},
		{"/user.slice/kubepods/x", "", false},
		{"/", "", false},
	}
	for _, tc := range tests {
		got, ok := NodeLevel(tc.group)
		if got != tc.want || ok != tc.ok {
			t.Errorf("NodeLevel(%q) = %q, %v; want %q, %v", tc.group, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzNodeLevel holds what the hogs rely on: a node level is an absolute
// clean path that is a proper prefix of the group, above its pod.
func FuzzNodeLevel(f *testing.F) {
	f.Add("/kubepods/besteffort/pod0f0e0d0c-0b0a-0908-0706-050403020100/abc")
	f.Add("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod0f0e0d0c_0b0a_0908_0706_050403020100.slice")
	f.Fuzz(func(t *testing.T, group string) {
		level, ok := NodeLevel(group)
		if !ok {
			return
		}
		if !strings.HasPrefix(level, "/") || (level != "/" && !strings.HasPrefix(group, level+"/")) {
			t.Fatalf("NodeLevel(%q) = %q: not a group above it", group, level)
		}
		if _, pod := ParseGroupPath(level); pod {
			t.Fatalf("NodeLevel(%q) = %q: still in a pod", group, level)
		}
	})
}
