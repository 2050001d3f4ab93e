package catalog

import "slices"

// All returns every fault of the catalogue, ordered by family then id. The
// slice and the faults are shared: do not modify them.
func All() []*Fault { return faults }

// Lookup returns the fault with the given id.
func Lookup(id string) (*Fault, bool) {
	i := slices.IndexFunc(faults, func(f *Fault) bool { return f.ID == id })
	if i < 0 {
		return nil, false
	}
	return faults[i], true
}
