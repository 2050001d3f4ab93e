package procfault

import (
	"github.com/gpuchaos/gpuchaos/internal/catalog"
	"github.com/gpuchaos/gpuchaos/internal/fault"
)

// mechanisms maps each fault of this package to its mechanisms as the
// catalogue pairs them, for tests that build an injector by fault id.
var mechanisms = func() map[string][]string {
	m := map[string][]string{}
	for _, id := range faultIDs {
		if f, ok := catalog.Lookup(id); ok {
			m[id] = fault.Built(f, mechanismNames)
		}
	}
	return m
}()
