package gpuproc

import (
	"slices"

	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/fault"
)

// mechanismOf returns the mechanism the catalogue pairs with a fault of
// this package, for tests that build an injector by fault id.
func mechanismOf(faultID string) (string, bool) {
	f, ok := catalog.Lookup(faultID)
	if !ok || !slices.Contains(faultIDs, faultID) {
		return "", false
	}
	built := fault.Built(f, mechanismNames)
	if len(built) == 0 {
		return "", false
	}
	return built[0], true
}
