package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/model/suggest"
)

// CheckSpec validates one fault of an experiment against the catalogue. It
// is the v1alpha1.ValidateOptions.CheckFault of every command. The error's
// Path is relative to the fault: "id" for an unknown fault (the message
// names the closest id), "mechanism" for a mechanism the fault does not
// have, "params.<name>" for a parameter that is unknown, unparsable, out of
// bounds or rejected by the fault's own check (an XID code not in the
// table).
func CheckSpec(f v1alpha1.FaultSpec) *v1alpha1.FieldError {
	_, _, _, fe := resolveSpec(All(), f)
	return fe
}

// ResolveSpec looks the fault up, picks the named mechanism and resolves the
// parameters, as the engine needs them to inject. The mechanism is nil when
// the spec names none: the engine then takes the first mechanism built for
// its target (see ChooseMechanism). A failure is a *v1alpha1.FieldError
// whose Path is relative to the fault, as CheckSpec's.
func ResolveSpec(f v1alpha1.FaultSpec) (*Fault, *Mechanism, Values, error) {
	fault, mech, vals, fe := resolveSpec(All(), f)
	if fe != nil {
		return nil, nil, nil, fe
	}
	return fault, mech, vals, nil
}

// resolveSpec does the work of CheckSpec and ResolveSpec over a given list
// of faults, so tests can use their own.
func resolveSpec(all []*Fault, f v1alpha1.FaultSpec) (*Fault, *Mechanism, Values, *v1alpha1.FieldError) {
	i := slices.IndexFunc(all, func(x *Fault) bool { return x.ID == f.ID })
	if i < 0 {
		return nil, nil, nil, &v1alpha1.FieldError{Path: "id", Msg: unknownFault(all, f.ID)}
	}
	fault := all[i]
	var mech *Mechanism
	if f.Mechanism != "" {
		mech = fault.Mechanism(f.Mechanism)
		if mech == nil {
			return nil, nil, nil, &v1alpha1.FieldError{Path: "mechanism", Msg: fmt.Sprintf("fault %s has no mechanism %q (known: %s)", fault.ID, f.Mechanism, strings.Join(mechanismNames(fault), ", "))}
		}
	}
	raw := make(map[string]string, len(f.Params))
	for k, v := range f.Params {
		raw[k] = string(v)
	}
	vals, err := fault.Resolve(raw)
	if err != nil {
		var pe *ParamError
		if errors.As(err, &pe) {
			return nil, nil, nil, &v1alpha1.FieldError{Path: paramPath(pe.Param), Msg: pe.Err.Error()}
		}
		return nil, nil, nil, &v1alpha1.FieldError{Path: "params", Msg: err.Error()}
	}
	return fault, mech, vals, nil
}

// paramPath names a parameter the way the loader names map keys, so a
// validation error can be placed on its line.
func paramPath(name string) string {
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Sprintf("params[%q]", name)
		}
	}
	if name == "" {
		return `params[""]`
	}
	return "params." + name
}

func mechanismNames(f *Fault) []string {
	names := make([]string, len(f.Mechanisms))
	for i, m := range f.Mechanisms {
		names[i] = m.Name
	}
	return names
}

// unknownFault words the error for an id not in the catalogue, pointing at
// the likeliest intended id: the closest by edit distance when it is a
// plausible typo, or the only fault whose name part matches ("xid" for
// hardware.xid).
func unknownFault(all []*Fault, id string) string {
	msg := fmt.Sprintf("unknown fault %q", id)
	if best := closestID(all, id); best != "" {
		return msg + " (did you mean " + best + "?)"
	}
	return msg + "; run 'gpuchaos faults' to list them"
}

func closestID(all []*Fault, id string) string {
	var byName, ids []string
	_, want, hasDot := strings.Cut(id, ".")
	if !hasDot {
		want = id
	}
	for _, f := range all {
		ids = append(ids, f.ID)
		if _, name, _ := strings.Cut(f.ID, "."); name == want {
			byName = append(byName, f.ID)
		}
	}
	if best, d := suggest.Closest(id, ids); best != "" && d <= max(2, len(id)/4) {
		return best
	}
	if len(byName) == 1 {
		return byName[0]
	}
	return ""
}
