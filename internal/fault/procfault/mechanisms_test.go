package procfault

import "github.com/gpuchaos/gpuchaos/internal/fault/faulttest"

// mechanisms maps each fault of this package to its mechanisms as the
// catalogue pairs them, for tests that build an injector by fault id.
var mechanisms = faulttest.BuiltMechanisms(Entries())
