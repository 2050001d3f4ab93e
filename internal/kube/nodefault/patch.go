package nodefault

import (
	"encoding/json"
	"reflect"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
)

// statusPatch is the merge patch that turns nf's status into s, carrying
// nf's resourceVersion; nil when nothing changes.
func statusPatch(nf *v1alpha1.NodeFault, s v1alpha1.NodeFaultStatus) ([]byte, error) {
	orig, err := jsonObject(map[string]any{"status": nf.Status})
	if err != nil {
		return nil, err
	}
	mod, err := jsonObject(map[string]any{"status": s})
	if err != nil {
		return nil, err
	}
	p := mergePatch(orig, mod)
	if len(p) == 0 {
		return nil, nil
	}
	p["metadata"] = map[string]any{"resourceVersion": nf.ResourceVersion}
	return json.Marshal(p)
}

// finalizersPatch is the merge patch that sets nf's finalizers to fs,
// carrying nf's resourceVersion: a merge patch replaces a list whole, so
// without it a finalizer another writer added meanwhile would be lost.
func finalizersPatch(nf *v1alpha1.NodeFault, fs []string) ([]byte, error) {
	var list any = fs
	if len(fs) == 0 {
		list = nil // removes the member
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": list, "resourceVersion": nf.ResourceVersion}})
}

// jsonObject is v as encoding/json reads a JSON object back.
func jsonObject(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	err = json.Unmarshal(b, &m)
	return m, err
}

// mergePatch returns the JSON merge patch (RFC 7386) that turns the
// object orig into mod: members mod changed or added with their new
// value, objects patched member by member, members mod lacks as null.
// Lists are replaced whole, as RFC 7386 has it.
func mergePatch(orig, mod map[string]any) map[string]any {
	p := map[string]any{}
	for k, ov := range orig {
		mv, ok := mod[k]
		if !ok {
			p[k] = nil
			continue
		}
		om, oObj := ov.(map[string]any)
		mm, mObj := mv.(map[string]any)
		if oObj && mObj {
			if sub := mergePatch(om, mm); len(sub) > 0 {
				p[k] = sub
			}
			continue
		}
		if !reflect.DeepEqual(ov, mv) {
			p[k] = mv
		}
	}
	for k, mv := range mod {
		if _, ok := orig[k]; !ok {
			p[k] = mv
		}
	}
	return p
}
