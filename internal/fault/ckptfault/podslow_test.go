package ckptfault

import (
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
)

// The texts are as the kernel prints them: io.max from
// Documentation/admin-guide/cgroup-v2.rst ("8:16 rbps=2097152 wbps=max
// riops=max wiops=120"), and blkio.throttle.*_bps_device as read back on
// this machine's 6.18 kernel after `echo "7:0 1048576" >` the file.
func TestLimitOf(t *testing.T) {
	for _, c := range []struct {
		name, text string
		v          cgroup.Version
		dev, want  string
	}{
		{"v2 line of the device", "8:16 rbps=2097152 wbps=max riops=max wiops=120\n", cgroup.V2, "8:16", "rbps=2097152 wbps=max"},
		{"v2 other devices only", "8:16 rbps=2097152 wbps=max riops=max wiops=120\n", cgroup.V2, "7:0", v2Unlimited},
		{"v2 empty", "", cgroup.V2, "7:0", v2Unlimited},
		{"v2 second line", "8:0 rbps=1 wbps=2 riops=max wiops=max\n7:0 rbps=max wbps=4096000 riops=max wiops=max\n", cgroup.V2, "7:0", "rbps=max wbps=4096000"},
		{"v2 prefix of another device", "7:01 rbps=1 wbps=1\n", cgroup.V2, "7:0", v2Unlimited},
		{"v1 line", "7:0 1048576\n", cgroup.V1, "7:0", "1048576"},
		{"v1 none", "8:0 5\n", cgroup.V1, "7:0", v1Unlimited},
	} {
		if got := limitOf(c.text, c.v, c.dev); got != c.want {
			t.Errorf("%s: limitOf(%q, %s) = %q, want %q", c.name, c.text, c.dev, got, c.want)
		}
	}
}

// Whatever a limit file holds, limitOf names values of the shape a
// record keeps, or what the file said verbatim for the device.
func FuzzLimitOf(f *testing.F) {
	f.Add("8:16 rbps=2097152 wbps=max riops=max wiops=120\n", "8:16", true)
	f.Add("7:0 1048576\n", "7:0", false)
	f.Add("", "7:0", true)
	f.Fuzz(func(t *testing.T, text, dev string, v2 bool) {
		v := cgroup.V1
		if v2 {
			v = cgroup.V2
		}
		got := limitOf(text, v, dev)
		if v2 && (!strings.HasPrefix(got, "rbps=") || !strings.Contains(got, " wbps=")) {
			t.Fatalf("v2 value %q", got)
		}
		if !v2 && got != v1Unlimited && !strings.Contains(text, got) {
			t.Fatalf("v1 value %q not in the text", got)
		}
	})
}
