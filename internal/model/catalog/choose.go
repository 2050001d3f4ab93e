package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrPlanned reports that the mechanism chosen for a target is declared
// there but not built: it is in the mechanism's Planned, not its Targets.
// A run cannot use it; callers treat it as bad input.
var ErrPlanned = errors.New("planned, not built")

// ErrHardwareRisk reports that the mechanism chosen is hardware-risk and
// the experiment does not allow that (spec.allowHardwareRisk).
var ErrHardwareRisk = errors.New("hardware-risk")

// ChooseMechanism decides which mechanism of f an injection on target
// (twin, local, k8s) uses. It is the one place that decides; the engine's
// plan and its recovery both ask it.
//
// A name must be a mechanism of f implemented on target; when it is
// hardware-risk, allowHardwareRisk must be set. Without a name the choice
// is the first mechanism implemented on target that is not hardware-risk,
// or is and allowHardwareRisk is set: a risky mechanism is only used when
// allowed. A mechanism only planned for target fails with ErrPlanned, a
// risky one not allowed with ErrHardwareRisk; each error is one line that
// says what would run instead, where anything does.
func ChooseMechanism(f *Fault, name, target string, allowHardwareRisk bool) (*Mechanism, error) {
	if name != "" {
		return chooseNamed(f, name, target, allowHardwareRisk)
	}
	var risky, planned []string
	for i := range f.Mechanisms {
		m := &f.Mechanisms[i]
		switch {
		case slices.Contains(m.Targets, target) && (m.Safety != SafetyHardwareRisk || allowHardwareRisk):
			return m, nil
		case slices.Contains(m.Targets, target):
			risky = append(risky, m.Name)
		case slices.Contains(m.Planned, target):
			planned = append(planned, m.Name)
		}
	}
	switch {
	case len(risky) > 0:
		return nil, fmt.Errorf("%s: every mechanism built for target %s is %w (%s); set spec.allowHardwareRisk to run one",
			f.ID, target, ErrHardwareRisk, strings.Join(risky, ", "))
	case len(planned) == 1:
		return nil, fmt.Errorf("%s: mechanism %s on target %s is %w%s", f.ID, planned[0], target, ErrPlanned, elsewhere(f, target))
	case len(planned) > 1:
		return nil, fmt.Errorf("%s: mechanisms %s on target %s are %w%s", f.ID, strings.Join(planned, ", "), target, ErrPlanned, elsewhere(f, target))
	}
	return nil, fmt.Errorf("%s has no mechanism for target %s", f.ID, target)
}

// chooseNamed is ChooseMechanism for a named mechanism.
func chooseNamed(f *Fault, name, target string, allowHardwareRisk bool) (*Mechanism, error) {
	m := f.Mechanism(name)
	switch {
	case m == nil:
		return nil, fmt.Errorf("%q is not a mechanism of %s (mechanisms: %s)", name, f.ID, strings.Join(mechanismNames(f), ", "))
	case slices.Contains(m.Targets, target):
		if m.Safety == SafetyHardwareRisk && !allowHardwareRisk {
			return nil, fmt.Errorf("%s of %s is %w; set spec.allowHardwareRisk to run it", name, f.ID, ErrHardwareRisk)
		}
		return m, nil
	case slices.Contains(m.Planned, target):
		var instead []string
		if len(m.Targets) > 0 {
			instead = append(instead, "it runs on "+strings.Join(m.Targets, " or ")+": use --target "+m.Targets[0])
		}
		if own := ownOn(f, target); own != "" {
			instead = append(instead, own)
		}
		if len(instead) == 0 {
			return nil, fmt.Errorf("%s: mechanism %s on target %s is %w%s", f.ID, name, target, ErrPlanned, elsewhere(f, target))
		}
		return nil, fmt.Errorf("%s: mechanism %s on target %s is %w; %s", f.ID, name, target, ErrPlanned, strings.Join(instead, ", or "))
	case len(m.Targets) > 0:
		// The mechanism exists, on other targets: the likely mistake is
		// the target, not the file.
		msg := fmt.Errorf("%q of %s runs on target %s, not %s: use --target %s", name, f.ID, strings.Join(m.Targets, " or "), target, m.Targets[0])
		if own := ownOn(f, target); own != "" {
			msg = fmt.Errorf("%w, or %s", msg, own)
		}
		return nil, msg
	}
	return nil, fmt.Errorf("%s: mechanism %s is %w anywhere yet (planned for %s)", f.ID, name, ErrPlanned, strings.Join(m.Planned, ", "))
}

// elsewhere says where f runs when nothing of it is built for target:
// "; the fault runs on twin: use --target twin"; "" when nowhere.
func elsewhere(f *Fault, target string) string {
	var on []string
	for _, m := range f.Mechanisms {
		for _, t := range m.Targets {
			if t != target && !slices.Contains(on, t) {
				on = append(on, t)
			}
		}
	}
	if len(on) == 0 {
		return ""
	}
	return "; the fault runs on " + strings.Join(on, " or ") + ": use --target " + on[0]
}

// ownOn offers leaving the mechanism out when f has a mechanism built for
// target: "leave the mechanism out to use local's own (kernel-log)"; ""
// when it has none.
func ownOn(f *Fault, target string) string {
	for _, m := range f.Mechanisms {
		if slices.Contains(m.Targets, target) {
			return "leave the mechanism out to use " + target + "'s own (" + m.Name + ")"
		}
	}
	return ""
}
