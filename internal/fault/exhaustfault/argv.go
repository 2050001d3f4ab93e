package exhaustfault

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/gputools/loadlimit"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// Bounds of a child's own duration.
const (
	// DefaultHold and HoldMargin are fault's; see fault.HoldFor.
	DefaultHold = fault.DefaultHold
	HoldMargin  = fault.HoldMargin
	// MaxHold is the commands' own cap on --duration.
	MaxHold = min(loadlimit.BurnDuration, loadlimit.ExhaustDuration)
)

// neighbourCeilingC is the temperature ceiling of the noisy neighbour's
// burn. The fault has no ceiling parameter, and every burn stops at one
// (DESIGN.md §7); this is exhaustion.sm-burn's default.
const neighbourCeilingC = 85

// readyFD is the descriptor the child finds its ready pipe on: the first
// of exec.Cmd.ExtraFiles.
const readyFD = "3"

// Entries lists the mechanisms this package runs as child processes and
// the faults each causes, for the registry (internal/fault/nodeall).
func Entries() []fault.Entry {
	node := fault.NodeTargets()
	return []fault.Entry{
		{Mechanism: "burn", Targets: node, New: newFromEnv, Faults: []string{"exhaustion.sm-burn", "exhaustion.thermal-soak", "exhaustion.noisy-neighbour"}},
		{Mechanism: "cuda-malloc", Targets: node, New: newFromEnv, Faults: []string{"exhaustion.vram"}},
		{Mechanism: "cuda-memcpy", Targets: node, New: newFromEnv, Faults: []string{"exhaustion.pcie"}},
	}
}

func newFromEnv(f *catalog.Fault, m *catalog.Mechanism, env fault.Env) (fault.Injector, error) {
	dir, err := env.StateSubdir(f, m, "proc")
	if err != nil {
		return nil, err
	}
	in, err := New(f, m, Options{Exec: env.Exec, StateDir: dir})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// childDuration is the --duration of a child started at now: until the
// context's hold time plus HoldMargin (DefaultHold without one), at least
// HoldMargin, at most MaxHold, rounded up to whole seconds.
func childDuration(ctx context.Context, now time.Time) time.Duration {
	d := min(fault.HoldFor(ctx, now), MaxHold)
	if r := d % time.Second; r != 0 {
		d += time.Second - r
	}
	return min(d, MaxHold)
}

// commands returns the argv, after the binary, of each child a fault
// starts on a GPU (index in PCI bus order, as NVML and the commands number
// them) for duration d. It checks the values it uses, so that a bad value
// fails here rather than as a child's usage error.
func commands(faultID string, gpu int, v catalog.Values, d time.Duration) ([][]string, error) {
	if gpu < 0 {
		return nil, fmt.Errorf("gpu %d: must not be negative", gpu)
	}
	if d < time.Second || d > MaxHold {
		return nil, fmt.Errorf("duration %s: must be between 1s and %s", d, MaxHold)
	}
	g := strconv.Itoa(gpu)
	dur := strconv.FormatInt(int64(d/time.Second), 10) + "s"
	// burnCmd builds a burn; a duty cycle goes in extra.
	burnCmd := func(ceiling int64, extra ...string) ([]string, error) {
		if ceiling <= 0 {
			return nil, fmt.Errorf("ceiling %d °C: must be positive", ceiling)
		}
		a := append([]string{"burn", "--gpus", g, "--duration", dur}, extra...)
		return append(a, "--temp-ceiling", strconv.FormatInt(ceiling, 10), "--format", "json", "--ready-fd", readyFD), nil
	}
	duty := func(name string, x float64) ([]string, error) {
		if !(x > 0 && x <= 1) { // written so that NaN fails too
			return nil, fmt.Errorf("%s %g: must be above 0 and at most 1", name, x)
		}
		return []string{"--duty", formatFloat(x)}, nil
	}
	vram := func(fraction float64) ([]string, error) {
		if !(fraction > 0 && fraction <= loadlimit.ExhaustFraction) {
			return nil, fmt.Errorf("memory fraction %g: must be above 0 and at most %g", fraction, loadlimit.ExhaustFraction)
		}
		return []string{"exhaust", "vram", "--gpu", g, "--fraction", formatFloat(fraction), "--duration", dur,
			"--format", "json", "--ready-fd", readyFD}, nil
	}
	var (
		out   [][]string
		a     []string
		cycle []string
		err   error
	)
	switch faultID {
	case "exhaustion.sm-burn":
		if cycle, err = duty("load", v.Float("load")); err == nil {
			a, err = burnCmd(v.Int("ceiling"), cycle...)
		}
		out = append(out, a)
	case "exhaustion.thermal-soak":
		a, err = burnCmd(v.Int("ceiling"))
		out = append(out, a)
	case "exhaustion.vram":
		a, err = vram(v.Float("fraction"))
		out = append(out, a)
	case "exhaustion.pcie":
		rate := v.Int("rate")
		if rate <= 0 || rate > loadlimit.ExhaustRate {
			return nil, fmt.Errorf("rate %d bytes/s: must be above 0 and at most %d", rate, int64(loadlimit.ExhaustRate))
		}
		out = append(out, []string{"exhaust", "pcie", "--gpu", g, "--duration", dur, "--rate", strconv.FormatInt(rate, 10),
			"--format", "json", "--ready-fd", readyFD})
	case "exhaustion.noisy-neighbour":
		if cycle, err = duty("share", v.Float("share")); err == nil {
			a, err = burnCmd(neighbourCeilingC, cycle...)
		}
		out = append(out, a)
		if m := v.Float("memory"); m != 0 && err == nil {
			a, err = vram(m)
			out = append(out, a)
		}
	default:
		return nil, fmt.Errorf("fault %s has no child-process mechanism", faultID)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// formatFloat writes a float as the commands' flags read it back, exactly.
func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
