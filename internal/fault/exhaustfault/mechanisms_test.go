package exhaustfault

import "github.com/gpuchaos/gpuchaos/internal/fault/faulttest"

var mechanisms = faulttest.FirstBuilt(Entries())

// mechanismOf returns the mechanism the catalogue pairs with a fault of
// this package, for tests that build an injector by fault id.
func mechanismOf(faultID string) (string, bool) {
	m, ok := mechanisms[faultID]
	return m, ok
}
