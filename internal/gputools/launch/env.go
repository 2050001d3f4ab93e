package launch

import (
	"fmt"
	"strings"
)

// Overlay returns base with the KEY=VALUE pairs of overlay applied: every
// variable the overlay names replaces all of base's entries of that name,
// and when the overlay names a variable twice the later pair wins. Base
// keeps its order; the overlay's variables follow it. An overlay entry that
// is not KEY=VALUE with a non-empty KEY, or that holds a NUL byte (which no
// environment can carry), is an error; base is taken as it is.
func Overlay(base, overlay []string) ([]string, error) {
	last := make(map[string]int, len(overlay))
	for i, kv := range overlay {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("environment overlay entry %q is not KEY=VALUE", kv)
		}
		if strings.IndexByte(kv, 0) >= 0 {
			return nil, fmt.Errorf("environment overlay entry %q holds a NUL byte", kv)
		}
		last[k] = i
	}
	out := make([]string, 0, len(base)+len(last))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, replaced := last[k]; replaced {
			continue
		}
		out = append(out, kv)
	}
	for i, kv := range overlay {
		k, _, _ := strings.Cut(kv, "=")
		if last[k] == i {
			out = append(out, kv)
		}
	}
	return out, nil
}
