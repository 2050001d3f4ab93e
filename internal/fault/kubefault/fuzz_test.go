package kubefault

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzTainted: the taint record is read from an annotation anyone with
// node write access can edit. Reading never panics, and what reads is
// written back and read again unchanged, so recovery finds every key.
func FuzzTainted(f *testing.F) {
	for _, s := range []string{
		"", "{}", "null", "[]", `{"nf-1":{"key":"nvidia.com/gpu-xid-error","value":"true","effect":"NoSchedule"}}`,
		`{"a":{"key":"k","effect":"NoExecute"},"b":{"key":"k","effect":"NoSchedule"}}`, `{"a":1}`, `{"a":{"key":`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{annotationTainted: s}}}
		rec, err := tainted(n)
		if err != nil {
			return
		}
		if err := setTainted(n, rec); err != nil {
			t.Fatalf("write back %v: %v", rec, err)
		}
		again, err := tainted(n)
		if err != nil {
			t.Fatalf("reading what was written (%q): %v", n.Annotations[annotationTainted], err)
		}
		if !maps.Equal(rec, again) {
			t.Fatalf("round trip changed the record: %v, then %v", rec, again)
		}
		// Inject adds to what it read.
		rec["fuzz"] = markedTaint{Key: "k", Effect: corev1.TaintEffectNoSchedule}
	})
}
