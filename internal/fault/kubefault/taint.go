package kubefault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

const (
	annotationCordoned = v1alpha1.AnnotationCordoned
	annotationTainted  = v1alpha1.AnnotationTainted
)

// markedTaint is one taint gpuchaos added, as AnnotationTainted records it.
type markedTaint struct {
	Key    string             `json:"key"`
	Value  string             `json:"value,omitempty"`
	Effect corev1.TaintEffect `json:"effect"`
}

// tainted reads a node's record of gpuchaos's taints. A record that does
// not parse is an error, not an empty record: treating it as empty would
// forget taints that are ours.
func tainted(n *corev1.Node) (map[string]markedTaint, error) {
	m := map[string]markedTaint{}
	s, ok := n.Annotations[annotationTainted]
	if !ok || s == "" {
		return m, nil
	}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("node %s: annotation %s: %w", n.Name, annotationTainted, err)
	}
	if m == nil {
		// "null" unmarshals to a nil map, which Inject could not add to.
		m = map[string]markedTaint{}
	}
	return m, nil
}

func setTainted(n *corev1.Node, m map[string]markedTaint) error {
	if len(m) == 0 {
		delete(n.Annotations, annotationTainted)
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[annotationTainted] = string(b)
	return nil
}

// taint adds a taint recorded in AnnotationTainted under the key, in the
// same update, and removes only that taint on recovery.
type taint struct{ opts Options }

func (t *taint) Inject(ctx context.Context, key string, ref inventory.Ref, v catalog.Values) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ref.Node == "" {
		return errors.New("taint: the target names no node")
	}
	want := markedTaint{Key: v.String("key"), Value: v.String("value"), Effect: corev1.TaintEffect(v.String("effect"))}
	if want.Key == "" || want.Effect == "" {
		return errors.New("taint: key and effect are required")
	}
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var n corev1.Node
		if err := t.opts.Client.Get(ctx, client.ObjectKey{Name: ref.Node}, &n); err != nil {
			return err
		}
		rec, err := tainted(&n)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == want.Key && x.Effect == want.Effect })
		if got, ok := rec[key]; ok && got == want && i >= 0 {
			return nil
		}
		if i >= 0 {
			// A node has one taint per key and effect: taking over one
			// we did not add would remove it on recovery.
			return fmt.Errorf("node %s already has taint %s:%s, which this injection did not add", n.Name, want.Key, want.Effect)
		}
		for k, m := range rec {
			if k != key && m.Key == want.Key && m.Effect == want.Effect {
				return fmt.Errorf("node %s: taint %s:%s is recorded for %s", n.Name, want.Key, want.Effect, k)
			}
		}
		nt := corev1.Taint{Key: want.Key, Value: want.Value, Effect: want.Effect}
		if nt.Effect == corev1.TaintEffectNoExecute {
			// Tolerations with tolerationSeconds count from here.
			now := metav1.Now()
			nt.TimeAdded = &now
		}
		n.Spec.Taints = append(n.Spec.Taints, nt)
		rec[key] = want
		if err := setTainted(&n, rec); err != nil {
			return err
		}
		return t.opts.Client.Update(ctx, &n)
	})
	if err != nil {
		return fmt.Errorf("taint node %s: %w", ref.Node, err)
	}
	return nil
}

// Recover removes the key's taint from every node that records it. A
// taint of that key and effect whose value someone changed since is
// theirs now, and stays.
func (t *taint) Recover(ctx context.Context, key string) error {
	var bad error
	nodes, err := markedNodes(ctx, t.opts.Reader, func(n *corev1.Node) bool {
		rec, err := tainted(n)
		if err != nil {
			bad = errors.Join(bad, err)
			return false
		}
		_, ok := rec[key]
		return ok
	})
	if err != nil {
		return err
	}
	if bad != nil {
		// One of those nodes may carry the key: recovery cannot say it
		// undid everything.
		return fmt.Errorf("recover taint %s: %w", key, bad)
	}
	for _, name := range nodes {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			var n corev1.Node
			if err := t.opts.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
				return err
			}
			rec, err := tainted(&n)
			if err != nil {
				return err
			}
			m, ok := rec[key]
			if !ok {
				return nil
			}
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(x corev1.Taint) bool {
				return x.Key == m.Key && x.Effect == m.Effect && x.Value == m.Value
			})
			delete(rec, key)
			if err := setTainted(&n, rec); err != nil {
				return err
			}
			return t.opts.Client.Update(ctx, &n)
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("untaint node %s: %w", name, err)
		}
	}
	return nil
}
