package storagefault_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/statedir"
	"github.com/gpuchaos/gpuchaos/internal/fault/nodeall"
	"github.com/gpuchaos/gpuchaos/internal/fault/storagefault"
	"github.com/gpuchaos/gpuchaos/internal/harness/ckptpodtest"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/mountinfo"
	nt "github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
)

func TestMain(m *testing.M) {
	ckptpodtest.Main()
	if os.Getenv(nt.SleeperEnv) != "" {
		nt.Sleep()
	}
	if os.Getenv(childEnv) != "" || os.Getenv(spawnedEnv) != "" {
		os.Exit(crashChild())
	}
	goleak.VerifyTestMain(m)
}

var node = inventory.Ref{Kind: catalog.ScopeJob, Node: "n1"}

func partitionFault(t testing.TB) (*catalog.Fault, *catalog.Mechanism) {
	t.Helper()
	f, ok := catalog.Lookup(storagefault.FaultID)
	if !ok {
		t.Fatalf("no fault %s in the catalogue", storagefault.FaultID)
	}
	for i := range f.Mechanisms {
		if f.Mechanisms[i].Name == storagefault.MechanismBPF {
			return f, &f.Mechanisms[i]
		}
	}
	t.Fatalf("%s has no %s mechanism", f.ID, storagefault.MechanismBPF)
	return nil, nil
}

// newInjector returns the injector as the engine gets it: through
// the node's registry (internal/fault/nodeall), with its records under stateDir.
func newInjector(t testing.TB, stateDir string) fault.Injector {
	t.Helper()
	f, m := partitionFault(t)
	in, err := nodeall.Injector(f, m, fault.Env{StateDir: stateDir})
	if err != nil {
		t.Fatalf("nodeall.Injector: %v", err)
	}
	return in
}

func TestNewRefuses(t *testing.T) {
	f, m := partitionFault(t)
	other, _ := catalog.Lookup("checkpoint.fill-volume")
	fuse := &catalog.Mechanism{Name: "fuse-latency"}
	tests := []struct {
		name string
		f    *catalog.Fault
		m    *catalog.Mechanism
		dir  string
	}{
		{"no state directory", f, m, ""},
		{"another fault", other, &other.Mechanisms[0], t.TempDir()},
		{"the other mechanism", f, fuse, t.TempDir()},
		{"no mechanism", f, nil, t.TempDir()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if in, err := storagefault.New(tc.f, tc.m, storagefault.Options{StateDir: tc.dir}); err == nil {
				t.Fatalf("New = %v, want an error", in)
			}
		})
	}
}

// TestInjectRefusesLocalAndBadServers checks the refusals that come before
// any network change, against this machine's real mount table; they need
// no root.
func TestInjectRefusesLocalAndBadServers(t *testing.T) {
	f, m := partitionFault(t)
	data, err := os.ReadFile("../../node/mountinfo/testdata/mountinfo-firecracker.txt")
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := mountinfo.Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	byType := map[string]string{}
	for _, x := range mounts {
		if _, ok := byType[x.FSType]; !ok {
			byType[x.FSType] = x.Point
		}
	}
	mi := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(mi, append(data, []byte(nfs6Line+"\n"+"317 26 0:57 / /mnt/bad rw - nfs storage-7 rw\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "v6only.example":
			return []netip.Addr{netip.MustParseAddr("fd00::9")}, nil
		}
		return nil, errors.New("no such host " + host)
	}
	tests := []struct {
		name string
		raw  map[string]string
		ref  inventory.Ref
		want []string // substrings of the error
	}{
		{"ext4 path", map[string]string{"path": "/checkpoints/run1"}, node, []string{"/checkpoints/run1", "ext4", "not a network filesystem", "server parameter"}},
		{"tmpfs path", map[string]string{"path": byType["tmpfs"] + "/ckpt"}, node, []string{byType["tmpfs"] + "/ckpt", "tmpfs"}},
		{"nfs v6 server", map[string]string{"path": "/mnt/v6/run1"}, node, []string{"fd00::10", "IPv4"}},
		{"nfs source without host", map[string]string{"path": "/mnt/bad"}, node, []string{"storage-7"}},
		{"v6 server given", map[string]string{"server": "fd00::1"}, node, []string{"IPv4"}},
		{"v6 cidr given", map[string]string{"server": "fd00::/64"}, node, []string{"IPv4"}},
		{"unresolvable host", map[string]string{"server": "nowhere.example"}, node, []string{"resolve", "nowhere.example"}},
		{"host with no v4", map[string]string{"server": "v6only.example"}, node, []string{"no IPv4"}},
		{"no path, server or job", map[string]string{}, inventory.Ref{Node: "n1"}, []string{"no server, no path"}},
		// Reading the routes of a namespace by its handle takes root.
		{"server on this node", map[string]string{"server": "127.0.0.1"}, node, []string{"127.0.0.1", "this node"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "server on this node" {
				nt.RequireRoot(t)
			}
			dir := t.TempDir()
			in, err := storagefault.New(f, m, storagefault.Options{StateDir: dir, Mountinfo: mi, LookupIP: lookup})
			if err != nil {
				t.Fatal(err)
			}
			v, err := f.Resolve(tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			err = in.Inject(context.Background(), "k", tc.ref, v)
			if err == nil {
				_ = in.Recover(context.Background(), "k")
				t.Fatal("Inject succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is not one line", err)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
				t.Errorf("a refused injection left records: %v", left)
			}
		})
	}
}

func TestRecoverRefusesDamagedRecords(t *testing.T) {
	valid := `{"version":1,"key":"%s","fault":"checkpoint.storage-partition","mechanism":"cls-bpf","server":"10.0.0.1/32",` +
		`"change":{"id":"0123456789abcdef","kind":"bpf","ns":{"pid":0,"dev":1,"inode":2},"interface":"eth0","index":2,` +
		`"before":{},"filters":[{"hook":"egress","priority":26467,"handle":1,"name":"gpuchaos-0123456789abcdef","drop":{"probability":1}}]}}`
	tests := []struct{ name, body string }{
		{"another key", fmt.Sprintf(valid, "other")},
		{"not json", "{"},
		{"unknown field", `{"version":1,"key":"k","bogus":1}`},
		{"another version", strings.Replace(fmt.Sprintf(valid, "k"), `"version":1`, `"version":2`, 1)},
		{"another fault", strings.Replace(fmt.Sprintf(valid, "k"), "storage-partition", "fill-volume", 1)},
		{"no change", `{"version":1,"key":"k","fault":"checkpoint.storage-partition","mechanism":"cls-bpf","server":"10.0.0.1/32"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d, err := statedir.Open(filepath.Join(dir, "storage"), "storagefault-")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(d.File("k"), []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := newInjector(t, dir).Recover(context.Background(), "k"); err == nil {
				t.Fatal("Recover of a damaged or foreign record succeeded")
			}
			if _, err := os.Stat(d.File("k")); err != nil {
				t.Fatalf("the refused record is gone: %v", err)
			}
		})
	}
}

func TestConformance(t *testing.T) {
	faulttest.Run(t, func(t *testing.T) faulttest.Env {
		sn := newStorageNet(t)
		before := sn.snapshot(t)
		f, _ := partitionFault(t)
		v, err := f.Resolve(map[string]string{"server": sn.Server.String(), "port": "22"})
		if err != nil {
			t.Fatal(err)
		}
		return faulttest.Env{
			Injector: newInjector(t, t.TempDir()),
			Ref:      node,
			Values:   v,
			Applied:  func(string) bool { return !sn.snapshot(t).Equal(before) },
			Vanish:   sn.removeHostLink,
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"version":1,"key":"k","fault":"checkpoint.storage-partition","mechanism":"cls-bpf","server":"10.0.0.1/32","change":null}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := storagefault.DecodeRecord(b)
		if err != nil {
			return
		}
		if r.Key == "" || r.Change == nil || r.Fault != storagefault.FaultID {
			t.Fatalf("accepted a record lacking what recovery needs: %+v", r)
		}
	})
}
