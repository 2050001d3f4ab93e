package storagefault_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/storagefault"
	nf "github.com/gpuchaos/gpuchaos/internal/node/trafficctl"
	nt "github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
)

// TestRecoverWhateverBecameOfTheInterface cuts a storage server off, makes
// the interface to it vanish in each way it can, and checks what a fresh
// injector's Recover says: recovered with the interface's traffic control
// as before, gone only with netfault's proof, or pending (fault.ErrUnproven
// passed through) with the record kept.
func TestRecoverWhateverBecameOfTheInterface(t *testing.T) {
	tests := []struct {
		name string
		// vanish acts on the cut interface; it returns the name to look
		// the interface up by afterwards ("" when it is gone).
		vanish func(t *testing.T, sn *storageNet, stateDir string) string
		want   string // recovered, gone, or gone-or-pending
		proof  string
	}{
		{name: "left as it was", want: "recovered",
			vanish: func(_ *testing.T, sn *storageNet, _ string) string { return sn.HostIf }},
		{name: "interface renamed", want: "recovered",
			vanish: func(t *testing.T, sn *storageNet, _ string) string { return sn.rename(t, sn.HostIf+"x") }},
		{name: "interface deleted", want: "gone", proof: "no device has the index any more",
			vanish: func(_ *testing.T, sn *storageNet, _ string) string { sn.removeHostLink(); return "" }},
		{name: "namespace no longer this process's", want: "gone-or-pending",
			vanish: func(t *testing.T, sn *storageNet, stateDir string) string {
				// As if the pid the namespace was found through now lived
				// in another one: the recorded namespace is searched for.
				editRecord(t, stateDir, func(r *storagefault.Record) { r.Change.NS.PID, r.Change.NS.Inode = sn.fx.PID, r.Change.NS.Inode+1 })
				return sn.HostIf
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sn := newStorageNet(t)
			before := sn.snapshot(t)
			stateDir := t.TempDir()
			f, _ := partitionFault(t)
			v, err := f.Resolve(map[string]string{"server": sn.Server.String(), "port": "22"})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := newInjector(t, stateDir).Inject(ctx, "k", node, v); err != nil {
				t.Fatal(err)
			}
			real := recordOf(t, stateDir).Change
			name := tc.vanish(t, sn, stateDir)
			err = newInjector(t, stateDir).Recover(ctx, "k")
			left, _ := filepath.Glob(filepath.Join(stateDir, "storage", "*.json"))
			want := tc.want
			if want == "gone-or-pending" {
				want, tc.proof = "gone", "no holder left"
				if hidden := nt.HiddenProcesses(t); len(hidden) > 0 {
					want, tc.proof = "pending", hidden[0]
				}
			}
			switch want {
			case "recovered":
				if err != nil || len(left) != 0 {
					t.Fatalf("Recover = %v (records %v), want success", err, left)
				}
			case "gone":
				if !errors.Is(err, fault.ErrTargetGone) || errors.Is(err, fault.ErrUnproven) || !strings.Contains(err.Error(), tc.proof) || len(left) != 0 {
					t.Fatalf("Recover = %v (records %v), want ErrTargetGone with %q", err, left, tc.proof)
				}
			case "pending":
				if !errors.Is(err, fault.ErrUnproven) || !errors.Is(err, nf.ErrUnproven) || errors.Is(err, fault.ErrTargetGone) ||
					!strings.Contains(err.Error(), tc.proof) || len(left) != 1 {
					t.Fatalf("Recover = %v (records %v), want fault.ErrUnproven naming %s and the record kept", err, left, tc.proof)
				}
			}
			if tc.want == "gone-or-pending" {
				if err := real.Undo(ctx); err != nil { // the real change, in this process's namespace
					t.Fatal(err)
				}
			}
			if name == "" {
				return
			}
			now, err := nf.Take(ctx, nf.Target{Interface: name})
			if err != nil {
				t.Fatal(err)
			}
			before.Interface = name
			if !now.Equal(before) {
				g, _ := json.Marshal(now)
				w, _ := json.Marshal(before)
				t.Fatalf("traffic control after recovery\n got %s\nwant %s", g, w)
			}
		})
	}
}

// rename renames the host's end of the storage veth, as udev or an
// operator may, and returns the new name; the device, and what is on it,
// stays the same.
func (sn *storageNet) rename(t testing.TB, to string) string {
	t.Helper()
	l, err := sn.host.LinkByName(sn.HostIf)
	if err != nil {
		t.Fatal(err)
	}
	// A link is renamed down; the veth pair stays, so the cleanup that
	// deletes it by its first name deletes it by the new one.
	for _, err := range []error{sn.host.LinkSetDown(l), sn.host.LinkSetName(l, to), sn.host.LinkSetUp(l)} {
		if err != nil {
			t.Fatalf("rename %s to %s: %v", sn.HostIf, to, err)
		}
	}
	sn.HostIf = to
	return to
}

// editRecord rewrites the one record under stateDir's storage directory.
func editRecord(t testing.TB, stateDir string, edit func(*storagefault.Record)) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(stateDir, "storage", "*.json"))
	if len(files) != 1 {
		t.Fatalf("records %v, want one", files)
	}
	r := recordOf(t, stateDir)
	edit(&r)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
}
