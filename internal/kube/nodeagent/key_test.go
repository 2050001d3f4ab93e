package nodeagent

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/all"
	"github.com/gpuchaos/gpuchaos/internal/fault/kubefault"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		key  string
		name string
		uid  types.UID
		ok   bool
	}{
		{"nodefault/xid/6f1c", "xid", "6f1c", true},
		{"nodefault/a.b-c/uid/with/slash", "a.b-c", "uid/with/slash", true},
		{"run-1/network.loss", "", "", false},
		{"nodefault/", "", "", false},
		{"nodefault/name", "", "", false},
		{"nodefault//uid", "", "", false},
		{"nodefault/name/", "", "", false},
	}
	for _, tc := range tests {
		name, uid, ok := parseKey(tc.key)
		if name != tc.name || uid != tc.uid || ok != tc.ok {
			t.Errorf("parseKey(%q) = %q, %q, %v; want %q, %q, %v", tc.key, name, uid, ok, tc.name, tc.uid, tc.ok)
		}
	}
	nf := &v1alpha1.NodeFault{ObjectMeta: metav1.ObjectMeta{Name: "loss", UID: "1234-abcd"}}
	if name, uid, ok := parseKey(Key(nf)); !ok || name != nf.Name || uid != nf.UID {
		t.Errorf("parseKey(Key) = %q, %q, %v; want the NodeFault's name and uid", name, uid, ok)
	}
}

// FuzzParseKey holds parseKey to Key: whatever it accepts, Key of the
// name and uid it returns is the key it read.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"nodefault/xid/6f1c", "run-1/network.loss", "nodefault//", "nodefault/a/b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		name, uid, ok := parseKey(key)
		if !ok {
			return
		}
		nf := &v1alpha1.NodeFault{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
		if got := Key(nf); got != key {
			t.Errorf("parseKey(%q) = %q, %q; Key of those is %q", key, name, uid, got)
		}
	})
}

// The agent and the controller split NodeFaults by mechanism: none the
// agent skips may be one the registry runs on a node, or a NodeFault would
// be applied by both; every API mechanism has an injector (on k8s); and
// the mechanisms the agent leaves to the controller are exactly those the
// controller applies (kubefault's), so none is applied by nobody.
func TestAPIMechanismsAreNotLocal(t *testing.T) {
	api, kube := APIMechanisms(), kubefault.Mechanisms()
	slices.Sort(api)
	slices.Sort(kube)
	if !slices.Equal(api, kube) {
		t.Errorf("the agent leaves %v to the controller, which applies %v", api, kube)
	}
	for _, m := range APIMechanisms() {
		if !slices.ContainsFunc(all.Registry(nil), func(e fault.Entry) bool { return e.Mechanism == m && slices.Contains(e.Targets, "k8s") }) {
			t.Errorf("API mechanism %s has no k8s injector in the registry", m)
		}
	}
	for _, e := range all.Registry(nil) {
		if slices.Contains(e.Targets, "local") && slices.Contains(APIMechanisms(), e.Mechanism) {
			t.Errorf("mechanism %s is in APIMechanisms and in the local registry", e.Mechanism)
		}
	}
}
