package catalog

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Values are a fault's parameters after defaults and parsing: every
// parameter of the fault is present with a value of its type (int64 for int
// and bytes, float64, time.Duration, string, bool, netip.Prefix).
type Values map[string]any

// Int returns an int or bytes parameter.
func (v Values) Int(name string) int64 { x, _ := v[name].(int64); return x }

// Float returns a float parameter.
func (v Values) Float(name string) float64 { x, _ := v[name].(float64); return x }

// Duration returns a duration parameter.
func (v Values) Duration(name string) time.Duration { x, _ := v[name].(time.Duration); return x }

// String returns a string or enum parameter.
func (v Values) String(name string) string { x, _ := v[name].(string); return x }

// Bool returns a bool parameter.
func (v Values) Bool(name string) bool { x, _ := v[name].(bool); return x }

// Prefix returns a cidr parameter.
func (v Values) Prefix(name string) netip.Prefix { x, _ := v[name].(netip.Prefix); return x }

// ParamError is a bad parameter; Param names it so callers can build a field
// path (spec.faults[1].params.code).
type ParamError struct {
	Param string
	Err   error
}

func (e *ParamError) Error() string { return e.Param + ": " + e.Err.Error() }
func (e *ParamError) Unwrap() error { return e.Err }

// Resolve checks raw parameters against the fault's declarations and fills
// defaults. Unknown names, unparsable values and values out of bounds are
// *ParamError.
func (f *Fault) Resolve(raw map[string]string) (Values, error) {
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if f.Param(k) == nil {
			known := make([]string, len(f.Params))
			for i, p := range f.Params {
				known[i] = p.Name
			}
			return nil, &ParamError{k, fmt.Errorf("unknown parameter of %s (known: %s)", f.ID, strings.Join(known, ", "))}
		}
	}
	out := make(Values, len(f.Params))
	for _, p := range f.Params {
		text, ok := raw[p.Name]
		if !ok {
			text = p.Default
		}
		val, err := p.Parse(text)
		if err != nil {
			return nil, &ParamError{p.Name, err}
		}
		out[p.Name] = val
	}
	if f.Check != nil {
		if err := f.Check(out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ActsInNetNS reports whether f acts in a network namespace: its pid
// parameter names the namespace (a pod's, through one of its processes)
// beside an interface in it, as the network and ebpf faults' do. The k8s
// target aims such a fault at pods by it, and the node agent resolves a
// pod's namespace rather than its rank's process for it.
func (f *Fault) ActsInNetNS() bool { return f.Param("interface") != nil && f.Param("pid") != nil }

// Param returns the declaration of a parameter, or nil.
func (f *Fault) Param(name string) *Param {
	for i := range f.Params {
		if f.Params[i].Name == name {
			return &f.Params[i]
		}
	}
	return nil
}

// Parse parses and bounds-checks one value of the parameter's type.
func (p *Param) Parse(text string) (any, error) {
	switch p.Type {
	case ParamInt, ParamBytes:
		parse := func(s string) (int64, error) { return strconv.ParseInt(strings.TrimSpace(s), 10, 64) }
		if p.Type == ParamBytes {
			parse = ParseBytes
		}
		v, err := parse(text)
		if err != nil {
			return nil, fmt.Errorf("%q is not a valid %s", text, p.Type)
		}
		if err := bound(p, float64(v), func(s string) (float64, error) { x, err := parse(s); return float64(x), err }); err != nil {
			return nil, err
		}
		return v, nil
	case ParamFloat:
		v, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%q is not a number", text)
		}
		if err := bound(p, v, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }); err != nil {
			return nil, err
		}
		return v, nil
	case ParamDuration:
		v, err := time.ParseDuration(strings.TrimSpace(text))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (use 30s, 5m, 1h)", text)
		}
		if err := bound(p, float64(v), func(s string) (float64, error) { d, err := time.ParseDuration(s); return float64(d), err }); err != nil {
			return nil, err
		}
		return v, nil
	case ParamBool:
		v, err := strconv.ParseBool(strings.TrimSpace(text))
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", text)
		}
		return v, nil
	case ParamEnum:
		if !slices.Contains(p.Enum, text) {
			return nil, fmt.Errorf("%q is not one of %s", text, strings.Join(p.Enum, ", "))
		}
		return text, nil
	case ParamCIDR:
		v, err := netip.ParsePrefix(strings.TrimSpace(text))
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR prefix such as 10.0.0.0/24", text)
		}
		return v.Masked(), nil
	case ParamString:
		return text, nil
	}
	return nil, fmt.Errorf("parameter type %q is not known", p.Type)
}

func bound(p *Param, v float64, parse func(string) (float64, error)) error {
	if p.Min != "" {
		if lo, err := parse(p.Min); err == nil && v < lo {
			return fmt.Errorf("%s is below the minimum %s", fmtNum(v, p), p.Min)
		}
	}
	if p.Max != "" {
		if hi, err := parse(p.Max); err == nil && v > hi {
			return fmt.Errorf("%s is above the maximum %s", fmtNum(v, p), p.Max)
		}
	}
	return nil
}

func fmtNum(v float64, p *Param) string {
	if p.Type == ParamDuration {
		return time.Duration(v).String()
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// ParseBytes reads a byte count: a plain integer, or one with a decimal
// (K, M, G, T) or binary (Ki, Mi, Gi, Ti) suffix, optionally followed by B.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSuffix(strings.TrimSpace(s), "B")
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a byte count", s)
	}
	if n > math.MaxInt64/mult {
		// A wrapped product would pass every range check as a small or
		// negative count.
		return 0, fmt.Errorf("%q bytes is more than %d", s, int64(math.MaxInt64))
	}
	return n * mult, nil
}
